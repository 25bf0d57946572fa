"""Developer sessions. The README test command runs everything in one pytest
invocation; these sessions run the same checks piecewise in fresh virtualenvs.

    nox -s tests            # the whole suite (real servers started by the tests)
    nox -s contract-sqlite  # the contract suite on one backend
    nox -s lint types imports
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "types", "imports", "tests"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"
CONTRACT_PATHS = {
    "memory": ["tests/contract"],
    "sqlite": ["tests/sqlite/test_sqlite_contract.py"],
    "redis": ["tests/redis/test_redis_contract.py"],
    "postgres": ["tests/postgres/test_contract.py"],
    "qdrant": ["tests/qdrant/test_contract.py"],
}


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole test suite under the CI hypothesis profile."""
    session.install("-e", ".[test]")
    session.run("pytest", "-q", *session.posargs, env={"HYPOTHESIS_PROFILE": "ci"})


@nox.session(python=PYTHON, name="contract")
@nox.parametrize("backend", list(CONTRACT_PATHS))
def contract(session: nox.Session, backend: str) -> None:
    """The shipped contract suite on one backend (nox -s 'contract(backend="redis")')."""
    session.install("-e", ".[test]")
    session.run("pytest", "-q", *CONTRACT_PATHS[backend], *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff")
    session.run("ruff", "check", "src", "tests", "benchmarks")
    session.run("ruff", "format", "--check", "src", "tests", "benchmarks")


@nox.session(python=PYTHON)
def types(session: nox.Session) -> None:
    """mypy --strict on the package."""
    session.install("-e", ".[test]")
    session.run("mypy")


@nox.session(python=PYTHON)
def imports(session: nox.Session) -> None:
    """The architecture's import rules (import-linter, configured in pyproject.toml)."""
    session.install("-e", ".", "import-linter")
    session.run("lint-imports")

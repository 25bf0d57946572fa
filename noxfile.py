"""Developer sessions. The README test command runs everything in one pytest
invocation; these sessions run the same checks piecewise in fresh virtualenvs.

    nox -s tests            # the whole suite, on every supported Python found here
    nox -s wheel            # the built wheel, installed as users install it
    nox -s 'contract(backend="sqlite")'   # the contract suite on one backend
    nox -s lint types imports

The contract suite's pytest, pytest-asyncio and hypothesis come with the
`conformance` extra (the base install has none of them); its pytest plugin is
opt-in (`pytest -p agent_memory.contract_tests.plugin`).
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import nox

nox.options.sessions = ["lint", "types", "imports", "tests", "wheel"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = False

ROOT = Path(__file__).parent
PYTHON = "3.11"


def supported_pythons() -> list[str]:
    """Every minor version `requires-python` admits (up to 3.14) that this
    machine has an interpreter for; always the minimum."""
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    match = re.fullmatch(r">=\s*3\.(\d+)", spec.strip())
    assert match, f"update supported_pythons() for requires-python {spec!r}"
    low = int(match.group(1))
    found = [f"3.{m}" for m in range(low, 15) if shutil.which(f"python3.{m}")]
    return found or [f"3.{low}"]


PYTHONS = supported_pythons()
CONTRACT_PATHS = {
    "memory": ["tests/contract"],
    "sqlite": ["tests/sqlite/test_sqlite_contract.py"],
    "redis": ["tests/redis/test_redis_contract.py"],
    "postgres": ["tests/postgres/test_contract.py"],
    "qdrant": ["tests/qdrant/test_contract.py"],
}


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """The whole test suite under the CI hypothesis profile (editable install)."""
    session.install("-e", ".[test]")
    session.run("pytest", "-q", *session.posargs, env={"HYPOTHESIS_PROFILE": "ci"})


@nox.session(python=PYTHONS)
def wheel(session: nox.Session) -> None:
    """Build the wheel and test it installed, not editable: the package data
    (`py.typed`), the `agent-memory` entry point, the conformance extra and the
    opt-in plugin, the README example and typing seen from outside the tree."""
    dist = Path(session.create_tmp()).resolve() / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.install("build")
    session.run("python", "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT))
    (built,) = dist.glob("agent_memory-*.whl")
    session.install(f"{built}[conformance]", "mypy")
    work = Path(session.create_tmp()).resolve() / "outside"
    work.mkdir(exist_ok=True)
    session.chdir(work)  # nothing may resolve to the source tree
    session.run(
        "python",
        "-c",
        "import agent_memory, pathlib, importlib.metadata as m;"
        "root = pathlib.Path(agent_memory.__file__).parent;"
        "assert 'site-packages' in str(root), root;"
        "assert (root / 'py.typed').is_file(), 'py.typed is missing from the wheel';"
        "assert agent_memory.__version__ == m.version('agent-memory');"
        "eps = m.entry_points(group='console_scripts');"
        "assert any(e.name == 'agent-memory' for e in eps), 'no agent-memory entry point'",
    )
    session.run("agent-memory", "--version")
    session.run("agent-memory", "demo")
    session.run("agent-memory", "doctor", "--url", "sqlite:doctor.db")
    script = work / "typed.py"
    script.write_text(
        "from agent_memory.sync import connect\n"
        "with connect('memory://wheel') as memory:\n"
        "    reveal_type(memory.users.forget('u1'))\n"
    )
    out = session.run("mypy", "--strict", str(script), silent=True)
    assert isinstance(out, str), out
    assert "ForgetReceipt" in out, out
    # the conformance extra and its opt-in plugin, as a backend author uses them
    session.run("agent-memory", "conformance", "sqlite:conformance.db", "-q")


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

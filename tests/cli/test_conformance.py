"""`agent-memory conformance`, run as a user runs it (a real subprocess): the
preflight fails fast with a distinct exit code, PASS means every claimed port
was tested, failures are reported under the clause their test exists for, and a
run leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import background
from agent_memory.entrypoints.cli.conformance import (
    EXIT_FAILED,
    EXIT_NOT_INSTALLED,
    EXIT_PASSED,
    EXIT_PREFLIGHT,
    EXIT_USAGE,
)


class Run:
    def __init__(self, code: int | None, out: str, err: str, seconds: float) -> None:
        self.code = code
        self.out = out
        self.err = err
        self.seconds = seconds

    @property
    def text(self) -> str:
        return self.out + self.err

    def tail(self) -> str:
        return f"exit {self.code} after {self.seconds:.1f}s\n{self.out[-4000:]}\n{self.err[-3000:]}"


def _command(
    args: tuple[str, ...], tmpdir: Path | None, prelude: str
) -> tuple[list[str], dict[str, str]]:
    """argv and environment for `python -m agent_memory.entrypoints.cli conformance ARGS` (or,
    with `prelude`, the same main() after running that code, e.g. to hide an
    installed module)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_MEMORY_", "HYPOTHESIS"))}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    if prelude:
        code = (
            f"{prelude}\nimport sys\nfrom agent_memory.entrypoints.cli import main\n"
            f"sys.exit(main(['conformance', *{list(args)!r}]))"
        )
        return [sys.executable, "-c", code], env
    return [sys.executable, "-m", "agent_memory.entrypoints.cli", "conformance", *args], env


def conformance(
    *args: str,
    cwd: Path | None = None,
    tmpdir: Path | None = None,
    prelude: str = "",
    timeout: float = 600,
) -> Run:
    """Run `agent-memory conformance ARGS` now, in this test."""
    cmd, env = _command(args, tmpdir, prelude)
    started = time.monotonic()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout, check=False
    )
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)


def conformance_job(name: str, *args: str, files: dict[str, str | Path] | None = None) -> None:
    """Register `agent-memory conformance ARGS` as the background job `name`
    (tests/background.py): it runs in `<workdir>/work` with TMPDIR
    `<workdir>/tmp`, after `files` (name -> source, dedented, or a file whose
    text is read when the job starts, not at collection) are written into
    `<workdir>/work`; `{work}` in an argument is replaced by that directory."""

    @background.job(name)
    def _prepare(workdir: Path) -> background.Command:
        work, tmp = workdir / "work", workdir / "tmp"
        work.mkdir()
        tmp.mkdir()
        for filename, source in (files or {}).items():
            text = source.read_text(encoding="utf-8") if isinstance(source, Path) else source
            write(work / filename, text)
        cmd, env = _command(tuple(a.replace("{work}", str(work)) for a in args), tmp, "")
        return background.Command(cmd, cwd=work, env=env)


def background_run(name: str) -> tuple[Run, Path, Path]:
    """The job's run, its work directory and its TMPDIR."""
    result = background.result(name)
    run = Run(result.returncode, result.stdout, result.stderr, result.seconds)
    return run, result.workdir / "work", result.workdir / "tmp"


def write(path: Path, source: str) -> Path:
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


# ------------------------------------------------------------------ preflight


def test_a_non_store_fails_preflight_before_any_test_naming_what_is_missing(
    tmp_path: Path,
) -> None:
    """`--factory builtins:object` used to report 323 skips and PASS. Preflight
    stops it before the suite is collected (no pytest output at all), which is
    what keeps it fast; no wall-clock bound is asserted (a loaded machine)."""
    run = conformance("--factory", "builtins:object", cwd=tmp_path, timeout=60)
    assert run.code == EXIT_PREFLIGHT, run.tail()
    for pytest_output in ("collected", "passed", "skipped", "test session starts"):
        assert pytest_output not in run.out + run.err, run.tail()
    assert "serves none of the ports" in run.err
    for needed in ("missing space, add, get", "ping", "append", "acquire", "delete_prefix"):
        assert needed in run.err, run.tail()
    assert "no test ran" in run.err
    assert "PASS" not in run.out


def test_a_misnamed_method_is_named(tmp_path: Path) -> None:
    """A store whose `ping` was renamed used to have all its tests skipped."""
    write(
        tmp_path / "renamed.py",
        """
        from agent_memory.adapters.memory import InMemoryMemoryStore
        from agent_memory.domain.records import EmbeddingSpace


        class Store(InMemoryMemoryStore):
            ping = None  # hide the inherited one

            async def pong(self):
                return None


        def make():
            return Store(EmbeddingSpace("acme", 8))
        """,
    )
    run = conformance("--factory", "renamed:make", cwd=tmp_path, timeout=60)
    assert run.code == EXIT_PREFLIGHT, run.tail()
    assert "MemoryStore (store)" in run.err
    assert "ping is not a method" in run.err or "missing ping" in run.err, run.tail()


def test_a_misspelt_method_gets_a_suggestion(tmp_path: Path) -> None:
    write(
        tmp_path / "misspelt.py",
        """
        from agent_memory.adapters.memory import InMemoryCache


        class Cache:
            def __init__(self):
                self._inner = InMemoryCache()

            async def get(self, scope, key):
                return await self._inner.get(scope, key)

            async def put(self, scope, key, value, ttl=None):
                await self._inner.put(scope, key, value, ttl)

            async def delete(self, scope, key):
                return await self._inner.delete(scope, key)

            async def delete_prefixes(self, scope, prefix):
                return await self._inner.delete_prefix(scope, prefix)

            async def ping(self):
                await self._inner.ping()

            def close(self):  # not async
                pass


        def make():
            return {"cache": Cache()}
        """,
    )
    run = conformance("--factory", "misspelt:make", cwd=tmp_path, timeout=60)
    assert run.code == EXIT_PREFLIGHT, run.tail()
    assert "missing delete_prefix (found 'delete_prefixes': misnamed?)" in run.err, run.tail()
    assert "close is not async" in run.err, run.tail()


def test_a_raising_factory_is_reported_once(tmp_path: Path) -> None:
    write(
        tmp_path / "raising.py",
        """
        def make():
            raise TypeError("make() is missing the space")
        """,
    )
    run = conformance("--factory", "raising:make", cwd=tmp_path, timeout=60)
    assert run.code == EXIT_PREFLIGHT, run.tail()
    assert run.text.count("the factory raised TypeError: make() is missing the space") == 1
    assert 'raising.py", line 3, in make' in run.err, "the user's frame is shown"
    assert "conformance.py" not in run.err, "the harness' own frames are not"


def test_an_unreachable_server_fails_preflight_with_the_connection_error(tmp_path: Path) -> None:
    run = conformance("redis://127.0.0.1:1", cwd=tmp_path, tmpdir=tmp_path, timeout=60)
    assert run.code == EXIT_PREFLIGHT, run.tail()
    assert run.seconds < 10, run.tail()
    assert "Error 111 connecting to 127.0.0.1:1" in run.err, run.tail()
    assert run.err.count("Error 111") == 1, "one line for all four ports, not four"
    assert "Traceback" not in run.text


def test_a_missing_backend_extra_prints_the_install_line(tmp_path: Path) -> None:
    run = conformance(
        "redis://127.0.0.1:6379", cwd=tmp_path, prelude="import sys; sys.modules['redis'] = None"
    )
    assert run.code == EXIT_PREFLIGHT, run.tail()
    assert "pip install 'agent-memory[redis]'" in run.err, run.tail()
    assert len(run.text.splitlines()) < 10, run.tail()


def test_without_the_conformance_extra_it_prints_the_install_line(tmp_path: Path) -> None:
    hide = "import sys; sys.modules.update(pytest=None, pytest_asyncio=None, hypothesis=None)"
    run = conformance("memory://", cwd=tmp_path, prelude=hide, timeout=60)
    assert run.code == EXIT_NOT_INSTALLED, run.tail()
    assert "pip install 'agent-memory[conformance]'" in run.err


_IMPORTS_WITHOUT_TEST_TOOLS = textwrap.dedent(
    """
    import importlib, pkgutil, sys
    sys.modules.update(pytest=None, pytest_asyncio=None, hypothesis=None, _pytest=None)
    import agent_memory
    failed = []
    for info in pkgutil.walk_packages(agent_memory.__path__, "agent_memory."):
        name = info.name
        if name.startswith("agent_memory.contract_tests") or name.endswith("__main__"):
            continue  # __main__ runs the CLI when imported
        try:
            importlib.import_module(name)
        except ImportError as exc:
            if "pytest" in str(exc) or "hypothesis" in str(exc):
                failed.append(f"{name}: {exc}")
    from agent_memory.contract_tests import Capabilities  # a plain value: no pytest
    try:
        from agent_memory.contract_tests import MemoryStoreContract
    except ImportError as exc:
        assert "pip install 'agent-memory[conformance]'" in str(exc), exc
    else:
        failed.append("the contract classes imported without pytest")
    print("FAILED", failed)
    sys.exit(1 if failed else 0)
    """
)


@background.job("conformance-imports")
def _imports_job(workdir: Path) -> background.Command:
    return background.Command(
        [sys.executable, "-c", _IMPORTS_WITHOUT_TEST_TOOLS], cwd=workdir, timeout=300
    )


@pytest.mark.background("conformance-imports")
def test_the_package_imports_without_pytest_and_hypothesis() -> None:
    """Every module but the contract suite imports with the test tools absent."""
    result = background.result("conformance-imports")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_no_pytest_plugin_is_registered_for_every_environment() -> None:
    from importlib.metadata import entry_points

    names = [ep.value for ep in entry_points(group="pytest11")]
    assert not [n for n in names if n.startswith("agent_memory")], names


def test_bad_arguments_are_a_usage_error(tmp_path: Path) -> None:
    run = conformance("--factory", "no_such_module:make", cwd=tmp_path, timeout=60)
    assert run.code == EXIT_USAGE, run.tail()
    assert "cannot import 'no_such_module'" in run.err


def test_the_help_documents_the_exit_codes() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agent_memory.entrypoints.cli", "conformance", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    flat = " ".join(proc.stdout.split())
    for code in (
        "0 PASS",
        "1 FAIL",
        "2 bad arguments",
        "3 preflight failed",
        "4 the 'conformance'",
    ):
        assert code in flat, flat
    assert "--keep" in flat


# ----------------------------------------------------------------- the verdict


_BROKEN_LIST = """
from agent_memory.contract_tests import Capabilities

import broken_stores
from agent_memory.domain.records import EmbeddingSpace


def make():
    return {"store": broken_stores.AscendingList(EmbeddingSpace("acme", 16))}


make.capabilities = Capabilities(reopen=False, keyword_search=True)
"""


_BROKEN_STORES = Path(__file__).resolve().parents[1] / "broken" / "broken_stores.py"
conformance_job(
    "conformance-primary-clause",
    "--factory", "acme_list:make", "-q", "-k", "list or large_batch or no_match",
    files={"acme_list.py": _BROKEN_LIST, "broken_stores.py": _BROKEN_STORES},
)  # fmt: skip


@pytest.mark.background("conformance-primary-clause")
def test_failures_are_reported_under_their_primary_clause() -> None:
    """A store whose list pages oldest first used to be reported as MS-ADD-8 and
    MS-DEL-2 before MS-LIST-1: the list clauses are primary, the tests that only
    read through list are secondary."""
    run, _, _ = background_run("conformance-primary-clause")
    assert run.code == EXIT_FAILED, run.tail()
    table_row = next(line for line in run.out.splitlines() if line.startswith("store "))
    primary, _, secondary = table_row.partition("(secondary:")
    assert "MS-LIST-1" in primary, table_row
    assert "MS-ADD-8" not in primary, table_row
    assert "MS-ADD-8" in secondary, table_row
    primaries = run.out.split("failed clauses (each", 1)[1].split("secondary (", 1)[0]
    assert "[MS-LIST-1]" in primaries
    assert "[MS-ADD-8]" not in primaries
    assert "[MS-ADD-8] store test_add_large_batch failed on [MS-LIST-1]" in run.out, run.tail()
    assert "PytestAssertRewriteWarning" not in run.text
    assert "conformance: FAIL" in run.out


_ACME_VEC = """
import attrs
import numpy as np

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.contract_tests import Capabilities
from agent_memory.domain.records import EmbeddingSpace


class Store(InMemoryMemoryStore):
    async def get(self, owner, id):
        got = await super().get(owner, id)
        if got is None:
            return None
        v = got.vector.copy()
        v[3] += 0.5
        return attrs.evolve(got, vector=v)


def make():
    return Store(EmbeddingSpace("acme", 16))


make.capabilities = Capabilities(reopen=False, keyword_search=True)
"""
conformance_job(
    "conformance-vector-mismatch",
    "--factory", "acme_vec:make", "-k", "round_trips_every_field",
    files={"acme_vec.py": _ACME_VEC},
)  # fmt: skip


@pytest.mark.background("conformance-vector-mismatch")
def test_a_vector_mismatch_shows_the_index_and_both_values() -> None:
    run, _, _ = background_run("conformance-vector-mismatch")
    assert run.code == EXIT_FAILED, run.tail()
    assert "[MS-ADD-1] the vector round-trips to float32 precision; vector[3]: wanted" in run.out
    assert ", got " in run.out.split("vector[3]: wanted", 1)[1].splitlines()[0]
    assert "PytestAssertRewriteWarning" not in run.text


_ACME_KW = """
from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.contract_tests import Capabilities
from agent_memory.domain.records import EmbeddingSpace


def make():
    return InMemoryMemoryStore(EmbeddingSpace("acme", 16))


make.capabilities = Capabilities(reopen=False, keyword_search=False)
"""
conformance_job(
    "conformance-all-skip",
    "--factory", "acme_kw:make", "-k", "keyword",
    files={"acme_kw.py": _ACME_KW},
)  # fmt: skip


@pytest.mark.background("conformance-all-skip")
def test_a_port_whose_tests_all_skip_is_not_pass() -> None:
    run, _, _ = background_run("conformance-all-skip")
    assert run.code == EXIT_FAILED, run.tail()
    assert "not PASS: store: every test was skipped" in run.out
    assert "keyword_search not declared" in run.out.split("skipped:", 1)[1], run.tail()
    assert "conformance: FAIL" in run.out


_ACME_REOPEN = """
from agent_memory.adapters.memory import InMemoryMemoryStore, MemoryBackend
from agent_memory.contract_tests import Capabilities
from agent_memory.domain.records import EmbeddingSpace

SPACE = EmbeddingSpace("acme", 16)


class Factory:
    capabilities = Capabilities(keyword_search=True)  # reopen=True by default

    def __call__(self):
        return InMemoryMemoryStore(SPACE, MemoryBackend())

    def reopen(self, store):
        return InMemoryMemoryStore(SPACE, store.backend)


factory = Factory()
"""
conformance_job(
    "conformance-factory-reopen",
    "--factory", "acme_reopen:factory", "-k", "close",
    files={"acme_reopen.py": _ACME_REOPEN},
)  # fmt: skip


@pytest.mark.background("conformance-factory-reopen")
def test_a_factory_object_supplies_reopen_for_the_close_race_clauses() -> None:
    run, _, _ = background_run("conformance-factory-reopen")
    assert run.code == EXIT_PASSED, run.tail()
    for test in ("test_close_racing_writes", "test_close_keeps_data"):
        assert f"{test} PASSED" in run.out, run.tail()
    assert "skipped:" not in run.out


def test_declared_reopen_without_one_fails_preflight_with_cli_advice(tmp_path: Path) -> None:
    write(
        tmp_path / "acme_noreopen.py",
        """
        from agent_memory.adapters.memory import InMemoryMemoryStore
        from agent_memory.contract_tests import Capabilities
        from agent_memory.domain.records import EmbeddingSpace


        def make():
            return InMemoryMemoryStore(EmbeddingSpace("acme", 16))


        make.capabilities = Capabilities()
        """,
    )
    run = conformance("--factory", "acme_noreopen:make", cwd=tmp_path, timeout=60)
    assert run.code == EXIT_PREFLIGHT, run.tail()
    assert "reopen(obj)" in run.err
    assert "override" not in run.err


# ----------------------------------------------------------------- no litter


conformance_job("conformance-pass-memory", "memory://", "-q")
conformance_job("conformance-pass-sqlite", "sqlite:///{work}/x.db", "-q")


@pytest.mark.parametrize(
    "scheme",
    [
        pytest.param(scheme, marks=pytest.mark.background(f"conformance-pass-{scheme}"))
        for scheme in ("memory", "sqlite")
    ],
)
def test_a_passing_run_leaves_no_files(scheme: str) -> None:
    run, work, tmpdir = background_run(f"conformance-pass-{scheme}")
    assert run.code == EXIT_PASSED, run.tail()
    table = run.out.split("port ", 1)[1]
    for port in ("store", "events", "leases", "cache"):
        assert f"\n{port}" in table, f"{port} missing from the summary table"
    assert "conformance: PASS" in run.out
    assert "PytestAssertRewriteWarning" not in run.text
    assert "Warning" not in run.text, run.tail()
    assert list(tmpdir.iterdir()) == [], list(tmpdir.rglob("*"))[:20]
    assert list(work.iterdir()) == [], list(work.rglob("*"))[:20]


conformance_job("conformance-keep", "sqlite:///{work}/x.db", "-q", "--keep", "-k", "canary")


@pytest.mark.background("conformance-keep")
def test_keep_keeps_the_sqlite_files_and_generated_tests() -> None:
    run, work, tmpdir = background_run("conformance-keep")
    assert run.code == EXIT_PASSED, run.tail()
    assert list(work.glob("x.conformance-*/*.db")), list(work.rglob("*"))
    assert list(tmpdir.glob("agent-memory-conformance-*/test_conformance_store.py"))


def test_postgres_run_drops_its_schemas(postgres_url: str, tmp_path: Path) -> None:
    import psycopg

    run = conformance(postgres_url, "-q", "-k", "canary", cwd=tmp_path, tmpdir=tmp_path)
    assert run.code == EXIT_PASSED, run.tail()
    with psycopg.connect(postgres_url) as conn:
        left = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'agent_memory_conformance%'"
        ).fetchall()
    assert left == [], left

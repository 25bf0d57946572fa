"""docs/writing-a-backend.md cannot rot: its Python blocks, concatenated in
order, form a test module whose dict MemoryStore must pass the MemoryStore
contract and whose sqlite3 Cache the Cache contract (skipping only the optional
tests the examples honestly do not declare), its CLI factories must pass
`agent-memory conformance`, and it lists every clause id of the suite."""

from __future__ import annotations

import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import background

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-a-backend.md"
CONTRACTS = Path(__file__).resolve().parents[2] / "src" / "agent_memory" / "contract_tests"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
#: A clause id as the contract modules write it: MS-ADD-1, EL-UNTIL-2, C-RT-1...
_CLAUSE_ID = re.compile(r"(?<![\w-])(?:MS|EL|LS|C|TS|AL)-[A-Z]+-[0-9]+(?!\.\.|[\w-])")


def _example_code() -> str:
    blocks = _BLOCK.findall(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 3, f"expected the store, contract and strategy blocks in {DOC}"
    return "\n\n".join(blocks)


def _clause_ids(text: str) -> set[str]:
    return set(_CLAUSE_ID.findall(text))


def test_doc_lists_every_clause_id() -> None:
    """When this fails, a contract module asserts (or documents) a clause id the
    how-to's clause lists do not name: add it, with its rule, to section 10."""
    used: set[str] = set()
    for module in sorted(CONTRACTS.glob("*.py")):
        used |= _clause_ids(module.read_text(encoding="utf-8"))
    assert len(used) > 150, f"the clause pattern no longer matches the suite's ids: {used}"
    listed = {m.group(1) for m in re.finditer(r"^- `([A-Z]+-[A-Z]+-[0-9]+)` ", _doc(), re.M)}
    missing = sorted(used - listed)
    assert not missing, f"clause ids missing from the lists in {DOC.name}: {missing}"
    unknown = sorted(listed - used)
    assert not unknown, f"{DOC.name} lists clause ids the suite does not have: {unknown}"


def test_clause_check_fails_on_a_missing_clause() -> None:
    """The check above can fail: a doc without one listed id misses exactly it."""
    doc = _doc()
    assert "- `C-TTL-2` " in doc
    listed = {m.group(1) for m in re.finditer(r"^- `([A-Z]+-[A-Z]+-[0-9]+)` ", doc, re.M)}
    shorter = doc.replace("- `C-TTL-2` ", "- ", 1)
    left = {m.group(1) for m in re.finditer(r"^- `([A-Z]+-[A-Z]+-[0-9]+)` ", shorter, re.M)}
    assert listed - left == {"C-TTL-2"}
    assert _clause_ids("[MS-ISO-10] x; EL-UNTIL-2, C-RT-1.") == {
        "MS-ISO-10",
        "EL-UNTIL-2",
        "C-RT-1",
    }
    assert _clause_ids("MS-ISO-1..6 and MS-CLOSE-3/4/5") == {"MS-CLOSE-3"}


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_doc_blocks_compile() -> None:
    """When this fails, a code block in the how-to is not valid Python."""
    compile(_example_code(), str(DOC), "exec")


@background.job("doc-example-contract")
def _doc_example_job(work: Path) -> background.Command:
    (work / "test_doc_example.py").write_text(_example_code(), encoding="utf-8")
    # pytest-asyncio's default (strict) mode: the contract marks its own tests.
    (work / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"
    )
    (work / "conftest.py").write_text(
        "from hypothesis import settings\n"
        "settings.register_profile('doc', max_examples=20, deadline=None)\n"
        "settings.load_profile('doc')\n"
    )
    argv = [
        sys.executable, "-m", "pytest", "-q", "--tb=short", "-p", "no:cacheprovider",
        "-c", str(work / "pytest.ini"), "--rootdir", str(work),
        f"--junitxml={work / 'report.xml'}",
        "-p", "agent_memory.contract_tests.plugin",
        "-W", "error::pytest.PytestDeprecationWarning",
        str(work / "test_doc_example.py"),
    ]  # fmt: skip
    return background.Command(argv, cwd=work, timeout=600)


@pytest.mark.background("doc-example-contract")
def test_doc_example_passes_the_contract() -> None:
    """When this fails, the how-to's example store no longer passes the contract
    (the suite or a domain helper changed): update the example in the doc."""
    proc = background.result("doc-example-contract")
    report = proc.workdir / "report.xml"
    output = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert report.exists(), output
    cases = list(ET.parse(report).iter("testcase"))
    failed = [
        c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None
    ]
    assert not failed, f"the doc example fails {failed}:\n{output}"
    skips = [c.find("skipped") for c in cases]
    reasons = {s.get("message", "") for s in skips if s is not None}
    # The examples declare no keyword search, list no owners and no cache
    # entries, and have no conditional writes (all optional).
    optional = (
        "keyword_search not declared",
        "does not implement OwnerListing",
        "does not implement CacheListing",
        "does not implement VersionedWrites",
    )
    assert all(any(o in r for o in optional) for r in reasons), reasons
    ran = [c.get("name") for c in cases if c.find("skipped") is None]
    cache = [
        c.get("name")
        for c in cases
        if c.find("skipped") is None and "TestSqliteCache" in (c.get("classname") or "")
    ]
    assert len(ran) - len(cache) >= 80, f"only {len(ran) - len(cache)} store tests ran"
    assert len(cache) >= 40, f"only {len(cache)} cache contract tests ran on SqliteCache"
    assert "test_put_racing_close" in cache, cache
    assert "test_any_record_round_trips" in ran, ran
    assert proc.returncode == 0, output
    assert "contract tests skipped" in proc.stdout, "the opt-in plugin lists the skips"


@background.job("doc-example-cli")
def _doc_cli_job(work: Path) -> background.Command:
    (work / "acme_store.py").write_text(_example_code(), encoding="utf-8")
    argv = [
        sys.executable, "-m", "agent_memory.entrypoints.cli", "conformance",
        "--factory", "acme_store:factory", "-k", "close or canary or add_ or list",
    ]  # fmt: skip
    return background.Command(argv, cwd=work, timeout=600)


@pytest.mark.background("doc-example-cli")
def test_doc_factory_runs_with_the_cli() -> None:
    """When this fails, the how-to's "run it with the CLI" factory no longer
    works with `agent-memory conformance --factory` (or no longer reaches the
    close-race clauses through its `reopen`)."""
    proc = background.result("doc-example-cli")
    output = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, output
    assert "conformance: PASS" in proc.stdout
    assert "test_close_racing_writes PASSED" in proc.stdout, output
    leftovers = sorted(p.name for p in proc.workdir.iterdir() if p.name != "acme_store.py")
    assert leftovers == [], leftovers


@background.job("doc-example-cli-cache")
def _doc_cli_cache_job(work: Path) -> background.Command:
    (work / "acme_store.py").write_text(_example_code(), encoding="utf-8")
    tmp = work / "tmp"
    tmp.mkdir()
    argv = [
        sys.executable, "-m", "agent_memory.entrypoints.cli", "conformance",
        "--factory", "acme_store:cache_factory", "-k", "close or canary or put or delete",
    ]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(tmp)}
    return background.Command(argv, cwd=work, env=env, timeout=600)


@pytest.mark.background("doc-example-cli-cache")
def test_doc_file_backed_factory_runs_and_leaves_nothing() -> None:
    """When this fails, the how-to's file-backed cache factory no longer passes
    `agent-memory conformance --factory`, or its per-run directory (or the
    run's own) is left in the temporary directory."""
    proc = background.result("doc-example-cli-cache")
    output = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, output
    assert "conformance: PASS" in proc.stdout
    assert "test_put_racing_close PASSED" in proc.stdout, output
    leftovers = sorted(p.name for p in (proc.workdir / "tmp").iterdir())
    assert leftovers == [], leftovers

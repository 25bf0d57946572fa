"""docs/writing-a-backend.md cannot rot: its Python blocks, concatenated in
order, form a test module that must pass the MemoryStore contract (skipping
only the keyword-search tests the example honestly does not declare)."""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import background

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-a-backend.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _example_code() -> str:
    blocks = _BLOCK.findall(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 3, f"expected the store, contract and strategy blocks in {DOC}"
    return "\n\n".join(blocks)


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
    # The example declares no keyword search and lists no owners (both optional).
    optional = ("keyword_search not declared", "does not implement OwnerListing")
    assert all(any(o in r for o in optional) for r in reasons), reasons
    ran = [c.get("name") for c in cases if c.find("skipped") is None]
    assert len(ran) >= 80, f"only {len(ran)} contract tests ran on the doc example"
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

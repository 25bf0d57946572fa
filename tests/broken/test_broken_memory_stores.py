"""Proof that the MemoryStore contract can fail: run it on deliberately broken
stores (tests/broken/broken_stores.py) and require a failure naming the
expected clause for each, while the unbroken adapter passes the same run."""

from __future__ import annotations

import os
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import broken_stores
import pytest

import background

HERE = Path(__file__).resolve().parent

_GENERATED = """
import pytest
from hypothesis import Phase, settings

import broken_stores
from agent_memory.adapters.memory import InMemoryMemoryStore, MemoryBackend
from agent_memory.contract_tests import Capabilities, MemoryStoreContract
from agent_memory.domain.records import EmbeddingSpace

# Finding the failure is the point here; shrinking it would only cost time. The
# same examples on every run: a bug the run finds is found every time (a random
# draw missed MiscountedDeleteScope's miscount about once in ten runs).
settings.register_profile(
    "broken", max_examples=50, deadline=None, phases=[Phase.explicit, Phase.generate],
    derandomize=True, database=None,
)
settings.load_profile("broken")
SPACE = EmbeddingSpace(model="broken-test", dimension=8)


def _contract(store_cls):
    class Contract(MemoryStoreContract):
        capabilities = Capabilities(keyword_search=True, versioned_writes=True)

        @pytest.fixture
        def backend(self):
            return MemoryBackend()

        @pytest.fixture
        async def store(self, backend):
            store = store_cls(SPACE, backend)
            yield store
            await store.close()

        @pytest.fixture
        def reopen(self, backend):
            async def open_again():
                return InMemoryMemoryStore(SPACE, backend)

            return open_again

    return Contract


TestControl = _contract(InMemoryMemoryStore)

_SHARED = MemoryBackend()


class TestLeakyFixture(_contract(InMemoryMemoryStore)):
    # A fixture that hands every test the same data: the canaries must notice.

    @pytest.fixture
    def backend(self):
        return _SHARED
"""

#: broken store -> clause ids that must appear among its failures
EXPECTED = {
    "OwnerBlindSearch": ["MS-ISO-2", "MS-SM-1"],
    "WriteAfterClosePersists": ["MS-CLOSE-4", "MS-CLOSE-3"],
    "DeleteScopeLeavesSearchable": ["MS-DEL-3", "MS-DEL-4", "MS-SM-1"],
    "EmptyScopeAccepted": ["MS-SCOPE-1"],
    "DuplicateOverwrites": ["MS-ADD-2", "MS-SM-1"],
    "LeakyFixture": ["MS-CANARY-1"],
    "AscendingList": ["MS-LIST-1"],
    "CaseSensitiveKeyword": ["MS-KW-9"],
    "AsciiCaseKeyword": ["MS-KW-13", "MS-KW-14"],
    "OverFoldingKeyword": ["MS-KW-13", "MS-KW-14"],
    "GlobalKeywordStats": ["MS-KW-12"],
    "TrimmedOwners": ["MS-ISO-10"],
    "NfkcOwners": ["MS-ISO-10"],
    "CaseInsensitiveIds": ["MS-ISO-11"],
    "MiscountedDeleteScope": ["MS-DEL-4", "MS-SM-1"],
    "ShiftedTimestamps": ["MS-ADD-1"],
    "InclusiveCursorList": ["MS-LIST-2"],
    "OffsetContinuedList": ["MS-LIST-9"],
    "OverreadingSearch": ["MS-SEARCH-1"],
    "UnconditionalVersionedWrites": ["MS-VER-1", "MS-VER-2", "MS-SM-1"],
    "ReadThenWriteVersions": ["MS-VER-3"],
    "UndeclaredVersionedWrites": ["MS-VER-0"],
    "DescendingKeywordTies": ["MS-KW-15"],
    "OwnerWideKeywordStats": ["MS-KW-16"],
    "MillisecondVersionDeletes": ["MS-VER-2"],
    "UpdateKeepsCreatedAt": ["MS-UPD-1"],
    "NamespacePrefixDeleteScope": ["MS-ISO-8"],
    "TrimmedNamespaces": ["MS-ISO-12"],
}

#: broken store -> (clause id, pattern) pairs: some failure naming the clause must
#: match, so a failure says what was wanted and what was got, labelled.
LABELLED = {
    "AscendingList": [
        ("MS-LIST-1", r"\[MS-LIST-1\] list orders by created_at desc, then id desc; "
                      r"wanted \['l08', 'l09', .*\]; got \['l04', 'l01', .*\]"),
    ],
    "MiscountedDeleteScope": [
        ("MS-DEL-4", r"\[MS-DEL-4\] delete_scope returns the count; wanted \d+; got \d+"),
        ("MS-SM-1", r"\[MS-SM-1\] delete_scope deletes as many records as the oracle; "
                    r"wanted \d+; got \d+"),
    ],
    "ShiftedTimestamps": [
        ("MS-ADD-1", r"\[MS-ADD-1\] created_at round-trips to the millisecond, timezone-aware; "
                     r"wanted datetime\.datetime\(2026, 1, 1, 12, 0, tzinfo=.*\); "
                     r"got datetime\.datetime\(2026, 1, 1, 13, 0, tzinfo=.*\)"),
    ],
    "DescendingKeywordTies": [
        ("MS-KW-15", r"\[MS-KW-15\] equal scores are ordered by id ascending \(limit=10\); "
                     r"wanted \['best', 'k0', 'k1', .*\]; got \['best', 'k5', 'k4', .*\]"),
    ],
    "OwnerWideKeywordStats": [
        ("MS-KW-16", r"\[MS-KW-16\] with namespace and kinds, .*; "
                     r"wanted \['t-alpha', 't-beta', 't-beta2'\]; got \['t-beta', .*\]"),
    ],
    "MillisecondVersionDeletes": [
        ("MS-VER-2", r"\[MS-VER-2\] a version 1 microsecond before the stored .* is another "
                     r"version: .*; wanted \(False, True\); got \(True, False\)"),
    ],
    "UpdateKeepsCreatedAt": [
        ("MS-UPD-1", r"\[MS-UPD-1\] update replaces created_at too \(not only the other fields\); "
                     r"wanted datetime\.datetime\(2026, 1, 1, 12, 30, tzinfo=.*\); "
                     r"got datetime\.datetime\(2026, 1, 1, 12, 0, tzinfo=.*\)"),
    ],
    "DuplicateOverwrites": [
        ("MS-ADD-2", r"\[MS-ADD-2\] .* raises DuplicateRecord; wanted DuplicateRecord; "
                     r"got no error, returned None"),
        ("MS-ADD-5", r"\[MS-ADD-5\] .*; wanted 1; got \d+: \["),
    ],
}  # fmt: skip

#: which tests run per class (to keep the run short); the control runs everything
#: but the state machine, which tests/contract already runs on the memory adapter.
SELECTION = {
    "Control": "not state_machine",
    "OwnerBlindSearch": "isolation or search or state_machine",
    "WriteAfterClosePersists": "close",
    "DeleteScopeLeavesSearchable": "delete or state_machine",
    "EmptyScopeAccepted": "blank_scope",
    "DuplicateOverwrites": "add_ or state_machine",
    "LeakyFixture": "canary",
    "AscendingList": "list",
    "CaseSensitiveKeyword": "keyword",
    "AsciiCaseKeyword": "keyword_folds or keyword_case",
    "OverFoldingKeyword": "keyword_folds or keyword_case",
    "GlobalKeywordStats": "keyword_ranking",
    "TrimmedOwners": "lookalike_owners",
    "NfkcOwners": "lookalike_owners",
    "CaseInsensitiveIds": "lookalike_ids",
    "MiscountedDeleteScope": "delete_scope or state_machine",
    "ShiftedTimestamps": "add_round_trip or add_and_get",
    "InclusiveCursorList": "add_large_batch",
    "OffsetContinuedList": "writers_write",
    "OverreadingSearch": "search_orders_by_cosine_score",
    "UnconditionalVersionedWrites": "if_older or if_unchanged or state_machine",
    "ReadThenWriteVersions": "if_older or if_unchanged or conditional_writes",
    "UndeclaredVersionedWrites": "if_older or if_unchanged or conditional_writes",
    "DescendingKeywordTies": "keyword",
    "OwnerWideKeywordStats": "keyword",
    "MillisecondVersionDeletes": "if_older or if_unchanged or conditional_writes",
    "UpdateKeepsCreatedAt": "update",
    "NamespacePrefixDeleteScope": "hostile_namespace",
    "TrimmedNamespaces": "lookalike_namespaces",
}


@background.job("broken-memory-stores")
def _contract_job(root: Path) -> background.Command:
    body = _GENERATED + "".join(
        f"Test{name} = _contract(broken_stores.{name})\n"
        for name in EXPECTED
        if hasattr(broken_stores, name)
    )
    (root / "test_generated_contract.py").write_text(body)
    (root / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [
        sys.executable, "-m", "pytest", "-q", "--tb=line", "-p", "no:cacheprovider",
        "-p", "agent_memory.contract_tests.plugin",
        "-c", str(root / "pytest.ini"), "--rootdir", str(root),
        f"--junitxml={root / 'report.xml'}",
        "-k", " or ".join(f"(Test{cls} and ({expr}))" for cls, expr in SELECTION.items()),
        str(root / "test_generated_contract.py"),
    ]  # fmt: skip
    return background.Command(argv, cwd=root, env=env, timeout=600)


@pytest.fixture(scope="module")
def contract_run() -> dict[str, list[str]]:
    """Run the contract once on the control and every broken store; return the
    failure messages per test class (an entry per class, even when empty)."""
    proc = background.result("broken-memory-stores")
    report = proc.workdir / "report.xml"
    assert report.exists(), f"the contract run produced no report:\n{proc.stdout}\n{proc.stderr}"
    failures: dict[str, list[str]] = defaultdict(list)
    collected: set[str] = set()
    for case in ET.parse(report).iter("testcase"):
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        collected.add(cls)
        for bad in (*case.iter("failure"), *case.iter("error")):
            failures[cls].append(f"{case.get('name')}: {bad.get('message', '')}\n{bad.text or ''}")
    assert collected >= {"TestControl", *(f"Test{n}" for n in EXPECTED)}, proc.stdout[-3000:]
    return {cls: failures.get(cls, []) for cls in collected}


@pytest.mark.background("broken-memory-stores")
def test_control_store_passes(contract_run: dict[str, list[str]]) -> None:
    """The unbroken adapter passes the very same generated run, so every failure
    below is caused by the breakage (not by the harness)."""
    assert contract_run["TestControl"] == [], "\n".join(contract_run["TestControl"])


@pytest.mark.background("broken-memory-stores")
@pytest.mark.parametrize(("broken", "clause_ids"), list(EXPECTED.items()), ids=list(EXPECTED))
def test_contract_catches_broken_store(
    contract_run: dict[str, list[str]], broken: str, clause_ids: list[str]
) -> None:
    """Each broken store fails the contract, and the failures name the clause
    that describes its bug."""
    failures = contract_run[f"Test{broken}"]
    assert failures, f"the contract passed on {broken}"
    text = "\n".join(failures)
    for cid in clause_ids:
        assert f"[{cid}]" in text, f"no failure names [{cid}] for {broken}:\n{text[:4000]}"


@pytest.mark.background("broken-memory-stores")
@pytest.mark.parametrize(
    ("broken", "cid", "pattern"),
    [(b, c, p) for b, pairs in LABELLED.items() for c, p in pairs],
    ids=[f"{b}-{c}" for b, pairs in LABELLED.items() for c, _ in pairs],
)
def test_failure_labels_wanted_and_got(
    contract_run: dict[str, list[str]], broken: str, cid: str, pattern: str
) -> None:
    """When this fails, a failure of clause `cid` no longer says what was wanted
    and what was got (labelled `wanted ...; got ...`): see `_support.clause`."""
    named = [f for f in contract_run[f"Test{broken}"] if f"[{cid}]" in f]
    assert named, (
        f"no failure names [{cid}] for {broken}:\n"
        + "\n".join(contract_run[f"Test{broken}"])[:4000]
    )
    assert any(re.search(pattern, f) for f in named), (
        f"no [{cid}] failure of {broken} matches {pattern!r}:\n" + "\n".join(named)[:4000]
    )


@pytest.mark.background("broken-memory-stores")
def test_helper_failure_names_the_broken_clause(contract_run: dict[str, list[str]]) -> None:
    """When this fails, a list bug met while another test reads its records back
    is reported under that test's clause (`[MS-ADD-8] a batch of 300 is stored;
    got 303`) instead of list's own: `_all_pages` checks list's rules first."""
    failures = contract_run["TestInclusiveCursorList"]
    batch = [f for f in failures if f.startswith("test_add_large_batch")]
    assert batch, "\n".join(failures)[:4000]
    assert (
        "[MS-LIST-2] pages concatenate to the full order, each record once (read back for MS-ADD-8)"
        in batch[0]
    ), batch[0][:2000]
    assert "[MS-ADD-8]" not in batch[0].splitlines()[0], batch[0][:2000]


@pytest.mark.background("broken-memory-stores")
def test_adapter_exception_names_the_clause_and_rule(contract_run: dict[str, list[str]]) -> None:
    """When this fails, an exception the adapter raised inside a contract test is
    reported bare (`IndexError: ...`) instead of under the test's clause and rule
    (the plugin's `pytest_runtest_makereport`, `_support.attribute_failure`)."""
    failures = contract_run["TestOverreadingSearch"]
    text = "\n".join(failures)
    wanted = (
        r"\[MS-SEARCH-1\] results are ordered by score descending; "
        r"raised IndexError: list index out of range"
    )
    assert re.search(wanted, text), text[:4000]


@pytest.mark.background("broken-memory-stores")
@pytest.mark.parametrize("broken", ["DuplicateOverwrites", "MiscountedDeleteScope"])
def test_state_machine_report_names_the_clause_and_steps(
    contract_run: dict[str, list[str]], broken: str
) -> None:
    """When this fails, the state machine's failure is not one MS-SM-1 message
    with the shrunk step sequence (an ExceptionGroup of several failures, or no
    steps): see `state_machine.run_against_oracle`."""
    [failure] = [f for f in contract_run[f"Test{broken}"] if f.startswith("test_state_machine")]
    message = failure.split(": ", 1)[1]
    assert message.startswith("AssertionError: [MS-SM-1] "), failure[:3000]
    assert "wanted " in message.splitlines()[0], failure[:3000]
    assert "shrunk steps (store vs oracle):" in message, failure[:3000]
    assert "state = _StoreVsOracle()" in message, failure[:3000]
    assert "distinct failures" not in message, failure[:3000]
    assert "ExceptionGroup" not in message, failure[:3000]

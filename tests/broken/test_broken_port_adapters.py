"""Proof that the EventLog, LeaseStore and Cache contracts can fail.

One pytest subprocess runs the shipped contract classes against every broken
adapter of `broken_ports` (plus the genuine memory adapters as a control) from
a generated test file; each test here then asserts that its broken adapter's
run failed and that the expected clause id is named in the failures.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

import background
from broken.harness import PYTEST_INI, env, failures_of

# contract class -> (fixture to override, shared backend class)
_PORTS = {
    "EventLogContract": ("event_log", "MemoryEventBackend"),
    "LeaseStoreContract": ("leases", "MemoryLeaseBackend"),
    "CacheContract": ("cache", "MemoryCacheBackend"),
}

# broken adapter -> (contract class, clause id the suite must name)
BROKEN = {
    "ArrivalOrderEventLog": ("EventLogContract", "EL-ORD-1"),
    "DuplicatingEventLog": ("EventLogContract", "EL-IDEM-1"),
    "GlobalsReserveRoomEventLog": ("EventLogContract", "EL-GLOB-2"),
    "InclusiveUntilEventLog": ("EventLogContract", "EL-UNTIL-1"),
    "FilterAfterCutEventLog": ("EventLogContract", "EL-UNTIL-2"),
    "GlobalsIgnoreUntilEventLog": ("EventLogContract", "EL-UNTIL-3"),
    "UncheckedUntilEventLog": ("EventLogContract", "EL-UNTIL-4"),
    "UntilReplacesSinceEventLog": ("EventLogContract", "EL-UNTIL-5"),
    "EventTimeRetentionEventLog": ("EventLogContract", "EL-RET-3"),
    "EventTimePurgeEventLog": ("EventLogContract", "EL-RET-4"),
    "PrefixEraseEventLog": ("EventLogContract", "EL-ERASE-2"),
    "IndexDroppingEraseEventLog": ("EventLogContract", "EL-ERASE-3"),
    "LiveUserEventsEventLog": ("EventLogContract", "EL-USER-2"),
    "PagedUserEventsEventLog": ("EventLogContract", "EL-USER-3"),
    "OldestFirstUserEventsEventLog": ("EventLogContract", "EL-USER-1"),
    "LiveDomainsEventLog": ("EventLogContract", "EL-DOM-1"),
    "NestedFloatsEventLog": ("EventLogContract", "EL-RT-1"),
    "RacyAcquireLeaseStore": ("LeaseStoreContract", "LS-EXC-1"),
    "AnyoneRenewsLeaseStore": ("LeaseStoreContract", "LS-RENEW-1"),
    "TokenResetLeaseStore": ("LeaseStoreContract", "LS-FENCE-1"),
    "ExpiredReleaseLeaseStore": ("LeaseStoreContract", "LS-REL-3"),
    "StaleTokenReacquireLeaseStore": ("LeaseStoreContract", "LS-EXP-3"),
    "LazyExpiryScanLeaseStore": ("LeaseStoreContract", "LS-SCAN-3"),
    "TtlIgnoringCache": ("CacheContract", "C-TTL-1"),
    "GlobPrefixCache": ("CacheContract", "C-DELP-2"),
    "CaseFoldUserEventLog": ("EventLogContract", "EL-ERASE-4"),
    "DomainlessTiesUserEventsEventLog": ("EventLogContract", "EL-USER-1"),
    "WallClockSinceEventLog": ("EventLogContract", "EL-SINCE-2"),
    "RenewFromOldExpiryLeaseStore": ("LeaseStoreContract", "LS-RENEW-3"),
    "ReacquireFromOldExpiryLeaseStore": ("LeaseStoreContract", "LS-ACQ-3"),
    "CaseFoldOwnerLeaseStore": ("LeaseStoreContract", "LS-ISO-3"),
    "TrimmedOwnerLeaseStore": ("LeaseStoreContract", "LS-ISO-3"),
    "KeepTtlOnOverwriteCache": ("CacheContract", "C-OVR-2"),
    "LikePrefixEntriesCache": ("CacheContract", "C-LIST-1"),
    "TrimmedKeyCache": ("CacheContract", "C-ISO-3"),
    "ListingTimeExpiryCache": ("CacheContract", "C-LIST-1"),
}

#: broken adapter -> (clause id, pattern): a failure naming the clause matches the
#: pattern, so it says what was wanted and what was got, labelled.
LABELLED = {
    "OldestFirstUserEventsEventLog": (
        "EL-USER-1",
        r"\[EL-USER-1\] user_events lists exactly the user's events, in every domain, newest "
        r"first; wanted \[\('er-b', 'b4'\), \('er-a', 'c1'\), \('er-a', 'a1'\), "
        r"\('er-b', 'b1'\)\]; got \[\('er-b', 'b1'\), \('er-a', 'a1'\), \('er-a', 'c1'\), "
        r"\('er-b', 'b4'\)\]",
    ),
    "EventTimePurgeEventLog": ("EL-RET-4", r"\[EL-RET-4\] .*; wanted 3; got 2"),
    "UncheckedUntilEventLog": (
        "EL-UNTIL-4", r"\[EL-UNTIL-4\] .* raises InvalidInput; wanted InvalidInput; got no error"
    ),
    "RacyAcquireLeaseStore": ("LS-EXC-1", r"\[LS-EXC-1\] .*; wanted 1; got 50: \["),
    "TokenResetLeaseStore": ("LS-REL-2", r"\[LS-REL-2\] .*; wanted > 1; got 1"),
    "NestedFloatsEventLog": (
        "EL-RT-1",
        r"\[EL-RT-1\] event 'full:1' fields survive \(metadata type-exactly at every depth\); "
        r"wanted no difference; got \[\"metadata\['a'\]\[0\]: expected int 1, got float 1\.0\", "
        r"\"metadata\['b'\]\['c'\]\['d'\]: expected int -3, got float -3\.0\"",
    ),
    "ExpiredReleaseLeaseStore": (
        "LS-REL-3",
        r"\[LS-REL-3\] release of its own expired lease by the owner it had returns False; "
        r"wanted False; got True",
    ),
    "StaleTokenReacquireLeaseStore": (
        "LS-EXP-3",
        r"\[LS-EXP-3\] re-acquiring one's own expired lease mints a new, larger token; "
        r"wanted > 1; got 1",
    ),
    "TtlIgnoringCache": (
        "C-TTL-1", r"\[C-TTL-1\] get after the ttl is None; wanted None; got b'x'"
    ),
}  # fmt: skip

CONTROLS = {
    "InMemoryEventLog": "EventLogContract",
    "InMemoryLeaseStore": "LeaseStoreContract",
    "InMemoryCache": "CacheContract",
}

_CLASS_TEMPLATE = """
class Test{adapter}({contract}):
    capabilities = CAPS

    @pytest.fixture
    def backend(self):
        return {backend}()

    @pytest.fixture
    async def {fixture}(self, backend):
        port = {adapter}(backend=backend)
        yield port
        await port.close()

    @pytest.fixture
    def reopen(self, backend):
        async def _open():
            return {adapter}(backend=backend)

        return _open
"""

_HEADER = """
import pytest

from agent_memory.adapters.memory import (
    InMemoryCache,
    InMemoryEventLog,
    InMemoryLeaseStore,
    MemoryCacheBackend,
    MemoryEventBackend,
    MemoryLeaseBackend,
)
from agent_memory.contract_tests import (
    CacheContract,
    Capabilities,
    EventLogContract,
    LeaseStoreContract,
)
from broken.broken_ports import {broken}

CAPS = Capabilities(reopen=True, ttl_resolution_ms=10)
"""

# Property-based tests are left out of the broken runs: hypothesis would spend
# its time shrinking failures that the example-based clauses already name.
_DESELECT = "not property"

_SUMMARY = re.compile(r"(\d+) (passed|failed|error|errors|skipped)\b")


def _generated_source() -> str:
    parts = [_HEADER.format(broken=", ".join(sorted(BROKEN)))]
    adapters = [(name, contract) for name, (contract, _) in BROKEN.items()]
    adapters += list(CONTROLS.items())
    for adapter, contract in adapters:
        fixture, backend = _PORTS[contract]
        parts.append(
            _CLASS_TEMPLATE.format(
                adapter=adapter, contract=contract, fixture=fixture, backend=backend
            )
        )
    return "\n".join(textwrap.dedent(p) for p in parts)


class Run:
    """Outcome of the subprocess: failure lines per adapter class, totals."""

    def __init__(self, proc: background.Result) -> None:
        self.returncode = proc.returncode
        self.output = proc.stdout + proc.stderr
        self.failures = failures_of(proc.stdout)
        self.totals = {kind: int(n) for n, kind in _SUMMARY.findall(self.output)}


@background.job("broken-ports")
def _broken_ports_job(work: Path) -> background.Command:
    (work / "pytest.ini").write_text(PYTEST_INI)
    (work / "test_generated_broken_ports.py").write_text(_generated_source())
    argv = [
        sys.executable, "-m", "pytest", "test_generated_broken_ports.py",
        "-q", "--tb=line", "-rf", "-p", "no:cacheprovider", "-k", _DESELECT,
        "-p", "agent_memory.contract_tests.plugin",
    ]  # fmt: skip
    return background.Command(argv, cwd=work, env=env(), timeout=300)


@pytest.fixture(scope="module")
def run() -> Run:
    return Run(background.result("broken-ports"))


@pytest.mark.background("broken-ports")
def test_run_collected_and_failed(run: Run) -> None:
    """When this fails, the generated file did not collect or run (read the output):
    pytest must exit 1 (tests failed), not 2+ (collection or usage error)."""
    assert run.returncode == 1, (
        f"expected failing tests (exit 1), got {run.returncode}:\n{run.output}"
    )
    assert run.totals.get("passed", 0) > 100, f"too few tests ran:\n{run.output[-3000:]}"


@pytest.mark.background("broken-ports")
@pytest.mark.parametrize("adapter", sorted(CONTROLS))
def test_control_adapter_passes(run: Run, adapter: str) -> None:
    """When this fails, the harness itself is broken: the genuine memory adapter
    must pass the contract inside the generated run too."""
    assert not run.failures.get(adapter), f"{adapter} failed:\n" + "\n".join(run.failures[adapter])


@pytest.mark.background("broken-ports")
@pytest.mark.parametrize("adapter", sorted(BROKEN))
def test_broken_adapter_is_caught(run: Run, adapter: str) -> None:
    """When this fails, the contract no longer catches this bug: the clause named
    in BROKEN must appear in the failures of the broken adapter's run."""
    _, cid = BROKEN[adapter]
    failures = run.failures.get(adapter, [])
    assert failures, f"{adapter}: the contract passed a broken adapter\n{run.output[-3000:]}"
    named = [line for line in failures if f"[{cid}]" in line]
    assert named, f"{adapter}: no failure names [{cid}]; failures were:\n" + "\n".join(failures)


@pytest.mark.background("broken-ports")
@pytest.mark.parametrize("adapter", sorted(LABELLED))
def test_failure_labels_wanted_and_got(run: Run, adapter: str) -> None:
    """When this fails, a failure no longer says what was wanted and what was got
    (labelled `wanted ...; got ...`): see `_support.clause`."""
    cid, pattern = LABELLED[adapter]
    named = [line for line in run.failures.get(adapter, []) if f"[{cid}]" in line]
    assert named, f"{adapter}: no failure names [{cid}]:\n" + "\n".join(run.failures[adapter])
    assert any(re.search(pattern, line) for line in named), (
        f"{adapter}: no [{cid}] failure matches {pattern!r}:\n" + "\n".join(named)
    )


#: broken adapter -> the property clause that catches it (hypothesis tests)
PROPERTY_BROKEN = {
    "ArrivalOrderEventLog": "EL-ORD-3",
    "FilterAfterCutEventLog": "EL-UNTIL-2",
    "IndexDroppingEraseEventLog": "EL-ERASE-3",
    "TokenResetLeaseStore": "LS-FENCE-2",
    "NestedFloatsEventLog": "EL-RT-2",
}


@background.job("broken-property-timing")
def _property_timing_job(work: Path) -> background.Command:
    (work / "pytest.ini").write_text(PYTEST_INI)
    (work / "test_generated_broken_ports.py").write_text(_generated_source())
    # Derandomized: whether a property finds its broken adapter must not depend on
    # the seed of the run (the ports' own deadlines and shrink limits still apply).
    (work / "conftest.py").write_text(
        "from hypothesis import settings\n"
        "settings.register_profile('broken', derandomize=True)\n"
        "settings.load_profile('broken')\n"
    )
    environment = env()
    environment.pop("HYPOTHESIS_PROFILE", None)
    selected = " or ".join(PROPERTY_BROKEN)
    argv = [
        sys.executable, "-m", "pytest", "test_generated_broken_ports.py", "-q",
        "-p", "no:cacheprovider", f"--junitxml={work / 'report.xml'}",
        "-k", f"property and ({selected})",
    ]  # fmt: skip
    return background.Command(argv, cwd=work, env=environment, timeout=600)


@pytest.mark.background("broken-property-timing")
def test_property_failures_report_within_a_minute() -> None:
    """When this fails, a port's hypothesis settings let a failing property run
    for minutes (shrinking or no deadline): see `_support.PORT_TIMING`."""
    import xml.etree.ElementTree as ET

    result = background.result("broken-property-timing")
    report = result.workdir / "report.xml"
    assert report.exists(), result.tail()
    caught: dict[str, float] = {}
    for case in ET.parse(report).iter("testcase"):
        failure = case.find("failure")
        adapter = case.get("classname", "").rsplit(".", 1)[-1].removeprefix("Test")
        cid = PROPERTY_BROKEN.get(adapter)
        if failure is not None and cid and f"[{cid}]" in failure.get("message", ""):
            caught[adapter] = float(case.get("time", "0"))
    assert set(caught) == set(PROPERTY_BROKEN), caught
    slow = {a: t for a, t in caught.items() if t >= 60}
    assert not slow, f"property failures took too long to report: {slow}"

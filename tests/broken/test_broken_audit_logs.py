"""Proof that every AuditLog contract clause can fail: the shipped
`AuditLogContract` runs (in one pytest subprocess) against each one-bug adapter
of `broken_audit` and against the genuine memory adapter (the control); each
test here asserts that the expected clause id is among the broken run's
failures and that the control passed."""

from __future__ import annotations

import re
import textwrap

import pytest

from broken.harness import run_generated

#: broken adapter -> the clause the suite must name
BROKEN = {
    "SecondsAuditLog": "AL-WRITE-1",
    "OverwritingAuditLog": "AL-WRITE-2",
    "TiesAscendingAuditLog": "AL-ORDER-1",
    "InclusiveCursorAuditLog": "AL-PAGE-1",
    "OffsetCursorAuditLog": "AL-PAGE-2",
    "ExclusiveSinceAuditLog": "AL-FILTER-1",
    "ErasedWithSubjectAuditLog": "AL-KEEP-1",
    "ContextKeepingAuditLog": "AL-CONTENT-1",
    "UncheckedLimitAuditLog": "AL-INPUT-1",
    "NeverClosedAuditLog": "AL-CLOSE-1",
    "HandleLocalAuditLog": "AL-SHARED-1",
    "GlobalAuditLog": "AL-CANARY-1",
    "WholeSecondSinceAuditLog": "AL-FILTER-1",
    "CaseFoldTenantAuditLog": "AL-FILTER-1",
    "TrimmedTenantAuditLog": "AL-FILTER-1",
}

_HEADER = """
import pytest

from agent_memory.adapters.memory import (
    InMemoryAuditLog,
    InMemoryEventLog,
    InMemoryMemoryStore,
    MemoryAuditBackend,
)
from agent_memory.contract_tests import AuditLogContract, AuditNeighbours, Capabilities
from agent_memory.domain.records import EmbeddingSpace
from broken.broken_audit import {broken}

SPACE = EmbeddingSpace(model="broken-audit", dimension=8)
InMemoryAuditLog.events_for = classmethod(lambda cls, backend: InMemoryEventLog())
"""

_CLASS = """
class Test{adapter}(AuditLogContract):
    capabilities = Capabilities(reopen=True)

    @pytest.fixture
    def backend(self):
        return MemoryAuditBackend()

    @pytest.fixture
    async def audit_log(self, backend):
        log = {adapter}(backend=backend)
        yield log
        await log.close()

    @pytest.fixture
    def neighbours(self, backend):
        return AuditNeighbours(
            events={adapter}.events_for(backend), store=InMemoryMemoryStore(SPACE)
        )

    @pytest.fixture
    def reopen(self, backend):
        async def _open():
            return {adapter}(backend=backend)

        return _open
"""


def _source() -> str:
    parts = [_HEADER.format(broken=", ".join(sorted(BROKEN)))]
    parts += [_CLASS.format(adapter=name) for name in [*BROKEN, "InMemoryAuditLog"]]
    return "\n".join(textwrap.dedent(p) for p in parts)


@pytest.fixture(scope="module")
def failures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    work = tmp_path_factory.mktemp("broken-audit")
    return run_generated(work, "generated_broken_audit", _source(), "not property")


def test_control_passes(failures: dict[str, list[str]]) -> None:
    """When this fails, the harness is broken: the genuine adapter must pass."""
    assert not failures.get("InMemoryAuditLog"), "\n".join(failures["InMemoryAuditLog"])


@pytest.mark.parametrize("adapter", sorted(BROKEN))
def test_broken_audit_log_is_caught(failures: dict[str, list[str]], adapter: str) -> None:
    """When this fails, the contract no longer catches this bug: the clause named
    in BROKEN must appear among the broken adapter's failures."""
    cid = BROKEN[adapter]
    lines = failures.get(adapter, [])
    assert lines, f"{adapter}: the contract passed a broken adapter"
    assert any(f"[{cid}]" in line for line in lines), (
        f"{adapter}: no failure names [{cid}]:\n" + "\n".join(lines)
    )


def test_every_clause_has_a_broken_adapter() -> None:
    """When this fails, a clause was added without a one-bug adapter proving it can fail."""
    from agent_memory.contract_tests import audit_log

    listed = set(re.findall(r"^- (AL-[A-Z]+-\d+)", audit_log.__doc__ or "", re.M))
    assert listed == set(BROKEN.values()), sorted(listed ^ set(BROKEN.values()))

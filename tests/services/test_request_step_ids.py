"""Every step a request records is kept, however the steps are split across
`record()` calls: a step without an id is numbered over the whole request
(`<request>#<n>`), so a later call never reuses an earlier call's id (the event
log is idempotent by id and would drop it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import InMemoryEventLog, InMemoryLeaseStore
from agent_memory.domain.steps import Step
from agent_memory.services.request import AgentMemory

# One batch: for each step, whether the caller gives it an id of its own.
batches = st.lists(st.lists(st.booleans(), min_size=0, max_size=4), min_size=1, max_size=5)


@settings(deadline=None, max_examples=40)
@given(batches)
async def test_every_recorded_step_is_an_event(plan: list[list[bool]]) -> None:
    events = InMemoryEventLog()
    memory = AgentMemory(events=events, leases=InMemoryLeaseStore(), clock=SystemClock())
    written = 0
    async with memory.request(agent="a", domain="d", request_id="r") as request:
        for b, batch in enumerate(plan):
            steps = [
                Step(action=f"step {b}.{i}", id=f"own-{b}.{i}" if own else None)
                for i, own in enumerate(batch)
            ]
            report = await request.record(steps)
            assert report.ok, report.failures
            written += int(report.details["events_written"])
    since = datetime.now(UTC) - timedelta(hours=1)
    window = await events.window("d", since=since, limit=200)
    actions = sorted(e.action for e in window.events)
    expected = sorted(f"step {b}.{i}" for b, batch in enumerate(plan) for i in range(len(batch)))
    assert actions == expected
    assert written == len(expected)
    flat = [own for batch in plan for own in batch]
    unnamed = sorted(e.id for e in window.events if not e.id.startswith("own-"))
    assert unnamed == sorted(f"r#{n}" for n, own in enumerate(flat) if not own)

"""Every backend rejects the same bad input with the same typed error (the
shared checks in adapters/_common/validation.py), shown on the in-process
adapters that the contract suite uses as its oracle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import numpy as np
import pytest

from agent_memory.adapters.memory import (
    InMemoryEventLog,
    InMemoryLeaseStore,
    InMemoryMemoryStore,
)
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import EmbeddingSpace, Event, MemoryRecord

SPACE = EmbeddingSpace("parity", 4)
NOW = datetime.now(UTC)


async def test_min_score_must_be_a_number() -> None:
    store = InMemoryMemoryStore(SPACE)
    for bad in ("x", True):
        with pytest.raises(InvalidInput, match="min_score"):
            await store.search("o", np.ones(4, np.float32), min_score=bad)  # type: ignore[arg-type]


async def test_bad_renew_payload_is_invalid_input_before_the_holder_check() -> None:
    leases = InMemoryLeaseStore()
    with pytest.raises(InvalidInput, match=r"lease\.payload"):
        await leases.renew("s", "k", "not-holder", timedelta(seconds=5), payload="text")  # type: ignore[arg-type]


async def test_single_event_or_record_instead_of_a_batch() -> None:
    event = Event(id="e", domain="d", agent="a", action="x", outcome="ok", summary="s",
                  occurred_at=NOW, recorded_at=NOW)  # fmt: skip
    with pytest.raises(InvalidInput, match="events"):
        await InMemoryEventLog().append(event)  # type: ignore[arg-type]
    record = MemoryRecord(id="r", owner="o", namespace="n", kind="k", content="c",
                          vector=np.ones(4), created_at=NOW, updated_at=NOW)  # fmt: skip
    store = InMemoryMemoryStore(SPACE)
    with pytest.raises(InvalidInput, match="records"):
        await store.add(record)  # type: ignore[arg-type]
    unvalidated = attrs.evolve(record)
    object.__setattr__(unvalidated, "vector", [1.0, 1.0, 1.0, 1.0])
    with pytest.raises(InvalidInput, match=r"record\.vector"):
        await store.add([unvalidated])

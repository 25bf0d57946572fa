"""Shared helpers for the redis adapter tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

SPACE = EmbeddingSpace(model="test-model", dimension=8)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make_record(
    id: str,
    owner: str = "alice",
    *,
    vector: object = None,
    namespace: str = "facts",
    kind: str = "fact",
    content: str = "",
    context: str = "",
    at: int = 0,
    dim: int = 8,
) -> MemoryRecord:
    if vector is None:
        rng = np.random.default_rng(abs(hash((owner, id))) % 2**32)
        vector = rng.standard_normal(dim)
    when = T0 + timedelta(seconds=at)
    return MemoryRecord(
        id=id, owner=owner, namespace=namespace, kind=kind, content=content or f"about {id}",
        vector=vector, created_at=when, updated_at=when, context=context,
    )  # fmt: skip

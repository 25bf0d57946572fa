"""Shared by the Qdrant tests: the test space, targets, record builder."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from qdrant_client import AsyncQdrantClient

from agent_memory.adapters.qdrant import QdrantMemoryStore
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

QDRANT_URL = os.environ.get("QDRANT_URL")
TARGETS = ["local", *(["server"] if QDRANT_URL else [])]
SPACE = EmbeddingSpace(model="qdrant-test", dimension=8)

OpenStore = Callable[..., Awaitable[QdrantMemoryStore]]


def new_client(target: str) -> AsyncQdrantClient:
    if target == "server":
        assert QDRANT_URL is not None
        return AsyncQdrantClient(url=QDRANT_URL, check_compatibility=False)
    return AsyncQdrantClient(location=":memory:")


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def rec(
    id: str,
    owner: str = "alice",
    *,
    vector: Any = None,
    namespace: str = "notes",
    kind: str = "fact",
    content: str = "",
    context: str = "",
    seconds: int = 0,
    attributes: dict[str, Any] | None = None,
    dimension: int = 8,
) -> MemoryRecord:
    if vector is None:
        seed = abs(hash((owner, id))) % (2**32)
        vector = np.random.default_rng(seed).standard_normal(dimension).astype(np.float32)
    return MemoryRecord(
        id=id,
        owner=owner,
        namespace=namespace,
        kind=kind,
        content=content or f"content of {id}",
        context=context,
        vector=vector,
        created_at=T0 + timedelta(seconds=seconds),
        updated_at=T0 + timedelta(seconds=seconds, microseconds=7),
        attributes=attributes or {},
    )

"""Shared by the Milvus tests: the test space, the store opener type, records."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from agent_memory.adapters.milvus import MilvusMemoryStore
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

#: A Milvus server to test as well (`milvus://host:19530`); Milvus Lite always.
MILVUS_URL = os.environ.get("MILVUS_URL")
TARGETS = ["lite", *(["server"] if MILVUS_URL else [])]
SPACE = EmbeddingSpace(model="milvus-test", dimension=8)

OpenStore = Callable[..., Awaitable[MilvusMemoryStore]]

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
    )

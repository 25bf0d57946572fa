"""A value past one of PostgreSQL's own limits is the caller's error, typed and
named, not `BackendUnavailable` (which callers retry, forever here)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import attrs
import numpy as np
import pytest

from agent_memory.bootstrap.connect import connect
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import MemoryRecord


async def test_content_too_large_for_the_full_text_index_is_invalid_input(
    postgres_url: str, tmp_path: Path
) -> None:
    """When this fails with `BackendUnavailable`, PostgreSQL's "string is too
    long for tsvector" (more distinct words than a 1 MB full-text index of one
    record holds) reached the caller as an outage."""
    settings = attrs.evolve(
        Settings.from_env(),
        deployment="lim" + uuid.uuid4().hex[:8],
        coordination_url=f"sqlite:///{tmp_path}/coord.db",
    )
    words = " ".join(f"w{i:06d}x" for i in range(250_000))  # about 2.5 MB, all distinct
    async with connect(postgres_url, settings=settings) as m:
        now = datetime.now(UTC)
        record = MemoryRecord(
            id="big", owner="o", namespace="n", kind="k", content=words,
            vector=np.ones(m.embedder.space.dimension, dtype=np.float32),
            created_at=now, updated_at=now,
        )  # fmt: skip
        with pytest.raises(InvalidInput, match=r"record\.content.*tsvector"):
            await m.store.add([record])
        small = attrs.evolve(record, id="small", content="a few words")
        await m.store.add([small])  # the store goes on serving
        assert await m.store.get("o", "small") is not None

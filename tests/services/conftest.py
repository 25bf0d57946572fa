"""Fixtures of the service tests that open every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import pytest

from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Settings, open_stores
from agent_memory.ports.storage import MemoryStore, VersionedWrites

#: The embedding space the `stores` fixture opens (tests embed with an equal one).
STORES_EMBEDDER = HashingEmbedder(64)


class Unversioned:
    """A store without `VersionedWrites` (as Qdrant and Milvus): the same store,
    its conditional writes hidden."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("update_if_older", "delete_if_unchanged"):
            raise AttributeError(name)
        return getattr(self._inner, name)


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres", "memory-unversioned"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    deployment = f"mend-{datetime.now(UTC).timestamp():.6f}".replace(".", "-")
    url = f"memory://{deployment}"
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/m.db"
    elif request.param in ("redis", "postgres"):
        url = request.getfixturevalue(f"{request.param}_url")
    opened = await open_stores(
        url, space=STORES_EMBEDDER.space, settings=Settings(deployment=deployment)
    )
    if request.param.endswith("unversioned"):
        opened = attrs.evolve(opened, store=Unversioned(opened.store))
        assert not isinstance(opened.store, VersionedWrites)
    try:
        yield opened
    finally:
        await opened.close()

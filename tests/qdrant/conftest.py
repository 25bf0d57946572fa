"""Qdrant fixtures: local mode always; a real server too when QDRANT_URL is set.

Local mode (`location=":memory:"`) keeps its data in the client object, so a
second store handle on the same data is a second `QdrantMemoryStore` on the
same client (the client is then closed by the fixture, not by the stores).
Against a server every test uses its own collection prefix and drops its
collections afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from qdrant_client import AsyncQdrantClient

from agent_memory.adapters.qdrant import QdrantMemoryStore
from agent_memory.domain.records import EmbeddingSpace
from qdrant.support import SPACE, TARGETS, OpenStore, new_client


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def qclient(target: str) -> AsyncIterator[AsyncQdrantClient]:
    client = new_client(target)
    prefix = f"t{uuid.uuid4().hex[:12]}_"
    client_prefix[id(client)] = prefix
    try:
        yield client
    finally:
        if target == "server":
            for c in (await client.get_collections()).collections:
                if c.name.startswith(prefix):
                    await client.delete_collection(c.name)
        client_prefix.pop(id(client), None)
        await client.close()


client_prefix: dict[int, str] = {}


@pytest.fixture
def open_store(qclient: AsyncQdrantClient) -> OpenStore:
    """Open a store handle on the test's client (several handles share its data)."""

    async def _open(space: EmbeddingSpace = SPACE) -> QdrantMemoryStore:
        return QdrantMemoryStore(qclient, space, collection_prefix=client_prefix[id(qclient)])

    return _open


@pytest.fixture
async def store(open_store: OpenStore) -> AsyncIterator[QdrantMemoryStore]:
    s = await open_store()
    yield s
    await s.close()

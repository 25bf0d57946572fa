"""Milvus fixtures: Milvus Lite in process, opened once per test session; a
Milvus server too when MILVUS_URL is set.

Each test gets its own collection prefix (so fresh collections) on the shared
client, and its collections are dropped afterwards. Store handles made by
`open_store` share the client, the way several processes share a server.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pymilvus import MilvusClient

from agent_memory.adapters.milvus import MilvusMemoryStore, parse_milvus_url
from agent_memory.domain.records import EmbeddingSpace
from milvus.support import MILVUS_URL, SPACE, TARGETS, OpenStore


@pytest.fixture(scope="session")
def milvus_clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, MilvusClient]]:
    """One client per target for the whole session (Milvus Lite starts once, ~1.5 s)."""
    path = Path(tmp_path_factory.mktemp("milvus")) / "lite.db"
    clients = {"lite": MilvusClient(uri=str(path))}
    lite_path.append(path)
    if MILVUS_URL:
        clients["server"] = parse_milvus_url(MILVUS_URL).client()
    yield clients
    for client in clients.values():
        client.close()


lite_path: list[Path] = []
"""The session's Milvus Lite file (a second client on it reuses the running server)."""


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def mclient(milvus_clients: dict[str, MilvusClient], target: str) -> Iterator[MilvusClient]:
    client = milvus_clients[target]
    prefix = f"t{uuid.uuid4().hex[:12]}_"
    _prefixes[id(client)] = prefix
    yield client
    for name in client.list_collections():
        if name.startswith(prefix):
            client.drop_collection(name)


_prefixes: dict[int, str] = {}


@pytest.fixture
def open_store(mclient: MilvusClient, target: str) -> OpenStore:
    """Open a store handle on the test's collections (handles share the data)."""
    prefix = _prefixes[id(mclient)]
    flush_rows = 1024 if target == "lite" else 0  # as the URL factory sets it

    async def _open(space: EmbeddingSpace = SPACE) -> MilvusMemoryStore:
        return MilvusMemoryStore(mclient, space, collection_prefix=prefix, flush_rows=flush_rows)

    return _open


@pytest.fixture
async def store(open_store: OpenStore) -> AsyncIterator[MilvusMemoryStore]:
    s = await open_store()
    yield s
    await s.close()

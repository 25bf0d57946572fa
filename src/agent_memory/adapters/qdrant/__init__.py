"""Qdrant backend for the memory store (extra `qdrant`).

`open_qdrant_store("qdrant://host:6333", space)` or `QdrantMemoryStore(client,
space)` with an `AsyncQdrantClient` (a server URL, or local mode with
`location=":memory:"` / `path=...`). Events, leases and cache come from
another backend.
"""

from agent_memory.adapters.qdrant.factory import (
    open_qdrant_store,
    open_stores,
    qdrant_client_from_url,
)
from agent_memory.adapters.qdrant.store import DEFAULT_COLLECTION_PREFIX, QdrantMemoryStore

__all__ = [
    "DEFAULT_COLLECTION_PREFIX",
    "QdrantMemoryStore",
    "open_qdrant_store",
    "open_stores",
    "qdrant_client_from_url",
]

"""Milvus backend for the memory store (extra `milvus`).

`open_milvus_store("milvus://host:19530", space)`, `milvus+lite:///path/file.db`
(Milvus Lite in process), or `MilvusMemoryStore(client, space)` with a
`pymilvus.MilvusClient`. Events, leases and cache come from another backend.
"""

from agent_memory.adapters.milvus.factory import (
    MilvusTarget,
    open_milvus_store,
    open_stores,
    parse_milvus_url,
)
from agent_memory.adapters.milvus.store import DEFAULT_COLLECTION_PREFIX, MilvusMemoryStore

__all__ = [
    "DEFAULT_COLLECTION_PREFIX",
    "MilvusMemoryStore",
    "MilvusTarget",
    "open_milvus_store",
    "open_stores",
    "parse_milvus_url",
]

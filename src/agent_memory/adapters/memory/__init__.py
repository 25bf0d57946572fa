"""In-process adapters for every storage port, plus the offline hashing embedder."""

from datetime import timedelta
from typing import Any

from agent_memory.adapters._common.ann import describe_search
from agent_memory.adapters._common.index_options import IndexOptions, split_index_options
from agent_memory.adapters.memory.audit import InMemoryAuditLog, MemoryAuditBackend
from agent_memory.adapters.memory.cache import InMemoryCache, MemoryCacheBackend
from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.adapters.memory.events import InMemoryEventLog, MemoryEventBackend
from agent_memory.adapters.memory.leases import InMemoryLeaseStore, MemoryLeaseBackend
from agent_memory.adapters.memory.store import InMemoryMemoryStore, MemoryBackend
from agent_memory.adapters.memory.triples import InMemoryTripleStore, MemoryTripleBackend
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.ports.models import Clock

__all__ = [
    "HashingEmbedder",
    "InMemoryAuditLog",
    "InMemoryCache",
    "InMemoryEventLog",
    "InMemoryLeaseStore",
    "InMemoryMemoryStore",
    "InMemoryTripleStore",
    "MemoryAuditBackend",
    "MemoryBackend",
    "MemoryCacheBackend",
    "MemoryEventBackend",
    "MemoryLeaseBackend",
    "MemoryTripleBackend",
    "open_stores",
]


_SHARED: dict[
    str, tuple[MemoryBackend, MemoryEventBackend, MemoryLeaseBackend, MemoryCacheBackend]
] = {}
_SHARED_AUDIT: dict[str, MemoryAuditBackend] = {}


async def open_stores(
    url: str,
    *,
    space: EmbeddingSpace,
    retention: timedelta,
    deployment: str,
    clock: Clock | None = None,
    index: IndexOptions | None = None,
) -> dict[str, Any]:
    """Factory used by `agent_memory.connect("memory://name")`: handles opened with
    the same URL and deployment in one process share their data (like clients of
    one server). Index parameters on the URL (`?exact_threshold=0&hnsw_ef_search=200`,
    docs/scale.md) take precedence over `index` (the settings') and are not part of
    the name: `memory://name?exact_threshold=0` shares `memory://name`'s data."""
    url, url_index = split_index_options(url)
    index = url_index.merged(index)
    key = f"{deployment}\x00{url}"
    if key not in _SHARED:
        _SHARED[key] = (
            MemoryBackend(),
            MemoryEventBackend(),
            MemoryLeaseBackend(),
            MemoryCacheBackend(),
        )
    store_b, event_b, lease_b, cache_b = _SHARED[key]
    return {
        "store": InMemoryMemoryStore(space, store_b, index=index),
        "events": InMemoryEventLog(retention=retention, clock=clock, backend=event_b),
        "leases": InMemoryLeaseStore(clock=clock, backend=lease_b),
        "cache": InMemoryCache(clock=clock, backend=cache_b),
        "audit": InMemoryAuditLog(backend=_SHARED_AUDIT.setdefault(key, MemoryAuditBackend())),
        "details": {"backend": "memory", "shared_as": url, "vector_search": describe_search(index)},
    }

"""In-process adapters for every storage port, plus the offline hashing embedder."""

from datetime import timedelta
from typing import Any

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
) -> dict[str, Any]:
    """Factory used by `agent_memory.connect("memory://name")`: handles opened with
    the same URL and deployment in one process share their data (like clients of
    one server)."""
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
        "store": InMemoryMemoryStore(space, store_b),
        "events": InMemoryEventLog(retention=retention, clock=clock, backend=event_b),
        "leases": InMemoryLeaseStore(clock=clock, backend=lease_b),
        "cache": InMemoryCache(clock=clock, backend=cache_b),
        "audit": InMemoryAuditLog(backend=_SHARED_AUDIT.setdefault(key, MemoryAuditBackend())),
        "details": {"backend": "memory", "shared_as": url},
    }

"""In-process adapters for every storage port, plus the offline hashing embedder."""

from agent_memory.adapters.memory.cache import InMemoryCache, MemoryCacheBackend
from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.adapters.memory.events import InMemoryEventLog, MemoryEventBackend
from agent_memory.adapters.memory.leases import InMemoryLeaseStore, MemoryLeaseBackend
from agent_memory.adapters.memory.store import InMemoryMemoryStore, MemoryBackend

__all__ = [
    "HashingEmbedder",
    "InMemoryCache",
    "InMemoryEventLog",
    "InMemoryLeaseStore",
    "InMemoryMemoryStore",
    "MemoryBackend",
    "MemoryCacheBackend",
    "MemoryEventBackend",
    "MemoryLeaseBackend",
]

"""Redis adapters: every storage port on Redis / Valkey (vectors and keyword
search through the Search module). See docs/redis.md for the key schema."""

from agent_memory.adapters.redis._client import connect
from agent_memory.adapters.redis._keys import SCHEMA_VERSION, KeySchema
from agent_memory.adapters.redis.cache import RedisCache
from agent_memory.adapters.redis.events import RedisEventLog
from agent_memory.adapters.redis.leases import RedisLeaseStore
from agent_memory.adapters.redis.store import RedisMemoryStore

__all__ = [
    "SCHEMA_VERSION",
    "KeySchema",
    "RedisCache",
    "RedisEventLog",
    "RedisLeaseStore",
    "RedisMemoryStore",
    "connect",
]

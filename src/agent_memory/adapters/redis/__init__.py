"""Redis adapters: every storage port on Redis / Valkey (vectors and keyword
search through the Search module). See docs/redis.md for the key schema."""

from datetime import timedelta
from typing import Any

from agent_memory.adapters._common.index_options import IndexOptions, split_index_options
from agent_memory.adapters.redis._client import connect
from agent_memory.adapters.redis._handle import SharedClient
from agent_memory.adapters.redis._keys import SCHEMA_VERSION, KeySchema
from agent_memory.adapters.redis.cache import RedisCache
from agent_memory.adapters.redis.events import RedisEventLog
from agent_memory.adapters.redis.leases import RedisLeaseStore
from agent_memory.adapters.redis.store import RedisMemoryStore
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.ports.models import Clock

__all__ = [
    "SCHEMA_VERSION",
    "KeySchema",
    "RedisCache",
    "RedisEventLog",
    "RedisLeaseStore",
    "RedisMemoryStore",
    "connect",
    "open_stores",
]

# Redis' own name of the query-time candidate list.
_ALIASES = {"hnsw_ef_runtime": "hnsw_ef_search"}


async def _server_details(url: str) -> dict[str, str]:
    """Server version and whether the Search module is loaded (for `doctor`)."""
    client = connect(url)
    try:
        info = await client.info("server")
        modules = await client.execute_command("MODULE", "LIST")  # type: ignore[no-untyped-call]
    except Exception as exc:  # reported, never raised: doctor pings separately
        return {"server": f"unavailable ({type(exc).__name__})"}
    finally:
        await client.aclose()
    names = set()
    for entry in modules or []:
        fields = dict(zip(entry[::2], entry[1::2], strict=False))
        name = fields.get(b"name", fields.get("name", b""))
        names.add(name.decode() if isinstance(name, bytes) else str(name))
    server = info.get("server_name", "redis")
    version = info.get("valkey_version") or info.get("redis_version", "?")
    search = "search" in {n.lower() for n in names} or "ft" in {n.lower() for n in names}
    return {
        "server": f"{server} {version}",
        "search_module": "loaded"
        if search
        else "MISSING (vector search needs Redis 8+, Redis Stack, or Valkey with a search module)",
    }


async def open_stores(
    url: str,
    *,
    space: EmbeddingSpace,
    retention: timedelta,
    deployment: str = "default",
    clock: Clock | None = None,
    index: IndexOptions | None = None,
) -> dict[str, Any]:
    """The bootstrap hook for `redis://` and `rediss://` URLs: the four ports on
    one shared connection pool (closed with the last port), under one
    deployment's key prefix. Vector index parameters come from the URL
    (`?hnsw_m=16&hnsw_ef_construction=200&hnsw_ef_runtime=200&exact_threshold=5000`;
    `hnsw_ef_search` is the same as `hnsw_ef_runtime`), else from `index` (the
    `AGENT_MEMORY_HNSW_*` settings), else the defaults (docs/redis.md)."""
    url, options = split_index_options(url, aliases=_ALIASES)
    options = options.merged(index)
    details = {"backend": "redis", "deployment": deployment, "key_schema": SCHEMA_VERSION}
    details.update(await _server_details(url))
    shared = SharedClient(connect(url))  # one pool for the four ports
    return {
        "store": RedisMemoryStore(shared, space, deployment=deployment, index=options),
        "events": RedisEventLog(shared, deployment=deployment, retention=retention, clock=clock),
        "leases": RedisLeaseStore(shared, deployment=deployment),
        "cache": RedisCache(shared, deployment=deployment),
        "details": details,
    }

"""Redis adapters: every storage port on Redis / Valkey (vectors and keyword
search through the Search module). See docs/redis.md for the key schema."""

from datetime import timedelta
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.exceptions import ResponseError

from agent_memory.adapters._common.index_options import IndexOptions, split_index_options
from agent_memory.adapters.redis._client import connect, is_cluster_url
from agent_memory.adapters.redis._handle import SharedClient
from agent_memory.adapters.redis._keys import SCHEMA_VERSION, KeySchema
from agent_memory.adapters.redis.audit import RedisAuditLog
from agent_memory.adapters.redis.cache import RedisCache
from agent_memory.adapters.redis.events import RedisEventLog
from agent_memory.adapters.redis.leases import RedisLeaseStore
from agent_memory.adapters.redis.store import RedisMemoryStore
from agent_memory.domain.errors import ConfigurationError, InvalidInput
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.ports.models import Clock

__all__ = [
    "SCHEMA_VERSION",
    "KeySchema",
    "RedisAuditLog",
    "RedisCache",
    "RedisEventLog",
    "RedisLeaseStore",
    "RedisMemoryStore",
    "connect",
    "open_stores",
]

# Redis' own name of the query-time candidate list.
_ALIASES = {"hnsw_ef_runtime": "hnsw_ef_search"}


def _split_lease_options(url: str) -> tuple[str, dict[str, Any]]:
    """`lease_wait_replicas` and `lease_wait_timeout_ms` out of the URL's query."""
    parts = urlsplit(url)
    kept, ours = [], {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in ("lease_wait_replicas", "lease_wait_timeout_ms"):
            if name in ours:
                raise InvalidInput(name, "given twice in the URL")
            if not (value.isascii() and value.isdigit()):  # int() refuses `²`
                raise InvalidInput(name, f"a whole number is required, got {value!r}")
            ours[name] = int(value)
        else:
            kept.append((name, value))
    options: dict[str, Any] = {}
    if "lease_wait_replicas" in ours:
        options["wait_replicas"] = ours["lease_wait_replicas"]
    if "lease_wait_timeout_ms" in ours:
        if ours["lease_wait_timeout_ms"] < 1:
            raise InvalidInput("lease_wait_timeout_ms", "at least 1 is required")
        options["wait_timeout"] = timedelta(milliseconds=ours["lease_wait_timeout_ms"])
    return urlunsplit(parts._replace(query=urlencode(kept))), options


async def _cluster_details(url: str) -> dict[str, str]:
    """The cluster's topology: primaries, replicas, slots, search module per node."""
    from agent_memory.adapters.redis._cluster import topology

    client: Any = connect(url)
    try:
        out = await topology(client)
        info = await client.info("server", target_nodes=client.get_random_node())
    except Exception as exc:  # reported, never raised: doctor pings separately
        return {"server": f"unavailable ({type(exc).__name__}: {exc})"}
    finally:
        await client.aclose()
    server = info.get("server_name", "redis")
    version = info.get("valkey_version") or info.get("redis_version", "?")
    out["server"] = f"{server} {version} (cluster)"
    missing = [k for k, v in out.items() if k.startswith("cluster node") and "MISSING" in v]
    out["search_module"] = (
        "loaded on every node"
        if not missing
        else f"MISSING on {len(missing)} node(s) (vector search needs it on every primary)"
    )
    return out


def _no_such_database(exc: BaseException) -> bool:
    """The server's refusal of the URL's database number (SELECT on connect)."""
    return isinstance(exc, ResponseError) and "db index is out of range" in str(exc).lower()


async def _server_details(url: str) -> dict[str, str]:
    """Server version and whether the Search module is loaded (for `doctor`)."""
    if is_cluster_url(url):
        return await _cluster_details(url)
    client = cast(Any, connect(url))
    try:
        info = await client.info("server")
        modules = await client.execute_command("MODULE", "LIST")
    except Exception as exc:  # reported, never raised: doctor pings separately
        if _no_such_database(exc):
            raise ConfigurationError(
                f"the Redis URL names database {client.connection_pool.connection_kwargs['db']}, "
                "which the server does not have (its `databases` setting, 16 by default, "
                "numbers them from 0)"
            ) from None
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
    """The bootstrap hook for `redis://`, `rediss://` and (Redis Cluster)
    `redis+cluster://host:port,host:port/` URLs: the four ports on one shared
    client (closed with the last port), under one deployment's key prefix. Lease
    replication: `?lease_wait_replicas=N&lease_wait_timeout_ms=T` (default 1 on a
    cluster, 0 on a single server; docs/redis.md "Cluster"). Vector index
    parameters come from the URL
    (`?hnsw_m=16&hnsw_ef_construction=200&hnsw_ef_runtime=200&exact_threshold=5000`;
    `hnsw_ef_search` is the same as `hnsw_ef_runtime`), else from `index` (the
    `AGENT_MEMORY_HNSW_*` settings), else the defaults (docs/redis.md)."""
    url, options = split_index_options(url, aliases=_ALIASES)
    url, lease_options = _split_lease_options(url)
    options = options.merged(index)
    details = {"backend": "redis", "deployment": deployment, "key_schema": SCHEMA_VERSION}
    details.update(await _server_details(url))
    shared = SharedClient(connect(url))  # one pool for the four ports
    return {
        "store": RedisMemoryStore(shared, space, deployment=deployment, index=options),
        "events": RedisEventLog(shared, deployment=deployment, retention=retention, clock=clock),
        "leases": RedisLeaseStore(shared, deployment=deployment, **lease_options),
        "cache": RedisCache(shared, deployment=deployment),
        "audit": RedisAuditLog(shared, deployment=deployment),
        "details": details,
    }

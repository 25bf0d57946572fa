"""PostgreSQL + pgvector adapters for every storage port (psycopg 3, async pool).

`open_stores(url, ...)` is the factory `agent_memory.connect("postgresql://...")`
uses: the four ports share one `PostgresDatabase` (one pool, one schema per
deployment) that closes when the last of them is closed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from agent_memory.adapters._common.index_options import IndexOptions, split_index_options
from agent_memory.adapters.postgres._database import (
    PostgresDatabase,
    schema_for_deployment,
    split_call_timeout,
)
from agent_memory.adapters.postgres._migrations import SCHEMA_VERSION
from agent_memory.adapters.postgres.audit import PostgresAuditLog
from agent_memory.adapters.postgres.cache import PostgresCache
from agent_memory.adapters.postgres.events import PostgresEventLog
from agent_memory.adapters.postgres.leases import PostgresLeaseStore
from agent_memory.adapters.postgres.store import DEFAULT_EF_SEARCH, PostgresMemoryStore
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.ports.models import Clock

__all__ = [
    "SCHEMA_VERSION",
    "PostgresAuditLog",
    "PostgresCache",
    "PostgresDatabase",
    "PostgresEventLog",
    "PostgresLeaseStore",
    "PostgresMemoryStore",
    "database_for_url",
    "open_stores",
    "schema_for_deployment",
]


def database_for_url(
    url: str, *, schema: str, index: IndexOptions | None = None
) -> tuple[PostgresDatabase, IndexOptions]:
    """The (unopened) database a `postgresql://` or `postgres://` URL names, and its
    vector index options: the URL's own (`hnsw_*`, `exact_threshold`) over `index`.
    `call_timeout` is taken off the URL too; every other parameter goes to libpq."""
    url = url.replace("postgres://", "postgresql://", 1) if url.startswith("postgres://") else url
    url, options = split_index_options(url)
    url, call_timeout = split_call_timeout(url)
    options = options.merged(index)
    database = PostgresDatabase(
        url,
        schema=schema,
        ef_search=options.ef_search or DEFAULT_EF_SEARCH,
        call_timeout=call_timeout,
    )
    return database, options


async def open_stores(
    url: str,
    *,
    space: EmbeddingSpace,
    retention: timedelta,
    deployment: str = "default",
    clock: Clock | None = None,
    schema: str | None = None,
    index: IndexOptions | None = None,
) -> dict[str, Any]:
    """Open the four ports on one database; migrations run here, under an advisory lock.

    Vector index parameters come from the URL (`?hnsw_m=16&hnsw_ef_construction=200&
    hnsw_ef_search=400&exact_threshold=1000`, see docs/postgres.md), else from
    `index` (the `AGENT_MEMORY_HNSW_*` settings), else the defaults. `?call_timeout=`
    bounds each round trip to the server (seconds, default 30; `none`: no bound).

    `details` carries what `agent-memory doctor` shows: schema, schema version,
    pgvector and server versions.
    """
    database, options = database_for_url(
        url, schema=schema or schema_for_deployment(deployment), index=index
    )
    try:
        store = PostgresMemoryStore(database, space, owns_database=True, index=options)
        await database.open()
        events = PostgresEventLog(database, retention=retention, clock=clock, owns_database=True)
        leases = PostgresLeaseStore(database, clock=clock, owns_database=True)
        cache = PostgresCache(database, clock=clock, owns_database=True)
        audit = PostgresAuditLog(database, owns_database=True)
        details = {
            "backend": "postgres",
            "schema": database.schema,
            "schema_version": str(await database.schema_version()),
            "pgvector": str(await database.pgvector_version()),
            "server": await database.server_version(),
        }
    except BaseException:
        await database.close()
        raise
    return {
        "store": store,
        "events": events,
        "leases": leases,
        "cache": cache,
        "audit": audit,
        "details": details,
    }

"""The embedded default: every storage port on one SQLite file (stdlib sqlite3 +
numpy), shared safely by several handles and processes on one machine."""

from __future__ import annotations

import logging
import os
import sqlite3
from datetime import timedelta
from typing import Any, cast
from urllib.parse import parse_qsl, urlsplit

from attrs import frozen

from agent_memory.adapters._common.ann import describe_search
from agent_memory.adapters._common.index_options import (
    INDEX_PARAMETERS,
    IndexOptions,
    parse_index_options,
)
from agent_memory.adapters._common.urls import file_path
from agent_memory.adapters.sqlite._db import DEFAULT_BUSY_TIMEOUT, Synchronous
from agent_memory.adapters.sqlite.audit import SqliteAuditLog
from agent_memory.adapters.sqlite.cache import SqliteCache
from agent_memory.adapters.sqlite.events import DEFAULT_RETENTION, SqliteEventLog
from agent_memory.adapters.sqlite.leases import SqliteLeaseStore
from agent_memory.adapters.sqlite.schema import SCHEMA_VERSION
from agent_memory.adapters.sqlite.store import SqliteMemoryStore
from agent_memory.domain.errors import ConfigurationError
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.ports.models import Clock

_log = logging.getLogger(__name__)

__all__ = [
    "SCHEMA_VERSION",
    "SqliteAuditLog",
    "SqliteCache",
    "SqliteEventLog",
    "SqliteLeaseStore",
    "SqliteMemoryStore",
    "SqliteStores",
    "open_sqlite",
    "open_stores",
    "path_from_url",
]


@frozen
class SqliteStores:
    """The four stores on one file; `close()` closes them all."""

    store: SqliteMemoryStore
    events: SqliteEventLog
    leases: SqliteLeaseStore
    cache: SqliteCache

    async def close(self) -> None:
        await self.store.close()
        await self.events.close()
        await self.leases.close()
        await self.cache.close()

    async def __aenter__(self) -> SqliteStores:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def open_sqlite(
    path: str | os.PathLike[str],
    *,
    space: EmbeddingSpace,
    retention: timedelta = DEFAULT_RETENTION,
    clock: Clock | None = None,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    synchronous: Synchronous = "NORMAL",
    index: IndexOptions | None = None,
) -> SqliteStores:
    """All four ports on the file at `path`. Nothing is opened until first use."""
    bt, sync = busy_timeout, synchronous
    return SqliteStores(
        store=SqliteMemoryStore(path, space, busy_timeout=bt, synchronous=sync, index=index),
        events=SqliteEventLog(
            path, retention=retention, clock=clock, busy_timeout=bt, synchronous=sync
        ),
        leases=SqliteLeaseStore(path, clock=clock, busy_timeout=bt, synchronous=sync),
        cache=SqliteCache(path, clock=clock, busy_timeout=bt, synchronous=sync),
    )


def path_from_url(url: str) -> tuple[str, dict[str, str]]:
    """The file path and query options of a SQLite URL.

    `sqlite:///abs/path.db` and `sqlite:////abs/path.db` both name the absolute
    path `/abs/path.db`; `sqlite:relative/path.db` (no slashes) is relative to
    the working directory. Percent-escapes are decoded. (docs/configuration.md,
    "Storage URLs", is the one place this rule is documented.)

    `sqlite:///name.db` is the absolute `/name.db` at the filesystem root, as it
    always was here; since SQLAlchemy reads that spelling as relative, it is
    logged as a warning that names `sqlite:name.db`.
    """
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite" or parts.netloc:
        raise ConfigurationError(
            f"a SQLite URL looks like sqlite:///abs/path.db or sqlite:relative.db, got {url!r}"
        )
    raw = parts.path
    if raw.startswith("//"):
        raw = "/" + raw.lstrip("/")
    path = file_path(raw, url)
    if not path.strip() or path.endswith("/"):
        raise ConfigurationError(f"the SQLite URL {url!r} names no file")
    if not parts.path.startswith("//") and os.path.dirname(path) == "/":
        _log.warning(
            "%s names %s at the filesystem root; for a file in the working directory "
            "write sqlite:%s",
            url,
            path,
            path[1:],
        )
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    options = dict(pairs)
    if len(options) != len(pairs):
        twice = sorted({k for k, _ in pairs if [n for n, _ in pairs].count(k) > 1})
        raise ConfigurationError(f"SQLite URL options {twice} are given twice in {url!r}")
    unknown = sorted(set(options) - {"busy_timeout", "synchronous", *INDEX_PARAMETERS})
    if unknown:
        raise ConfigurationError(f"unknown SQLite URL options {unknown} in {url!r}")
    return path, options


async def open_stores(
    url: str,
    *,
    space: EmbeddingSpace,
    retention: timedelta = DEFAULT_RETENTION,
    deployment: str = "default",
    clock: Clock | None = None,
    index: IndexOptions | None = None,
) -> dict[str, Any]:
    """The bootstrap hook for `sqlite:///path` URLs (options: `busy_timeout` in
    seconds, `synchronous=NORMAL|FULL`, and the index parameters `exact_threshold`,
    `hnsw_m`, `hnsw_ef_construction`, `hnsw_ef_search` of docs/scale.md, which take
    precedence over `index`, the settings'). One file holds one deployment."""
    path, options = path_from_url(url)
    index = parse_index_options({k: v for k, v in options.items() if k in INDEX_PARAMETERS}).merged(
        index
    )
    path = os.path.abspath(path)  # noqa: ASYNC240 - no I/O; a relative path is fixed now
    try:
        busy_timeout = float(options.get("busy_timeout", DEFAULT_BUSY_TIMEOUT))
    except ValueError:
        raise ConfigurationError(f"busy_timeout must be a number of seconds in {url!r}") from None
    synchronous = options.get("synchronous", "NORMAL").upper()
    if synchronous not in ("NORMAL", "FULL"):
        raise ConfigurationError(f"synchronous must be NORMAL or FULL in {url!r}")
    stores = open_sqlite(
        path,
        space=space,
        retention=retention,
        clock=clock,
        busy_timeout=busy_timeout,
        synchronous=cast(Synchronous, synchronous),
        index=index,
    )
    return {
        "store": stores.store,
        "events": stores.events,
        "leases": stores.leases,
        "cache": stores.cache,
        "audit": SqliteAuditLog(
            path, busy_timeout=busy_timeout, synchronous=cast(Synchronous, synchronous)
        ),
        "details": {
            "backend": "sqlite",
            "path": path,
            "deployment": deployment,
            "sqlite_version": sqlite3.sqlite_version,
            "schema_version": SCHEMA_VERSION,
            "synchronous": synchronous,
            "vector_search": describe_search(index),
        },
    }

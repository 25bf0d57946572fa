"""Open a `MilvusMemoryStore` from a URL.

| URL | client |
| --- | --- |
| `milvus://host:19530` | a Milvus server over gRPC |
| `milvus://user:password@host:19530` | the same, authenticated (`user:password` token) |
| `milvus+lite:///abs/path/memory.db` | Milvus Lite in this process, data in that file's directory |

Options: `?tls=true` (a server over TLS), `?token=...` (an API key instead of
user and password), `?db=NAME` (a server database), `?index=FLAT|HNSW|AUTOINDEX|...`
(the vector index of a collection this store creates; default FLAT, exact),
`?prefix=NAME_` (collection name prefix, default `agent_memory_`; through
`connect()` a deployment other than `default` gets `agent_memory_<slug>_<hash>_`
unless the URL names a prefix). Parsing does no I/O; a client connects when it
is built (for Milvus Lite that starts the in-process server, about 1.5 s, once per
file and process), which `open_stores` does in a worker thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from pymilvus import MilvusClient
from pymilvus.exceptions import MilvusException

from agent_memory.adapters._common.urls import file_path
from agent_memory.adapters.milvus.store import DEFAULT_COLLECTION_PREFIX, MilvusMemoryStore
from agent_memory.domain.errors import BackendUnavailable, ConfigurationError
from agent_memory.domain.records import EmbeddingSpace

__all__ = ["MilvusTarget", "open_milvus_store", "open_stores", "parse_milvus_url"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_KNOWN = {"prefix", "tls", "token", "db", "index"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INDEX = re.compile(r"[A-Z_]+")


class MilvusTarget:
    """What a milvus URL names: client arguments, collection prefix, index type."""

    def __init__(self, kind: str, kwargs: dict[str, Any], prefix: str, index: str) -> None:
        self.kind = kind
        self.kwargs = kwargs
        self.prefix = prefix
        self.index = index
        #: Milvus Lite filters unsealed rows one by one: seal every 1024 written rows.
        self.flush_rows = 1024 if kind == "lite" else 0

    def client(self) -> MilvusClient:
        """A new client (for Milvus Lite this starts or reuses the in-process
        server; a server's client connects here: `BackendUnavailable` when it
        cannot)."""
        try:
            return MilvusClient(**self.kwargs)
        except (MilvusException, OSError, TimeoutError) as exc:
            raise BackendUnavailable(
                "milvus", f"cannot connect: {type(exc).__name__}: {exc}"
            ) from exc


def _flag(params: dict[str, list[str]], name: str) -> bool:
    raw = params.get(name, ["false"])[-1].lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigurationError(f"milvus URL option {name}={raw!r}: expected true or false")


def parse_milvus_url(url: str) -> MilvusTarget:
    """Parse and check a milvus URL (no I/O); `ConfigurationError` names the problem."""
    if not isinstance(url, str):
        raise ConfigurationError(f"a milvus URL string is required, got {type(url).__name__}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    params = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(params) - _KNOWN)
    if unknown:
        raise ConfigurationError(f"unknown milvus URL option(s) {unknown}; known: {sorted(_KNOWN)}")
    twice = sorted(name for name, values in params.items() if len(values) > 1)
    if twice:
        raise ConfigurationError(f"milvus URL option(s) {twice} given twice")
    prefix = params.get("prefix", [DEFAULT_COLLECTION_PREFIX])[-1]
    if not _NAME.fullmatch(prefix):
        raise ConfigurationError(
            f"milvus URL option prefix={prefix!r}: a collection name starts with a letter or "
            "underscore and holds only letters, digits and underscores"
        )
    index = params.get("index", ["FLAT"])[-1].upper()
    if not _INDEX.fullmatch(index):
        raise ConfigurationError(f"milvus URL option index={index!r}: an index type such as FLAT")
    if scheme == "milvus+lite":
        path = file_path(parts.path, url)
        if parts.netloc or not path.startswith("/") or not path.endswith(".db"):
            raise ConfigurationError(
                "milvus+lite URL needs an absolute path to a file ending in .db, e.g. "
                f"milvus+lite:///var/lib/agent-memory/milvus.db; got {url!r}"
            )
        return MilvusTarget("lite", {"uri": path}, prefix, index)
    if scheme == "milvus":
        if not parts.hostname:
            raise ConfigurationError("milvus URL needs a host, e.g. milvus://localhost:19530")
        try:
            port = parts.port or 19530
        except ValueError as exc:
            raise ConfigurationError(f"milvus URL port: {exc}") from None
        tls = _flag(params, "tls")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname  # IPv6
        kwargs: dict[str, Any] = {"uri": f"{'https' if tls else 'http'}://{host}:{port}"}
        if parts.username:
            kwargs["token"] = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        if "token" in params:
            kwargs["token"] = params["token"][-1]
        if "db" in params:
            kwargs["db_name"] = params["db"][-1]
        return MilvusTarget("server", kwargs, prefix, index)
    raise ConfigurationError(
        f"not a milvus URL: {scheme!r}; use milvus://host:port or milvus+lite:///path/file.db"
    )


def deployment_prefix(deployment: str) -> str:
    """The collection prefix of a named deployment: a readable slug plus a hash."""
    slug = re.sub(r"[^a-z0-9]+", "_", deployment.lower()).strip("_")[:24] or "d"
    digest = hashlib.sha256(deployment.encode("utf-8")).hexdigest()[:8]
    return f"{DEFAULT_COLLECTION_PREFIX}{slug}_{digest}_"


def open_milvus_store(url: str, space: EmbeddingSpace) -> MilvusMemoryStore:
    """A store that owns a new client for `url` (closing the store closes it)."""
    target = parse_milvus_url(url)
    return MilvusMemoryStore(
        target.client(),
        space,
        collection_prefix=target.prefix,
        owns_client=True,
        index_type=target.index,
        flush_rows=target.flush_rows,
    )


async def open_stores(
    url: str,
    *,
    space: EmbeddingSpace,
    retention: timedelta | None = None,
    deployment: str | None = None,
    clock: object | None = None,
) -> dict[str, Any]:
    """The bootstrap hook: Milvus serves the memory store only."""
    del retention, clock  # events, leases and cache come from another URL
    target = parse_milvus_url(url)
    prefix = target.prefix
    if deployment and deployment != "default" and "prefix" not in parse_qs(urlsplit(url).query):
        prefix = deployment_prefix(deployment)
    client = await asyncio.to_thread(target.client)
    store = MilvusMemoryStore(
        client,
        space,
        collection_prefix=prefix,
        owns_client=True,
        index_type=target.index,
        flush_rows=target.flush_rows,
    )
    return {
        "store": store,
        "details": {"milvus": target.kind, "collection": store.collection_name, "prefix": prefix},
    }

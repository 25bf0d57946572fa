"""Open a `QdrantMemoryStore` from a URL.

| URL | client |
| --- | --- |
| `qdrant://host:6333` | a Qdrant server over HTTP (options below) |
| `qdrant://:API_KEY@host:6333` | the same, with an API key (the password part of the URL) |
| `qdrant+local:///abs/path` | local mode persisted in a directory (one process at a time) |
| `qdrant+memory://` | qdrant-client local mode in memory (tests, demos) |

Server options: `?tls=true` (HTTPS), `?grpc=true` (prefer gRPC), `?grpc_port=6334`,
`?timeout=SECONDS`. Every form takes the vector index parameters `?hnsw_m=16`,
`?hnsw_ef_construction=200`, `?hnsw_ef=200` (also spelled `hnsw_ef_search`) and
`?exact_threshold=5000` (docs/qdrant.md), `?keyword=false` (add and update store no
keyword terms; the first keyword search over such records derives them, on any
handle: docs/qdrant.md, "Overhead"), and `?prefix=NAME_` (the collection name prefix,
default `agent_memory_`; through `connect()` a deployment other than `default`
gets `agent_memory_<slug>_<hash>_` unless the URL names a prefix).
Building the client does no network I/O; the first operation connects.
"""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from qdrant_client import AsyncQdrantClient

from agent_memory.adapters._common.index_options import (
    INDEX_PARAMETERS,
    IndexOptions,
    split_index_options,
)
from agent_memory.adapters._common.urls import file_path
from agent_memory.adapters.qdrant.store import DEFAULT_COLLECTION_PREFIX, QdrantMemoryStore
from agent_memory.domain.errors import ConfigurationError
from agent_memory.domain.records import EmbeddingSpace

__all__ = [
    "deployment_prefix",
    "index_options_from_url",
    "keyword_from_url",
    "open_qdrant_store",
    "open_stores",
    "qdrant_client_from_url",
]

# Qdrant's own name of the query-time candidate list.
_ALIASES = {"hnsw_ef": "hnsw_ef_search"}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _flag(params: dict[str, list[str]], name: str, *, default: bool = False) -> bool:
    raw = params.get(name, ["true" if default else "false"])[-1].lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigurationError(f"qdrant URL option {name}={raw!r}: expected true or false")


def _whole(params: dict[str, list[str]], name: str, wanted: str, most: int = 2**31 - 1) -> int:
    """A positive whole number option in ASCII digits (`int()` would also read
    `٣`, `1_0` or a sign), at most `most`."""
    raw = params[name][-1].strip()
    if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) <= most:
        raise ConfigurationError(f"qdrant URL option {name}: {wanted} is required, got {raw!r}")
    return int(raw)


def _parse(url: str) -> tuple[str, dict[str, Any], str]:
    """(kind, client kwargs, collection prefix) of a qdrant URL."""
    if not isinstance(url, str):
        raise ConfigurationError(f"a qdrant URL string is required, got {type(url).__name__}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    params = parse_qs(parts.query, keep_blank_values=True)
    known = {
        "prefix",
        "tls",
        "grpc",
        "grpc_port",
        "timeout",
        "keyword",
        *INDEX_PARAMETERS,
        *_ALIASES,
    }
    unknown = sorted(set(params) - known)
    if unknown:
        raise ConfigurationError(f"unknown qdrant URL option(s) {unknown}; known: {sorted(known)}")
    twice = sorted(name for name, values in params.items() if len(values) > 1)
    if twice:
        raise ConfigurationError(f"qdrant URL option(s) {twice} given twice")
    prefix = params.get("prefix", [DEFAULT_COLLECTION_PREFIX])[-1]
    if scheme == "qdrant+memory":
        return "memory", {"location": ":memory:"}, prefix
    if scheme == "qdrant+local":
        path = file_path(parts.path, url)  # a NUL or a non-UTF-8 escape names no directory
        if parts.netloc or not path or path == "/":
            raise ConfigurationError(
                f"qdrant+local URL needs an absolute directory path, e.g. qdrant+local:///var/"
                f"lib/agent-memory/qdrant; got {url!r}"
            )
        return "local", {"path": path}, prefix
    if scheme == "qdrant":
        if not parts.hostname:
            raise ConfigurationError("qdrant URL needs a host, e.g. qdrant://localhost:6333")
        tls = _flag(params, "tls")
        try:
            port = parts.port or 6333
        except ValueError as exc:
            raise ConfigurationError(f"qdrant URL port: {exc}") from None
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname  # IPv6
        kwargs: dict[str, Any] = {
            "url": f"{'https' if tls else 'http'}://{host}:{port}",
            "prefer_grpc": _flag(params, "grpc"),
            # The version check runs a request in a thread at construction: no I/O
            # before the first operation.
            "check_compatibility": False,
        }
        if "grpc_port" in params:
            kwargs["grpc_port"] = _whole(params, "grpc_port", "a port number in 1..65535", 65535)
        if "timeout" in params:
            kwargs["timeout"] = _whole(params, "timeout", "a positive whole number of seconds")
        if parts.password:
            kwargs["api_key"] = unquote(parts.password)
        return "server", kwargs, prefix
    raise ConfigurationError(
        f"not a qdrant URL: {scheme!r}; use qdrant://host:port, qdrant+local:///path "
        "or qdrant+memory://"
    )


def deployment_prefix(deployment: str) -> str:
    """The collection prefix of a named deployment: a readable slug plus a hash, so
    that any name (spaces, punctuation, non-ASCII) gives a valid, distinct prefix."""
    slug = re.sub(r"[^a-z0-9]+", "_", deployment.lower()).strip("_")[:24] or "d"
    digest = hashlib.sha256(deployment.encode("utf-8")).hexdigest()[:8]
    return f"{DEFAULT_COLLECTION_PREFIX}{slug}_{digest}_"


def qdrant_client_from_url(url: str) -> tuple[AsyncQdrantClient, str]:
    """An `AsyncQdrantClient` for `url` and the collection prefix it names."""
    _kind, kwargs, prefix = _parse(url)
    return AsyncQdrantClient(**kwargs), prefix


def index_options_from_url(url: str) -> IndexOptions:
    """The vector index parameters a qdrant URL names (`hnsw_m`, `hnsw_ef_construction`,
    `hnsw_ef` or `hnsw_ef_search`, `exact_threshold`); `ConfigurationError` for a bad one."""
    return split_index_options(url, aliases=_ALIASES)[1]


def keyword_from_url(url: str) -> bool:
    """The URL's `keyword` option (default true): whether `add` and `update` store
    keyword terms. `ConfigurationError` naming it for a value other than
    true/false (also 1/0, yes/no, on/off)."""
    _parse(url)  # the URL itself must be valid
    return _flag(parse_qs(urlsplit(url).query, keep_blank_values=True), "keyword", default=True)


def open_qdrant_store(url: str, space: EmbeddingSpace) -> QdrantMemoryStore:
    """A store that owns a new client for `url` (closing the store closes it)."""
    options = index_options_from_url(url)
    keyword = keyword_from_url(url)
    client, prefix = qdrant_client_from_url(url)
    return QdrantMemoryStore(
        client,
        space,
        collection_prefix=prefix,
        owns_client=True,
        index=options,
        keyword=keyword,
    )


async def open_stores(
    url: str,
    *,
    space: EmbeddingSpace,
    retention: timedelta | None = None,
    deployment: str | None = None,
    clock: object | None = None,
    index: IndexOptions | None = None,
) -> dict[str, Any]:
    """The bootstrap hook: Qdrant serves the memory store only. Index parameters
    come from the URL, else from `index` (the `AGENT_MEMORY_HNSW_*` settings)."""
    del retention, clock  # events, leases and cache come from another URL
    options = index_options_from_url(url).merged(index)
    keyword = keyword_from_url(url)
    kind, kwargs, prefix = _parse(url)
    explicit = "prefix" in parse_qs(urlsplit(url).query)
    if deployment and deployment != "default" and not explicit:
        prefix = deployment_prefix(deployment)
    store = QdrantMemoryStore(
        AsyncQdrantClient(**kwargs),
        space,
        collection_prefix=prefix,
        owns_client=True,
        index=options,
        keyword=keyword,
    )
    return {
        "store": store,
        "details": {
            "qdrant": kind,
            "collection": store.collection_name,
            "prefix": prefix,
            "keyword": keyword,
        },
    }

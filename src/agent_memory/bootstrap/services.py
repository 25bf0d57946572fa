"""Build the services from a connected `Memory` and its validated settings."""

from __future__ import annotations

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.bootstrap.connect import Memory
from agent_memory.ports.models import Clock
from agent_memory.services.compaction import Compactor, CompactorOptions
from agent_memory.services.knowledge import KnowledgeService
from agent_memory.services.observability import Observability
from agent_memory.services.recorder import RecorderOptions
from agent_memory.services.reflection import ReflectionJob, ReflectionOptions
from agent_memory.services.request import AgentMemory, RequestOptions
from agent_memory.services.user_memory import UserMemory, UserMemoryOptions

__all__ = [
    "agent_memory_service",
    "compactor",
    "knowledge_service",
    "reflection_job",
    "request_options",
    "user_memory_service",
]


def request_options(memory: Memory) -> RequestOptions:
    s = memory.settings
    return RequestOptions(
        signal_ttl=s.signal_ttl,
        cleanup_timeout=s.cleanup_timeout,
        lookback=s.lookback,
        window_limit=s.window_limit,
        view_budget_bytes=s.view_budget_bytes,
        recorder=RecorderOptions(summary_timeout=s.summary_timeout),
    )


def compactor(memory: Memory, *, clock: Clock | None = None) -> Compactor:
    s = memory.settings
    return Compactor(
        events=memory.events,
        cache=memory.cache,
        clock=clock or SystemClock(),
        llm=memory.llm,
        options=CompactorOptions(lookback=s.lookback),
    )


def knowledge_service(memory: Memory, *, clock: Clock | None = None) -> KnowledgeService:
    return KnowledgeService(
        store=memory.store, embedder=memory.embedder, clock=clock or SystemClock(), llm=memory.llm
    )


def reflection_job(
    memory: Memory, *, clock: Clock | None = None, replica: str | None = None
) -> ReflectionJob:
    clock = clock or SystemClock()
    return ReflectionJob(
        events=memory.events,
        leases=memory.leases,
        knowledge=knowledge_service(memory, clock=clock),
        clock=clock,
        llm=memory.llm,
        options=ReflectionOptions(deployment=memory.settings.deployment),
        replica=replica,
    )


def agent_memory_service(
    memory: Memory,
    *,
    clock: Clock | None = None,
    observability: Observability | None = None,
    digests: bool = True,
) -> AgentMemory:
    """The episodic-memory and coordination service on `memory`'s stores, with
    digests (compaction) and knowledge recall in the planning view."""
    clock = clock or SystemClock()
    return AgentMemory(
        events=memory.events,
        leases=memory.leases,
        clock=clock,
        llm=memory.llm,
        options=request_options(memory),
        observability=observability,
        backend=memory.stores.backend,
        compactor=compactor(memory, clock=clock) if digests else None,
        knowledge=knowledge_service(memory, clock=clock),
    )


def user_memory_service(memory: Memory, *, clock: Clock | None = None) -> UserMemory:
    """Private user memory on `memory`'s store, embedder, model, events and cache."""
    return UserMemory(
        store=memory.store,
        embedder=memory.embedder,
        clock=clock or SystemClock(),
        llm=memory.llm,
        events=memory.events,
        cache=memory.cache,
        options=UserMemoryOptions(profile_budget_bytes=memory.settings.view_budget_bytes),
    )

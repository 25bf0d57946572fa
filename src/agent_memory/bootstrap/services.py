"""Build the services from a connected `Memory` and its validated settings."""

from __future__ import annotations

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.bootstrap.connect import Memory
from agent_memory.ports.models import Clock
from agent_memory.services.observability import Observability
from agent_memory.services.recorder import RecorderOptions
from agent_memory.services.request import AgentMemory, RequestOptions
from agent_memory.services.user_memory import UserMemory, UserMemoryOptions

__all__ = ["agent_memory_service", "request_options", "user_memory_service"]


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


def agent_memory_service(
    memory: Memory,
    *,
    clock: Clock | None = None,
    observability: Observability | None = None,
) -> AgentMemory:
    """The episodic-memory and coordination service on `memory`'s stores."""
    return AgentMemory(
        events=memory.events,
        leases=memory.leases,
        clock=clock or SystemClock(),
        llm=memory.llm,
        options=request_options(memory),
        observability=observability,
        backend=memory.stores.backend,
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

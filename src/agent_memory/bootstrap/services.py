"""Build the services from a connected `Memory` and its validated settings.

Every number comes from `memory.settings` (the `AGENT_MEMORY_*` variables),
every chat model from `memory.model(purpose)` (its own model, or the default),
and every service gets `memory.observability` unless one is given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.bootstrap.memory import Memory
from agent_memory.domain.errors import ConfigurationError
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.ports.models import Clock
from agent_memory.ports.storage import MemoryStore, TripleStore
from agent_memory.services.compaction import Compactor, CompactorOptions
from agent_memory.services.conversation import ConversationConfig, ConversationMemory, load_config
from agent_memory.services.graph_memory import GraphMemory, GraphSettings
from agent_memory.services.knowledge import KnowledgeOptions, KnowledgeService
from agent_memory.services.observability import Observability
from agent_memory.services.recorder import RecorderOptions
from agent_memory.services.reflection import ReflectionJob, ReflectionOptions
from agent_memory.services.request import AgentMemory, RequestOptions
from agent_memory.services.user_memory import (
    OtherSpaces,
    TriplesOpener,
    UserMemory,
    UserMemoryOptions,
)

__all__ = [
    "agent_memory_service",
    "compactor",
    "compactor_options",
    "conversation_memory",
    "graph_memory",
    "knowledge_service",
    "recorder_options",
    "reflection_job",
    "reflection_options",
    "request_options",
    "user_memory_options",
    "user_memory_service",
]


def recorder_options(memory: Memory) -> RecorderOptions:
    s = memory.settings
    return RecorderOptions(
        summary_timeout=s.summary_timeout,
        payload_allowance=s.summary_payload_bytes,
        cause_max_bytes=s.failure_cause_bytes,
    )


def request_options(memory: Memory) -> RequestOptions:
    s = memory.settings
    return RequestOptions(
        signal_ttl=s.signal_ttl,
        cleanup_timeout=s.cleanup_timeout,
        lookback=s.lookback,
        window_limit=s.window_limit,
        view_budget_bytes=s.view_budget_bytes,
        coordination_limit=s.signals_in_prompt,
        recorder=recorder_options(memory),
    )


def compactor_options(memory: Memory) -> CompactorOptions:
    s = memory.settings
    return CompactorOptions(
        lookback=s.compaction_lookback,
        raw_limit=s.compaction_raw_limit,
        target_tokens=s.digest_target_tokens,
        incremental_threshold=s.digest_incremental_threshold,
        cache_ttl=s.digest_cache_ttl,
        model_timeout=s.digest_timeout,
    )


def compactor(memory: Memory, *, clock: Clock | None = None) -> Compactor:
    return Compactor(
        events=memory.events,
        cache=memory.cache,
        clock=clock or SystemClock(),
        llm=memory.model("digest"),
        options=compactor_options(memory),
    )


def knowledge_service(memory: Memory, *, clock: Clock | None = None) -> KnowledgeService:
    return KnowledgeService(
        store=memory.store,
        embedder=memory.embedder,
        clock=clock or SystemClock(),
        llm=memory.model("knowledge"),
        options=KnowledgeOptions(model_timeout=memory.settings.extraction_timeout),
        cache=memory.cache,
    )


def reflection_options(memory: Memory) -> ReflectionOptions:
    s = memory.settings
    return ReflectionOptions(
        interval=s.reflection_interval,
        age_threshold=s.reflection_age_threshold,
        min_events=s.reflection_min_events,
        max_fragments_per_entity=s.reflection_fragments_per_entity,
        model_timeout=s.reflection_timeout,
        deployment=s.deployment,
    )


def reflection_job(
    memory: Memory,
    *,
    clock: Clock | None = None,
    replica: str | None = None,
    observability: Observability | None = None,
) -> ReflectionJob:
    clock = clock or SystemClock()
    return ReflectionJob(
        events=memory.events,
        leases=memory.leases,
        knowledge=knowledge_service(memory, clock=clock),
        clock=clock,
        llm=memory.model("reflection"),
        options=reflection_options(memory),
        replica=replica,
        observability=observability or memory.observability,
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
        llm=memory.model("summarizer"),
        options=request_options(memory),
        observability=observability or memory.observability,
        backend=memory.stores.backend,
        compactor=compactor(memory, clock=clock) if digests else None,
        knowledge=knowledge_service(memory, clock=clock),
    )


def user_memory_options(memory: Memory) -> UserMemoryOptions:
    s = memory.settings
    return UserMemoryOptions(
        similarity_threshold=s.user_similarity_threshold,
        recall_limit=s.user_facts_in_prompt,
        recall_summaries=s.user_recall_summaries,
        relevance_weight=s.user_weight_relevance,
        recency_weight=s.user_weight_recency,
        importance_weight=s.user_weight_importance,
        model_timeout=s.extraction_timeout,
        profile_budget_bytes=s.view_budget_bytes,
    )


async def _other_space_list(memory: Memory) -> list[EmbeddingSpace]:
    """The spaces besides the one reads use that may hold `memory`'s records: the
    ones re-embeds recorded (`read_spaces`), and, for a switch recorded before
    that list existed, its old space when it is a local default's (hashing at
    the configured dimension, or MiniLM's)."""
    from agent_memory.adapters._common.minilm import MINILM_SPACE
    from agent_memory.adapters.memory.embedder import HashingEmbedder
    from agent_memory.services.portability.reembed import read_spaces, read_switch

    try:
        cache = memory.cache
    except ConfigurationError:  # no cache: no re-embed was ever recorded here
        return []
    here = memory.store.space.identity
    spaces = [s for s in await read_spaces(cache) if s.identity != here]
    switch = await read_switch(cache)
    if switch is not None and switch.old != here and all(s.identity != switch.old for s in spaces):
        local = (HashingEmbedder(memory.settings.embedding_dimension).space, MINILM_SPACE)
        spaces += [s for s in local if s.identity == switch.old]
    return spaces


def other_spaces(memory: Memory) -> OtherSpaces:
    """Opens the memory stores of `memory`'s other embedding spaces
    (`_other_space_list`) for a forget to delete in them too; closed on exit."""

    @asynccontextmanager
    async def opened() -> AsyncIterator[Sequence[MemoryStore]]:
        spaces = await _other_space_list(memory)
        stores = []
        try:
            for space in spaces:
                stores.append(await memory.open_space(space))
            yield [st.store for st in stores]
        finally:
            for st in stores:
                await st.close()

    return opened


def user_memory_service(
    memory: Memory,
    *,
    clock: Clock | None = None,
    observability: Observability | None = None,
) -> UserMemory:
    """Private user memory on `memory`'s store, embedder, model, events and cache."""
    return UserMemory(
        store=memory.store,
        embedder=memory.embedder,
        clock=clock or SystemClock(),
        llm=memory.model("user_memory"),
        events=memory.events,
        cache=memory.cache,
        options=user_memory_options(memory),
        observability=observability or memory.observability,
        audit=memory.audit,
        other_spaces=other_spaces(memory),
        open_triples=deployment_triples(memory),
    )


def deployment_triples(memory: Memory) -> TriplesOpener:
    """Opens the triple store of `memory`'s deployment (`Memory.open_triples`:
    the one `graph_memory` is given from the same URL), for a forget to reach
    the user's triples; None for memory:// and for backends that keep none."""

    @asynccontextmanager
    async def opened() -> AsyncIterator[TripleStore | None]:
        triples = await memory.open_triples()
        try:
            yield triples
        finally:
            if triples is not None:
                await triples.close()

    return opened


def graph_memory(
    memory: Memory,
    triples: TripleStore,
    *,
    settings: GraphSettings | None = None,
    clock: Clock | None = None,
) -> GraphMemory:
    """Graph memory (fact triples, hydration, checkpoints) on `triples` and
    `memory`'s cache, extracting with the `triples` purpose's model."""
    return GraphMemory(
        triples,
        memory.cache,
        memory.model("triples"),
        clock=clock or SystemClock(),
        settings=settings,
    )


def conversation_memory(
    memory: Memory,
    config: ConversationConfig | str | Path | None = None,
    *,
    clock: Clock | None = None,
    observability: Observability | None = None,
) -> ConversationMemory:
    """Route-local conversation memory on `memory`'s store and embedder. `config`
    is a `ConversationConfig` or the path of a JSON/YAML policy file; without
    one no route has memory until configured."""
    if isinstance(config, str | Path):
        config = load_config(config)
    return ConversationMemory(
        memory.store,
        memory.embedder,
        config,
        clock=clock or SystemClock(),
        observability=observability or memory.observability,
        backend=memory.stores.backend,
    )

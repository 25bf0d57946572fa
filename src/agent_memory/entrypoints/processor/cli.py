"""`agent-memory processor`: run the graph memory processor on NATS JetStream.

Stores come from the storage URL (`--url`, else `AGENT_MEMORY_URL`, else the
SQLite file): triples on memory, SQLite or PostgreSQL (for Qdrant: on the
coordination URL); checkpoints in `checkpoint.storage_bucket` when the
configuration names one, else on the URL's cache. The language model comes
from `AGENT_MEMORY_LLM_URL`; `extraction.llm_assisted.model` names the model
extraction asks it for (default: `AGENT_MEMORY_LLM_MODEL`). Without a model
URL, extraction reports "no language model". SIGINT/SIGTERM stop it, draining
in-flight messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import signal
import sys

import attrs

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.bootstrap import (
    Settings,
    connect,
    coordination_url,
    default_sqlite_url,
    scheme_of,
)
from agent_memory.domain.errors import UnsupportedBackend
from agent_memory.entrypoints.processor.config import load_config
from agent_memory.ports.storage import TripleStore

__all__ = ["open_triple_store", "run_processor"]


async def open_triple_store(url: str, settings: Settings) -> TripleStore:
    """A `TripleStore` on the backend `url` names (memory, sqlite or postgresql)."""
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
        from agent_memory.adapters.postgres import PostgresDatabase, schema_for_deployment
        from agent_memory.adapters.postgres.triples import PostgresTripleStore

        if url.startswith("postgres://"):
            url = url.replace("postgres://", "postgresql://", 1)
        database = PostgresDatabase(url, schema=schema_for_deployment(settings.deployment))
        return PostgresTripleStore(database, owns_database=True)
    raise UnsupportedBackend(
        f"graph triples are stored on memory, sqlite or postgresql, not {family}"
    )


async def run_processor(nats_url: str | None, config_path: str | None, url: str | None) -> int:
    """Run until SIGINT/SIGTERM; print the final counters as JSON."""
    if importlib.util.find_spec("nats") is None:
        raise UnsupportedBackend(
            "the processor needs the nats extra: pip install 'agent-memory[nats]'"
        )
    from agent_memory.entrypoints.processor.processor import GraphProcessor
    from agent_memory.services.graph_memory import GraphMemory

    config = load_config(config_path, nats_url=nats_url)
    settings = Settings.from_env()
    model = config.extraction.llm_assisted.model
    if model is not None and settings.llm_url is not None:
        settings = attrs.evolve(settings, llm_model=model)
    storage_url = url or settings.url or default_sqlite_url()
    memory = await connect(storage_url, settings=settings)
    triples = await open_triple_store(storage_url, settings)
    try:
        graph = GraphMemory(
            triples, memory.cache, memory.llm, clock=SystemClock(), settings=config.graph
        )
        processor = GraphProcessor(graph, config)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        print(
            f"agent-memory processor: {config.nats_url} stream {config.stream_name}; "
            "Ctrl-C to stop",
            file=sys.stderr,
        )
        await processor.run_until(stop)
        print(json.dumps(processor.stats.as_dict()))
    finally:
        await triples.close()
        await memory.close()
    return 0

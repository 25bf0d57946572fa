"""`agent-memory processor`: run the graph memory processor on NATS JetStream.

Stores come from the storage URL (`--url`, else `AGENT_MEMORY_URL`, else the
SQLite file): triples on memory, SQLite or PostgreSQL (for Qdrant: on the
coordination URL), checkpoints on its cache. The language model comes from
`AGENT_MEMORY_LLM_URL` (without one, extraction reports "no language model").
SIGINT/SIGTERM stop it, draining in-flight messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import signal
import sys
from pathlib import Path
from typing import Any

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.bootstrap import Settings, connect, default_sqlite_url, scheme_of
from agent_memory.domain.errors import ConfigurationError, UnsupportedBackend
from agent_memory.ports.storage import TripleStore

__all__ = ["load_config", "open_triple_store", "run_processor"]


def load_config(path: str | None) -> dict[str, Any]:
    """The JSON document at `path` (an empty document when None)."""
    if path is None:
        return {}
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"--config: cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"--config: {path} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigurationError(f"--config: {path} must hold a JSON object")
    return doc


async def open_triple_store(url: str, settings: Settings) -> TripleStore:
    """A `TripleStore` on the backend `url` names (memory, sqlite or postgresql)."""
    family = scheme_of(url)
    if family == "qdrant":
        url = settings.coordination_url or default_sqlite_url()
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
    from agent_memory.adapters.nats import GraphProcessor, ProcessorConfig
    from agent_memory.services.graph_memory import GraphMemory, GraphSettings

    doc = load_config(config_path)
    config = ProcessorConfig.from_mapping(doc, nats_url=nats_url)
    graph_settings = GraphSettings.from_mapping(doc)
    settings = Settings.from_env()
    storage_url = url or settings.url or default_sqlite_url()
    memory = await connect(storage_url, settings=settings)
    triples = await open_triple_store(storage_url, settings)
    try:
        graph = GraphMemory(
            triples, memory.cache, memory.llm, clock=SystemClock(), settings=graph_settings
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

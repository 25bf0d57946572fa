"""`agent-memory processor`: run the graph memory processor on NATS JetStream.

Stores come from the storage URL (`--url`, else `AGENT_MEMORY_URL`, else the
SQLite file): triples on memory, SQLite or PostgreSQL (for Qdrant: on the
coordination URL); checkpoints in `checkpoint.storage_bucket` when the
configuration names one, else on the URL's cache. The language model comes
from `AGENT_MEMORY_LLM_URL`; `extraction.llm_assisted.model` names the model
extraction asks it for (default: `AGENT_MEMORY_TRIPLE_MODEL`, else
`AGENT_MEMORY_LLM_MODEL`), so with a model in the document the URL alone is
enough. Without a model URL, extraction is counted as `no_model`.
SIGINT/SIGTERM stop it, draining in-flight messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import signal
import sys
from collections.abc import Mapping

import attrs

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.bootstrap import (
    Settings,
    connect,
    default_sqlite_url,
    scheme_of,
)
from agent_memory.bootstrap.connect import open_triple_store as open_deployment_triples
from agent_memory.domain.errors import UnsupportedBackend
from agent_memory.entrypoints.processor.config import ProcessorConfig, load_config
from agent_memory.ports.storage import TripleStore

__all__ = ["open_triple_store", "processor_settings", "run_processor"]

_log = logging.getLogger(__name__)
_LLM_URL = "AGENT_MEMORY_LLM_URL"
_LLM_MODEL = "AGENT_MEMORY_LLM_MODEL"


def processor_settings(config: ProcessorConfig, env: Mapping[str, str] | None = None) -> Settings:
    """The deployment settings the processor runs with: the environment's, with
    the model extraction asks for chosen by `extraction.llm_assisted.model`,
    else `AGENT_MEMORY_TRIPLE_MODEL`, else `AGENT_MEMORY_LLM_MODEL`. A model
    named in the document stands in for `AGENT_MEMORY_LLM_MODEL`, which the
    environment alone requires beside `AGENT_MEMORY_LLM_URL`."""
    env = dict(os.environ if env is None else env)
    model = config.extraction.llm_assisted.model
    if model is not None and env.get(_LLM_URL) and not env.get(_LLM_MODEL):
        env[_LLM_MODEL] = model
    settings = Settings.from_env(env)
    if settings.llm_url is None:
        if model is not None:
            _log.warning(
                "extraction.llm_assisted.model is %r but %s is not set: no facts are extracted",
                model,
                _LLM_URL,
            )
        return settings
    chosen = model if model is not None else settings.model_name("triples")
    return attrs.evolve(settings, llm_model=chosen)


async def open_triple_store(url: str, settings: Settings) -> TripleStore:
    """A `TripleStore` on the backend `url` names (memory, sqlite or postgresql)."""
    triples = await open_deployment_triples(url, settings)
    if triples is None:
        raise UnsupportedBackend(
            f"graph triples are stored on memory, sqlite or postgresql, not {scheme_of(url)}"
        )
    return triples


async def run_processor(nats_url: str | None, config_path: str | None, url: str | None) -> int:
    """Run until SIGINT/SIGTERM; print the final counters as JSON."""
    if importlib.util.find_spec("nats") is None:
        raise UnsupportedBackend(
            "the processor needs the nats extra: pip install 'agent-memory[nats]'"
        )
    from agent_memory.entrypoints.processor.processor import GraphProcessor
    from agent_memory.services.graph_memory import GraphMemory

    config = load_config(config_path, nats_url=nats_url)
    settings = processor_settings(config)
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

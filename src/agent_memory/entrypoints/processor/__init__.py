"""The graph memory processor on NATS JetStream (extra `nats`).

`GraphProcessor(graph, ProcessorConfig.from_mapping(doc))` consumes agent-loop
events and answers them from graph memory; `agent-memory processor --nats
nats://... --config doc.json` runs one. Importing this package loads nothing
of nats-py: the processor module is imported on first use of its names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_memory.entrypoints.processor.config import (
    DeliverySettings,
    EntityStatesSettings,
    ProcessorConfig,
    load_config,
)

if TYPE_CHECKING:
    from agent_memory.entrypoints.processor.processor import GraphProcessor, ProcessorStats

__all__ = [
    "DeliverySettings",
    "EntityStatesSettings",
    "GraphProcessor",
    "ProcessorConfig",
    "ProcessorStats",
    "load_config",
]


def __getattr__(name: str) -> Any:
    if name in ("GraphProcessor", "ProcessorStats"):
        from agent_memory.entrypoints.processor import processor

        return getattr(processor, name)
    raise AttributeError(name)

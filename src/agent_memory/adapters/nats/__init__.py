"""The graph memory processor on NATS JetStream (extra `nats`: nats-py).

`GraphProcessor(graph, ProcessorConfig.from_mapping(doc))` consumes agent-loop
events and answers them from graph memory; `agent-memory processor --nats
nats://...` runs one. See `processor` for subjects, payloads and guarantees.
"""

from agent_memory.adapters.nats.config import GRAPH_SECTIONS, ProcessorConfig, subject_token
from agent_memory.adapters.nats.processor import (
    COMPACTION_SUBJECTS,
    HYDRATE_SUBJECTS,
    STREAM_SUBJECTS,
    GraphHandler,
    GraphProcessor,
    ProcessorStats,
)

__all__ = [
    "COMPACTION_SUBJECTS",
    "GRAPH_SECTIONS",
    "HYDRATE_SUBJECTS",
    "STREAM_SUBJECTS",
    "GraphHandler",
    "GraphProcessor",
    "ProcessorConfig",
    "ProcessorStats",
    "subject_token",
]

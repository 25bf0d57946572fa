"""Composition root: configuration -> wired stores, models and services."""

from agent_memory.bootstrap.connect import (
    Connecting,
    Memory,
    Stores,
    connect,
    coordination_url,
    open_stores,
    scheme_of,
)
from agent_memory.bootstrap.services import (
    agent_memory_service,
    compactor,
    graph_memory,
    knowledge_service,
    reflection_job,
    request_options,
    user_memory_service,
)
from agent_memory.bootstrap.settings import (
    ENV_VARS,
    MODEL_PURPOSES,
    Settings,
    SettingValue,
    default_sqlite_url,
)

__all__ = [
    "ENV_VARS",
    "MODEL_PURPOSES",
    "Connecting",
    "Memory",
    "SettingValue",
    "Settings",
    "Stores",
    "agent_memory_service",
    "compactor",
    "connect",
    "coordination_url",
    "default_sqlite_url",
    "graph_memory",
    "knowledge_service",
    "open_stores",
    "reflection_job",
    "request_options",
    "scheme_of",
    "user_memory_service",
]

"""Composition root: configuration -> wired stores, models and services."""

from agent_memory.bootstrap.connect import Memory, Stores, connect, open_stores, scheme_of
from agent_memory.bootstrap.services import (
    agent_memory_service,
    compactor,
    knowledge_service,
    reflection_job,
    request_options,
    user_memory_service,
)
from agent_memory.bootstrap.settings import ENV_VARS, Settings, default_sqlite_url

__all__ = [
    "ENV_VARS",
    "Memory",
    "Settings",
    "Stores",
    "agent_memory_service",
    "compactor",
    "connect",
    "default_sqlite_url",
    "knowledge_service",
    "open_stores",
    "reflection_job",
    "request_options",
    "scheme_of",
    "user_memory_service",
]

"""Composition root: configuration -> wired stores, models and services."""

from agent_memory.bootstrap.connect import Memory, Stores, connect, open_stores, scheme_of
from agent_memory.bootstrap.services import (
    agent_memory_service,
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
    "connect",
    "default_sqlite_url",
    "open_stores",
    "request_options",
    "scheme_of",
    "user_memory_service",
]

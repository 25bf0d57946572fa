"""LangGraph's `BaseStore` on agent-memory (extra `langgraph`): `AgentMemoryStore`."""

from agent_memory.entrypoints.langgraph.store import (
    AgentMemoryStore,
    InvalidNamespace,
    NoLoopForSyncCall,
    owner_of,
    record_namespace_of,
)

__all__ = [
    "AgentMemoryStore",
    "InvalidNamespace",
    "NoLoopForSyncCall",
    "owner_of",
    "record_namespace_of",
]

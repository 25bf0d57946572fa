"""LangGraph integration (extra `langgraph`): `from agent_memory.langgraph import AgentMemoryStore`.

Importing this module imports LangGraph; `import agent_memory` does not.
"""

from agent_memory.entrypoints.langgraph import (
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

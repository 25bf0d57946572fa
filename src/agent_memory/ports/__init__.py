"""Ports: the Protocols adapters implement, and the error hierarchy."""

from agent_memory.ports.models import Clock, Embedder, LanguageModel, Tokenizer
from agent_memory.ports.storage import (
    AuditLog,
    Cache,
    EventLog,
    KeywordSearch,
    LeaseStore,
    MemoryStore,
    TripleStore,
)

__all__ = [
    "AuditLog",
    "Cache",
    "Clock",
    "Embedder",
    "EventLog",
    "KeywordSearch",
    "LanguageModel",
    "LeaseStore",
    "MemoryStore",
    "Tokenizer",
    "TripleStore",
]

"""agent-memory: shared memory for LLM agents. The public facade (re-exports only).

    async with agent_memory.connect("sqlite:///memory.db") as memory:
        async with memory.agents.request(agent=..., domain=..., request_id=...) as req:
            ...
        await memory.users.profile(user_id=..., namespace=..., request=...)

Scripts without an event loop: `agent_memory.sync.connect`. The storage and
model protocols (for writing a backend) live in `agent_memory.ports`.
"""

from typing import TYPE_CHECKING

from agent_memory.bootstrap import Connecting, Memory, Settings, connect
from agent_memory.domain.errors import (
    AgentMemoryError,
    AuditNotRecorded,
    BackendUnavailable,
    ConfigurationError,
    DimensionMismatch,
    DuplicateRecord,
    InvalidInput,
    LeaseNotHeld,
    ModelError,
    ModelTimeout,
    NotFound,
    PermissionDenied,
    ScopeRequired,
    SearchModuleMissing,
    StorageCorrupted,
    StoreClosed,
    UnsupportedBackend,
)
from agent_memory.domain.records import (
    EmbeddingSpace,
    Entity,
    EntitySource,
    Event,
    EventWindow,
    Lease,
    MemoryRecord,
    Page,
    ScoredRecord,
    SummarySource,
    TimeBasis,
)
from agent_memory.domain.steps import Step
from agent_memory.domain.validation import MAX_ID_BYTES
from agent_memory.ports import (
    Cache,
    Clock,
    Embedder,
    EventLog,
    KeywordSearch,
    LanguageModel,
    LeaseStore,
    MemoryStore,
    Tokenizer,
)

__all__ = [  # noqa: RUF022 - entry points first, then records, errors, protocols
    # entry points
    "connect",
    "Memory",
    "Connecting",
    "Settings",
    "Entity",
    "Step",
    "__version__",
    # records
    "EmbeddingSpace",
    "EntitySource",
    "Event",
    "EventWindow",
    "Lease",
    "MemoryRecord",
    "Page",
    "ScoredRecord",
    "SummarySource",
    "TimeBasis",
    # bounds
    "MAX_ID_BYTES",
    # errors
    "AgentMemoryError",
    "AuditNotRecorded",
    "BackendUnavailable",
    "ConfigurationError",
    "DimensionMismatch",
    "DuplicateRecord",
    "InvalidInput",
    "LeaseNotHeld",
    "ModelError",
    "ModelTimeout",
    "NotFound",
    "PermissionDenied",
    "ScopeRequired",
    "SearchModuleMissing",
    "StorageCorrupted",
    "StoreClosed",
    "UnsupportedBackend",
    # protocols, also in agent_memory.ports (kept here for existing imports)
    "Cache",
    "Clock",
    "Embedder",
    "EventLog",
    "KeywordSearch",
    "LanguageModel",
    "LeaseStore",
    "MemoryStore",
    "Tokenizer",
]

if TYPE_CHECKING:
    __version__: str
else:

    def __getattr__(name: str) -> object:
        """`__version__`, read from the installed package's metadata on first use."""
        if name == "__version__":
            from importlib.metadata import PackageNotFoundError, version

            try:
                value = version("agent-memory")
            except PackageNotFoundError:  # a source tree that was never installed
                value = "0+unknown"
            globals()["__version__"] = value
            return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

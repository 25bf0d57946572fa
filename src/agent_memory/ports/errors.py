"""The error hierarchy of every port (defined in the domain layer, re-exported here)."""

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
    ScopeRequired,
    SearchModuleMissing,
    StorageCorrupted,
    StoreClosed,
    UnsupportedBackend,
)

__all__ = [
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
    "ScopeRequired",
    "SearchModuleMissing",
    "StorageCorrupted",
    "StoreClosed",
    "UnsupportedBackend",
]

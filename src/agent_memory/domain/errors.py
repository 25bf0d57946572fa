"""The error hierarchy: one root, each error a subclass of the matching builtin.

Defined at the bottom layer so that domain validation can raise the same typed
errors the ports document; `agent_memory.ports.errors` re-exports them.
"""

from __future__ import annotations

from typing import Any

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
    "PermissionDenied",
    "ScopeRequired",
    "SearchModuleMissing",
    "StorageCorrupted",
    "StoreClosed",
    "UnsupportedBackend",
]


class AgentMemoryError(Exception):
    """Root of every error this library raises on purpose."""


class InvalidInput(AgentMemoryError, ValueError):
    """A value given to the library is malformed; `field` names which one."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class ScopeRequired(InvalidInput):
    """An owner/domain/scope argument was empty or whitespace-only."""

    def __init__(self, field: str = "scope", value: object = "") -> None:
        super().__init__(field, f"a non-empty scope is required, got {value!r}")
        self.value = value


class NotFound(AgentMemoryError, KeyError):
    """The addressed record does not exist (in that scope); `field` names the
    argument that addressed it (e.g. `fact_id`), when an entry point knows it."""

    def __init__(self, scope: str, id: str, field: str | None = None) -> None:
        super().__init__(f"no record {id!r} in scope {scope!r}")
        self.scope = scope
        self.id = id
        self.field = field

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class DuplicateRecord(AgentMemoryError, ValueError):
    """A record with this id already exists in this scope (add never overwrites)."""

    def __init__(self, scope: str, ids: tuple[str, ...]) -> None:
        super().__init__(f"records already exist in scope {scope!r}: {list(ids)!r}")
        self.scope = scope
        self.ids = ids


class DimensionMismatch(AgentMemoryError, ValueError):
    """A vector (or an existing collection) has another dimension than the store's space."""

    def __init__(self, expected: int, got: int, where: str = "vector") -> None:
        super().__init__(f"{where}: expected dimension {expected}, got {got}")
        self.expected = expected
        self.got = got
        self.where = where


class StoreClosed(AgentMemoryError, RuntimeError):
    """The store was closed; no operation is accepted any more."""

    def __init__(self, what: str = "store") -> None:
        super().__init__(f"{what} is closed")
        self.what = what


class BackendUnavailable(AgentMemoryError, ConnectionError):
    """The backend could not be reached or failed mid-operation."""

    def __init__(self, backend: str, detail: str) -> None:
        super().__init__(f"{backend} unavailable: {detail}")
        self.backend = backend
        self.detail = detail


class StorageCorrupted(AgentMemoryError, RuntimeError):
    """The backend's own storage is damaged (e.g. a SQLite file that fails its
    integrity checks). Not a transient outage: retrying cannot help, so this is
    deliberately not a `BackendUnavailable`. `path` names the damaged storage and
    `remedy` says what to do."""

    def __init__(self, backend: str, path: str, detail: str, remedy: str) -> None:
        super().__init__(f"{backend} storage {path!r} is corrupt: {detail}. {remedy}")
        self.backend = backend
        self.path = path
        self.detail = detail
        self.remedy = remedy


class SearchModuleMissing(BackendUnavailable):
    """Vector operations need a search module the server does not have."""


class LeaseNotHeld(AgentMemoryError, PermissionError):
    """Renew or another owner-checked lease operation by someone who does not hold it."""

    def __init__(self, key: str, owner: str, holder: str | None) -> None:
        held = f"held by {holder!r}" if holder is not None else "not held"
        super().__init__(f"lease {key!r} is {held}, not by {owner!r}")
        self.key = key
        self.owner = owner
        self.holder = holder


class PermissionDenied(AgentMemoryError, PermissionError):
    """The caller's credentials do not allow this call: a read-only API key
    asking to write, or a key bound to one user naming another. `field` names
    the refused argument (e.g. `user_id`), or is None when the call itself is."""

    def __init__(self, problem: str, field: str | None = None) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


class ConfigurationError(AgentMemoryError, ValueError):
    """Configuration (URL, environment variable, option) is invalid."""


class UnsupportedBackend(ConfigurationError):
    """A URL names a backend that is unknown or whose extra is not installed."""


class ModelError(AgentMemoryError, RuntimeError):
    """A model provider failed (HTTP error, malformed answer, ...)."""


class ModelTimeout(ModelError, TimeoutError):
    """A model call exceeded its timeout."""


class AuditNotRecorded(AgentMemoryError, RuntimeError):
    """An audited operation happened but its audit entry could not be written.

    `entry` is the `AuditEntry` to append again (`AuditLog.append` is idempotent
    by id); `result` is what the operation returned (its receipt or summary)."""

    def __init__(self, entry: Any, result: Any, cause: BaseException) -> None:
        super().__init__(
            f"{entry.operation} completed but its audit entry {entry.id} was not recorded: "
            f"{type(cause).__name__}: {cause}; append exc.entry again once the backend is back"
        )
        self.entry = entry
        self.result = result

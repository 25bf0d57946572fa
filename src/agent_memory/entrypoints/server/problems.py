"""Errors as RFC 9457 problem documents (`application/problem+json`).

Every error response has a stable `type` per error class (a tag URI: it names
the class and is not meant to be fetched), a `title` fixed per type, the HTTP
`status`, a `detail` that never quotes stored content or a traceback, and the
`request_id` of the access log line. Validation problems add `errors` (where
and what, never the offending input).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
    StorageCorrupted,
    StoreClosed,
)

__all__ = ["PROBLEM_TYPES", "Problem", "from_library_error", "problem_type"]

_BASE = "tag:agent-memory,2025:problem/"

#: slug -> (status, title). The slugs are part of the API: never reuse one.
PROBLEM_TYPES: dict[str, tuple[int, str]] = {
    "malformed-body": (400, "The request body is not valid JSON in UTF-8"),
    "unauthenticated": (401, "A valid API key is required"),
    "read-only-key": (403, "This API key may only read"),
    "permission-denied": (403, "This API key may not do this"),
    "admin-required": (403, "This API key may not read the audit trail"),
    "not-found": (404, "No such resource"),
    "method-not-allowed": (405, "Method not allowed"),
    "conflict": (409, "The request conflicts with the current state"),
    "payload-too-large": (413, "The request body is too large"),
    "unsupported-media-type": (415, "The request body must be application/json"),
    "validation-failed": (422, "The request does not match the schema"),
    "invalid-input": (422, "A value was refused by the memory library"),
    "rate-limited": (429, "Too many requests for this API key"),
    "too-many-open-requests": (429, "Too many agent requests are open for this tenant"),
    "internal-error": (500, "Internal error"),
    "audit-not-recorded": (500, "The operation completed but its audit entry was not recorded"),
    "not-supported": (501, "The configured backend does not serve this"),
    "model-failed": (502, "The language model or embedder failed"),
    "backend-unavailable": (503, "The storage backend is unavailable"),
    "shutting-down": (503, "The server is shutting down"),
    "deadline-exceeded": (
        503,
        "The request did not finish within the server's deadline; it may or may not "
        "have taken effect",
    ),
    "model-timeout": (504, "The language model or embedder timed out"),
}


def problem_type(slug: str) -> str:
    return _BASE + slug


class Problem(Exception):
    """An error response to send as a problem document."""

    def __init__(
        self,
        slug: str,
        detail: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        status, title = PROBLEM_TYPES[slug]
        super().__init__(f"{slug}: {detail or title}")
        self.slug = slug
        self.status = status
        self.title = title
        self.detail = detail or title
        self.headers = dict(headers or {})
        self.extra = extra

    def body(self, request_id: str | None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "type": problem_type(self.slug),
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if request_id is not None:
            doc["request_id"] = request_id
        doc.update(self.extra)
        return doc


def from_library_error(exc: AgentMemoryError) -> Problem:
    """The problem for an error the library raised on purpose. Details name the
    error class and the field, never stored content."""
    if isinstance(exc, InvalidInput):  # ScopeRequired too
        return Problem(
            "invalid-input", f"{exc.field}: {_short(exc.problem)}", field=_short(exc.field)
        )
    if isinstance(exc, PermissionDenied):  # a user-bound key naming another user
        if exc.field is None:
            return Problem("permission-denied", str(exc))
        return Problem("permission-denied", str(exc), field=exc.field)
    if isinstance(exc, DimensionMismatch):
        # No request carries a vector: the deployment's embedder and store disagree.
        return Problem("internal-error", "the embedder and the store disagree on the dimension")
    if isinstance(exc, NotFound):
        return Problem("not-found", "no such record")
    if isinstance(exc, DuplicateRecord | LeaseNotHeld):
        return Problem("conflict", type(exc).__name__)
    if isinstance(exc, AuditNotRecorded):
        return Problem(
            "audit-not-recorded",
            f"{exc.entry.operation} completed; audit entry {exc.entry.id} not recorded",
        )
    if isinstance(exc, StorageCorrupted):
        return Problem("internal-error", "storage is damaged; see the server log")
    if isinstance(exc, BackendUnavailable | StoreClosed):
        return Problem("backend-unavailable", type(exc).__name__, headers={"Retry-After": "1"})
    if isinstance(exc, ModelTimeout):
        return Problem("model-timeout")
    if isinstance(exc, ModelError):
        return Problem("model-failed")
    if isinstance(exc, ConfigurationError):
        return Problem("not-supported", type(exc).__name__)
    return Problem("internal-error")


def _short(text: str, limit: int = 200) -> str:
    """A library message without the quoted value (which may be user content)."""
    cut = text.split(", got ", 1)[0]
    return cut if len(cut) <= limit else cut[:limit] + "..."

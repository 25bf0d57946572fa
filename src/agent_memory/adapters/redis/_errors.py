"""Client exceptions -> the library's typed errors, in one place."""

from __future__ import annotations

from types import TracebackType
from typing import Literal

from agent_memory.domain.errors import AgentMemoryError, BackendUnavailable, SearchModuleMissing
from redis import exceptions as rexc

__all__ = ["BACKEND", "SEARCH_HINT", "is_missing_index", "is_unknown_command", "translate"]

BACKEND = "redis"
SEARCH_HINT = (
    "vector and keyword search need the Search module (FT.* commands), which this "
    "server does not have; run Redis 8+, Redis Stack, or Valkey with a search module "
    "loaded (e.g. `valkey-server --loadmodule /path/to/redisearch.so`). Events, leases "
    "and the cache work without it."
)


def is_unknown_command(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, rexc.ResponseError) and "unknown command" in text


def is_missing_index(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, rexc.ResponseError) and (
        "no such index" in text or "unknown index name" in text
    )


class _Translate:
    """`with translate(what):` re-raises any client failure as `BackendUnavailable`
    (or `SearchModuleMissing`); a plain class, cheaper to enter than a generator."""

    __slots__ = ("_what",)

    def __init__(self, what: str) -> None:
        self._what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if exc is None or isinstance(exc, AgentMemoryError):
            return False
        what = self._what
        if isinstance(exc, rexc.ResponseError):
            if is_unknown_command(exc) and "ft." in str(exc).lower():
                raise SearchModuleMissing(BACKEND, f"{what}: {SEARCH_HINT} ({exc})") from exc
            raise BackendUnavailable(BACKEND, f"{what}: {exc}") from exc
        if isinstance(exc, rexc.RedisError | OSError):
            raise BackendUnavailable(BACKEND, f"{what}: {type(exc).__name__}: {exc}") from exc
        return False


def translate(what: str) -> _Translate:
    """Re-raise any client failure as `BackendUnavailable` (or `SearchModuleMissing`)."""
    return _Translate(what)

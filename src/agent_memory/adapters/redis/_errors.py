"""Client exceptions -> the library's typed errors, in one place."""

from __future__ import annotations

from types import TracebackType
from typing import Literal

from redis.crc import key_slot

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
    (or `SearchModuleMissing`); a plain class, cheaper to enter than a generator.
    `key`: a key of the operation's cluster hash slot, named when a migration of
    that slot refused it."""

    __slots__ = ("_key", "_what")

    def __init__(self, what: str, key: str | None = None) -> None:
        self._what = what
        self._key = key

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
        if isinstance(exc, rexc.TryAgainError) or (
            isinstance(exc, rexc.ClusterError) and "TTL exhausted" in str(exc)
        ):
            slot = "" if self._key is None else f" {key_slot(self._key.encode())}"
            raise BackendUnavailable(
                BACKEND,
                f"{what}: hash slot{slot} is being migrated between cluster primaries "
                "(a resharding): the keys this operation changes together are split "
                "between the two (the cluster answers TRYAGAIN, or redirects until the "
                f"client gives up: {exc}); retry when the migration ends",
            ) from exc
        if isinstance(exc, rexc.ResponseError):
            if is_unknown_command(exc) and "ft." in str(exc).lower():
                raise SearchModuleMissing(BACKEND, f"{what}: {SEARCH_HINT} ({exc})") from exc
            raise BackendUnavailable(BACKEND, f"{what}: {exc}") from exc
        if isinstance(exc, rexc.RedisError | OSError):
            raise BackendUnavailable(BACKEND, f"{what}: {type(exc).__name__}: {exc}") from exc
        if isinstance(exc, AttributeError | TypeError) and _torn_transport(tb):
            raise BackendUnavailable(
                BACKEND, f"{what}: the connection was closed under a write ({exc})"
            ) from exc
        return False


# Where a write lands on a transport that a concurrent disconnect (or the peer's
# reset) already tore down: redis-py lets a bare AttributeError / TypeError out of
# these modules instead of a ConnectionError (redis/redis-py#4287).
_TRANSPORT_MODULES = frozenset(
    {"redis.asyncio.connection", "asyncio.streams", "asyncio.selector_events", "asyncio.sslproto"}
)


def _torn_transport(tb: TracebackType | None) -> bool:
    """Whether the innermost frame that raised is the client's socket write path
    (not the adapter's own code, whose bugs must surface as themselves)."""
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_globals.get("__name__") in _TRANSPORT_MODULES


def translate(what: str, key: str | None = None) -> _Translate:
    """Re-raise any client failure as `BackendUnavailable` (or `SearchModuleMissing`)."""
    return _Translate(what, key)

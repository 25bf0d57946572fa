"""Client exceptions -> the library's typed errors, in one place."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def translate(what: str) -> Iterator[None]:
    """Re-raise any client failure as `BackendUnavailable` (or `SearchModuleMissing`)."""
    try:
        yield
    except AgentMemoryError:
        raise
    except rexc.ResponseError as exc:
        if is_unknown_command(exc) and "ft." in str(exc).lower():
            raise SearchModuleMissing(BACKEND, f"{what}: {SEARCH_HINT} ({exc})") from exc
        raise BackendUnavailable(BACKEND, f"{what}: {exc}") from exc
    except (rexc.RedisError, OSError) as exc:
        raise BackendUnavailable(BACKEND, f"{what}: {type(exc).__name__}: {exc}") from exc

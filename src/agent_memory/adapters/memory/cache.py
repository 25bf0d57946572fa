"""In-process `Cache` with TTLs checked on read."""

from __future__ import annotations

from datetime import datetime, timedelta

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.adapters._common.validation import (
    check_cache_ttl,
    check_cache_value,
    check_prefix,
)
from agent_memory.domain.validation import require_id, require_scope
from agent_memory.ports.models import Clock
from agent_memory.ports.storage import CacheEntry

__all__ = ["InMemoryCache", "MemoryCacheBackend"]


class MemoryCacheBackend:
    """Shared state: value and optional expiry per (scope, key)."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], tuple[bytes, datetime | None]] = {}


class InMemoryCache:
    """`Cache` in process."""

    def __init__(
        self, *, clock: Clock | None = None, backend: MemoryCacheBackend | None = None
    ) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._backend = backend if backend is not None else MemoryCacheBackend()
        self._life = Lifecycle("memory cache")

    @property
    def backend(self) -> MemoryCacheBackend:
        return self._backend

    def _live(self, scope: str, key: str) -> bytes | None:
        entry = self._backend.entries.get((scope, key))
        if entry is None:
            return None
        value, expires = entry
        if expires is not None and expires <= self._clock.now():
            del self._backend.entries[(scope, key)]
            return None
        return value

    async def get(self, scope: str, key: str) -> bytes | None:
        self._life.check()
        require_scope(scope, "scope")
        require_id(key, "key")
        return self._live(scope, key)

    async def put(self, scope: str, key: str, value: bytes, ttl: timedelta | None = None) -> None:
        self._life.check()
        require_scope(scope, "scope")
        require_id(key, "key")
        data = check_cache_value(value)
        check_cache_ttl(ttl)
        expires = None if ttl is None else self._clock.now() + ttl
        self._backend.entries[(scope, key)] = (data, expires)

    async def delete(self, scope: str, key: str) -> bool:
        self._life.check()
        require_scope(scope, "scope")
        require_id(key, "key")
        present = self._live(scope, key) is not None
        self._backend.entries.pop((scope, key), None)
        return present

    async def delete_prefix(self, scope: str, prefix: str) -> int:
        self._life.check()
        require_scope(scope, "scope")
        prefix = check_prefix(prefix)
        doomed = [k for k in self._backend.entries if k[0] == scope and k[1].startswith(prefix)]
        live = sum(1 for k in doomed if self._live(*k) is not None)
        for k in doomed:
            self._backend.entries.pop(k, None)
        return live

    async def entries(self, scope: str, prefix: str = "") -> list[CacheEntry]:
        """Live entries of the scope whose key starts with `prefix`, by key (`CacheListing`)."""
        self._life.check()
        require_scope(scope, "scope")
        prefix = check_prefix(prefix)
        keys = sorted(k for s, k in self._backend.entries if s == scope and k.startswith(prefix))
        out: list[CacheEntry] = []
        for key in keys:
            value = self._live(scope, key)
            if value is not None:
                expires = self._backend.entries[(scope, key)][1]
                out.append(CacheEntry(key=key, value=value, expires_at=expires))
        return out

    async def ping(self) -> None:
        self._life.check()

    async def close(self) -> None:
        await self._life.begin_close()

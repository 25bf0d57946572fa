"""In-process `LeaseStore` with per-key fencing counters."""

from __future__ import annotations

from datetime import timedelta

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.adapters._common.validation import (
    check_lease_args,
    check_lease_payload,
    check_prefix,
)
from agent_memory.domain.errors import LeaseNotHeld
from agent_memory.domain.records import Lease
from agent_memory.domain.validation import require_id, require_scope
from agent_memory.ports.models import Clock

__all__ = ["InMemoryLeaseStore", "MemoryLeaseBackend"]


class MemoryLeaseBackend:
    """Shared state: current leases and the fencing counter of every key ever leased."""

    def __init__(self) -> None:
        self.leases: dict[tuple[str, str], Lease] = {}
        self.counters: dict[tuple[str, str], int] = {}


class InMemoryLeaseStore:
    """`LeaseStore` in process; each operation is atomic under asyncio."""

    def __init__(
        self, *, clock: Clock | None = None, backend: MemoryLeaseBackend | None = None
    ) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._backend = backend if backend is not None else MemoryLeaseBackend()
        self._life = Lifecycle("memory lease store")

    @property
    def backend(self) -> MemoryLeaseBackend:
        return self._backend

    def _live(self, scope: str, key: str) -> Lease | None:
        lease = self._backend.leases.get((scope, key))
        if lease is not None and lease.expires_at <= self._clock.now():
            del self._backend.leases[(scope, key)]
            return None
        return lease

    async def acquire(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes = b""
    ) -> Lease | None:
        self._life.check()
        check_lease_args(scope, key, owner, ttl)
        payload = check_lease_payload(payload)
        current = self._live(scope, key)
        if current is not None and current.owner != owner:
            return None
        if current is not None:
            token = current.token
        else:
            token = self._backend.counters.get((scope, key), 0) + 1
            self._backend.counters[(scope, key)] = token
        lease = Lease(
            scope=scope,
            key=key,
            owner=owner,
            token=token,
            expires_at=self._clock.now() + ttl,
            payload=payload,
        )
        self._backend.leases[(scope, key)] = lease
        return lease

    async def renew(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes | None = None
    ) -> Lease:
        self._life.check()
        check_lease_args(scope, key, owner, ttl)
        if payload is not None:
            payload = check_lease_payload(payload)
        current = self._live(scope, key)
        if current is None or current.owner != owner:
            raise LeaseNotHeld(key, owner, None if current is None else current.owner)
        lease = Lease(
            scope=scope,
            key=key,
            owner=owner,
            token=current.token,
            expires_at=self._clock.now() + ttl,
            payload=current.payload if payload is None else payload,
        )
        self._backend.leases[(scope, key)] = lease
        return lease

    async def release(self, scope: str, key: str, owner: str) -> bool:
        self._life.check()
        require_scope(scope, "scope")
        require_id(key, "key")
        require_id(owner, "owner")
        current = self._live(scope, key)
        if current is None or current.owner != owner:
            return False
        del self._backend.leases[(scope, key)]
        return True

    async def get(self, scope: str, key: str) -> Lease | None:
        self._life.check()
        require_scope(scope, "scope")
        require_id(key, "key")
        return self._live(scope, key)

    async def scan(self, scope: str, prefix: str = "") -> list[Lease]:
        self._life.check()
        require_scope(scope, "scope")
        prefix = check_prefix(prefix)
        keys = sorted(k for (s, k) in self._backend.leases if s == scope and k.startswith(prefix))
        out = [self._live(scope, k) for k in keys]
        return [lease for lease in out if lease is not None]

    async def ping(self) -> None:
        self._life.check()

    async def close(self) -> None:
        await self._life.begin_close()

"""`AuditLog` in process: entries by id, listed in the domain's order."""

from __future__ import annotations

from datetime import datetime

from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.domain.audit import (
    AuditEntry,
    AuditPage,
    audit_sort_key,
    check_audit_entry,
    check_audit_list_args,
    encode_audit_cursor,
)
from agent_memory.domain.time import to_micros

__all__ = ["InMemoryAuditLog", "MemoryAuditBackend"]


class MemoryAuditBackend:
    """Shared state: every entry by id (kept apart from every other port's data)."""

    def __init__(self) -> None:
        self.entries: dict[str, AuditEntry] = {}


class InMemoryAuditLog:
    """`AuditLog` in process."""

    def __init__(self, *, backend: MemoryAuditBackend | None = None) -> None:
        self._backend = backend if backend is not None else MemoryAuditBackend()
        self._life = Lifecycle("memory audit log")

    @property
    def backend(self) -> MemoryAuditBackend:
        return self._backend

    async def append(self, entry: AuditEntry) -> bool:
        self._life.check()
        entry = check_audit_entry(entry)
        if entry.id in self._backend.entries:
            return False
        self._backend.entries[entry.id] = entry
        return True

    async def list(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        self._life.check()
        tenant, since, limit, after = check_audit_list_args(tenant, since, limit, cursor)
        bound = None if after is None else (to_micros(after[0]), after[1])
        floor = None if since is None else to_micros(since)
        chosen = [
            e
            for e in self._backend.entries.values()
            if (tenant is None or e.tenant == tenant)
            and (floor is None or to_micros(e.at) >= floor)
            and (bound is None or audit_sort_key(e) < bound)
        ]
        chosen.sort(key=audit_sort_key, reverse=True)
        page = tuple(chosen[:limit])
        more = len(chosen) > limit
        return AuditPage(page, encode_audit_cursor(page[-1]) if more else None)

    async def ping(self) -> None:
        self._life.check()

    async def close(self) -> None:
        await self._life.begin_close()

"""AuditLog adapters with exactly one bug each, to prove every AL-* clause can
fail (`test_broken_audit_logs.py`). Each is the in-process adapter with one
method changed; `events_for(backend)` gives the neighbouring EventLog the
contract erases users through (a plain one unless the bug lives there)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agent_memory.adapters.memory import InMemoryAuditLog, InMemoryEventLog, MemoryAuditBackend
from agent_memory.domain.audit import (
    AuditEntry,
    AuditPage,
    audit_sort_key,
    check_audit_list_args,
    encode_audit_cursor,
)
from agent_memory.domain.records import Event

__all__ = [
    "CaseFoldTenantAuditLog",
    "ContextKeepingAuditLog",
    "ErasedWithSubjectAuditLog",
    "ExclusiveSinceAuditLog",
    "GlobalAuditLog",
    "HandleLocalAuditLog",
    "InclusiveCursorAuditLog",
    "NeverClosedAuditLog",
    "OffsetCursorAuditLog",
    "OverwritingAuditLog",
    "SecondsAuditLog",
    "TiesAscendingAuditLog",
    "TrimmedTenantAuditLog",
    "UncheckedLimitAuditLog",
    "WholeSecondSinceAuditLog",
]


class _Base(InMemoryAuditLog):
    @classmethod
    def events_for(cls, backend: MemoryAuditBackend) -> InMemoryEventLog:
        return InMemoryEventLog()


class SecondsAuditLog(_Base):
    """AL-WRITE-1: the codec keeps whole seconds only."""

    async def append(self, entry: AuditEntry) -> bool:
        import attrs

        return await super().append(attrs.evolve(entry, at=entry.at.replace(microsecond=0)))


class OverwritingAuditLog(_Base):
    """AL-WRITE-2: a second append of an id replaces the first."""

    async def append(self, entry: AuditEntry) -> bool:
        self.backend.entries[entry.id] = entry
        return True


class TiesAscendingAuditLog(_Base):
    """AL-ORDER-1: entries of one instant by id ascending."""

    async def list(self, **kwargs: object) -> AuditPage:
        page = await super().list(limit=10_000)  # type: ignore[arg-type]
        ordered = sorted(page.entries, key=lambda e: (-e.at.timestamp(), e.id))
        limit = int(kwargs.get("limit", 50))  # type: ignore[call-overload]
        return AuditPage(tuple(ordered[:limit]), None)


class _Paged(_Base):
    def _sorted(self, tenant: str | None, since: datetime | None) -> list[AuditEntry]:
        chosen = [
            e
            for e in self.backend.entries.values()
            if (tenant is None or e.tenant == tenant) and (since is None or e.at >= since)
        ]
        return sorted(chosen, key=audit_sort_key, reverse=True)


class InclusiveCursorAuditLog(_Paged):
    """AL-PAGE-1: the next page starts AT the cursor's entry (repeating it)."""

    async def list(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        tenant, since, limit, after = check_audit_list_args(tenant, since, limit, cursor)
        rows = self._sorted(tenant, since)
        if after is not None:
            key = (after[0], after[1])
            rows = [e for e in rows if (e.at, e.id) <= key]
        page = tuple(rows[:limit])
        return AuditPage(page, encode_audit_cursor(page[-1]) if len(rows) > limit else None)


class OffsetCursorAuditLog(_Paged):
    """AL-PAGE-2: the cursor is an offset into the current listing."""

    async def list(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        tenant, since, limit, _ = check_audit_list_args(tenant, since, limit, None)
        start = 0 if cursor is None else int(cursor.removeprefix("offset-"))
        rows = self._sorted(tenant, since)
        page = tuple(rows[start : start + limit])
        more = len(rows) > start + limit
        return AuditPage(page, f"offset-{start + limit}" if more else None)


class ExclusiveSinceAuditLog(_Paged):
    """AL-FILTER-1: `since` keeps entries strictly after it."""

    async def list(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        page = await super().list(tenant=tenant, since=since, limit=limit, cursor=cursor)
        if since is None:
            return page
        return AuditPage(tuple(e for e in page.entries if e.at > since), page.next_cursor)


class _ErasingEventLog(InMemoryEventLog):
    def __init__(self, audit: MemoryAuditBackend) -> None:
        super().__init__()
        self._audit = audit

    async def erase_user(self, user_id: str) -> int:
        for key in [k for k, e in self._audit.entries.items() if e.subject == user_id]:
            del self._audit.entries[key]
        return await super().erase_user(user_id)


class ErasedWithSubjectAuditLog(_Base):
    """AL-KEEP-1: erasing a user deletes everything keyed by the user, entries too."""

    @classmethod
    def events_for(cls, backend: MemoryAuditBackend) -> InMemoryEventLog:
        return _ErasingEventLog(backend)


_ACTIVITY: dict[int, dict[str, str]] = {}


class _RememberingEventLog(InMemoryEventLog):
    def __init__(self, audit: MemoryAuditBackend) -> None:
        super().__init__()
        self._seen = _ACTIVITY.setdefault(id(audit), {})

    async def append(self, events: Sequence[Event]) -> int:
        for event in events:
            if event.user_id is not None:
                self._seen[event.user_id] = event.summary
        return await super().append(events)


class ContextKeepingAuditLog(_Base):
    """AL-CONTENT-1: entries are "enriched" with the subject's last activity."""

    @classmethod
    def events_for(cls, backend: MemoryAuditBackend) -> InMemoryEventLog:
        return _RememberingEventLog(backend)

    async def list(self, **kwargs: object) -> AuditPage:
        import attrs

        page = await super().list(**kwargs)  # type: ignore[arg-type]
        seen = _ACTIVITY.get(id(self.backend), {})
        return AuditPage(
            tuple(
                attrs.evolve(e, subject=f"{e.subject} ({seen[e.subject]})")
                if e.subject in seen
                else e
                for e in page.entries
            ),
            page.next_cursor,
        )


class UncheckedLimitAuditLog(_Base):
    """AL-INPUT-1: the limit is not checked (a slice takes anything)."""

    async def list(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        page = await super().list(tenant=tenant, since=since, limit=MAX, cursor=cursor)
        return AuditPage(page.entries[: int(limit)], None)


MAX = 10_000


class NeverClosedAuditLog(_Base):
    """AL-CLOSE-1: close does nothing."""

    async def close(self) -> None:
        return None


class HandleLocalAuditLog(_Base):
    """AL-SHARED-1: each handle keeps its own entries."""

    def __init__(self, *, backend: MemoryAuditBackend | None = None) -> None:
        super().__init__(backend=MemoryAuditBackend())


_GLOBAL = MemoryAuditBackend()


class GlobalAuditLog(_Base):
    """AL-CANARY-1: one module-level backend for every handle."""

    def __init__(self, *, backend: MemoryAuditBackend | None = None) -> None:
        super().__init__(backend=_GLOBAL)


class WholeSecondSinceAuditLog(_Base):
    """AL-FILTER-1: `since` is floored to the whole second (a column or index
    keyed by epoch seconds), so entries up to a second before it are listed."""

    async def list(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        if isinstance(since, datetime) and since.tzinfo is not None:
            since = since.replace(microsecond=0)
        return await super().list(tenant=tenant, since=since, limit=limit, cursor=cursor)


class _NormalisedTenantAuditLog(_Paged):
    """Tenants compared after `norm` (the bug of the subclasses)."""

    @staticmethod
    def norm(tenant: str) -> str:
        raise NotImplementedError

    async def list(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        tenant, since, limit, after = check_audit_list_args(tenant, since, limit, cursor)
        rows = [
            e
            for e in self._sorted(None, since)
            if tenant is None or self.norm(e.tenant) == self.norm(tenant)
        ]
        if after is not None:
            rows = [e for e in rows if (e.at, e.id) < (after[0], after[1])]
        page = tuple(rows[:limit])
        return AuditPage(page, encode_audit_cursor(page[-1]) if len(rows) > limit else None)


class CaseFoldTenantAuditLog(_NormalisedTenantAuditLog):
    """AL-FILTER-1: tenants compared case-insensitively (`Acme` lists `acme`'s)."""

    @staticmethod
    def norm(tenant: str) -> str:
        return tenant.casefold()


class TrimmedTenantAuditLog(_NormalisedTenantAuditLog):
    """AL-FILTER-1: tenants compared trimmed (`acme ` lists `acme`'s)."""

    @staticmethod
    def norm(tenant: str) -> str:
        return tenant.strip()

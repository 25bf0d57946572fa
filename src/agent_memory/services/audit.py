"""The audit trail service: who asked for which destructive or bulk operation.

Every forget (user, namespace, fact), delete_scope, import with replace,
re-embed switch and migration writes one `AuditEntry` through the `AuditLog`
port, after the operation, with the counts of its receipt. The caller and
tenant come from a context variable that entry points set per request
(`acting_as`); outside one, the caller is "library" and the tenant "". An
entry of a tenant names its data subject as the tenant's user id (the stored
owner `t/<tenant>/u/<user>` without its prefix); an owner that is no user of
the tenant is named whole, with tenant "" (`stored_subject` reads either back).

Ordering and failure: the entry is written after the operation has done its
work, so it records what really happened (the receipt's counts). If the write
fails, the operation has still happened; the service then retries once (the
append is idempotent by entry id) and, failing again, raises
`AuditNotRecorded`, which carries the entry and the operation's result: a
compliance log that silently misses an erasure is worse than an error the
caller sees. Re-append `exc.entry` (idempotent) once the backend is back.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from agent_memory.domain.audit import LIBRARY_CALLER, AuditEntry, AuditPage
from agent_memory.domain.errors import AuditNotRecorded
from agent_memory.domain.validation import require_id
from agent_memory.ports.models import Clock
from agent_memory.ports.storage import AuditLog

__all__ = [
    "AuditNotRecorded",
    "AuditTrail",
    "acting_as",
    "current_caller",
    "current_tenant",
    "read_entries",
    "stored_subject",
]

_log = logging.getLogger(__name__)

_ACTOR: ContextVar[tuple[str, str]] = ContextVar("agent_memory_audit_actor")


@contextmanager
def acting_as(caller: str, tenant: str = "") -> Iterator[None]:
    """Within the block, audit entries name `caller` (an API key id) and
    `tenant` (its tenant name, "" for none) — an entry whose subject is no
    user `t/<tenant>/u/...` of the tenant names no tenant. Nests; restored on
    exit."""
    require_id(caller, "caller")
    if tenant != "":
        require_id(tenant, "tenant")
    token = _ACTOR.set((caller, tenant))
    try:
        yield
    finally:
        _ACTOR.reset(token)


def current_caller() -> str:
    """The caller audit entries name now ("library" outside `acting_as`)."""
    return _ACTOR.get((LIBRARY_CALLER, ""))[0]


def current_tenant() -> str:
    """The tenant audit entries name now ("" outside `acting_as`)."""
    return _ACTOR.get((LIBRARY_CALLER, ""))[1]


def _recorded(tenant: str, subject: str | None) -> tuple[str, str | None]:
    """The `(tenant, subject)` an entry records for an operation on the stored
    owner `subject` in `tenant`: a tenant's stored owners are
    `t/<tenant>/u/<user>` (the HTTP service's layout), the entry holds the
    tenant and `<user>`, as its caller sees it. An owner that is no user of
    the tenant (a library user's bare id, another tenant's user, one of the
    tenant's domains) has no such id: the entry holds it whole, with no tenant,
    like the library's own entries. So `stored_subject` names exactly the owner
    the operation touched, and a tenant's trail names only its own users."""
    if subject is None or not tenant:
        return tenant, subject
    prefix = f"t/{tenant}/u/"
    if subject.startswith(prefix) and subject[len(prefix) :].strip():
        return tenant, subject[len(prefix) :]
    return "", subject


def stored_subject(entry: AuditEntry) -> str | None:
    """The stored owner id an entry's subject stands for (`t/<tenant>/u/<user>`
    for a tenant's entry, the subject itself for an entry without a tenant):
    the inverse of what `AuditTrail.entry` records."""
    if entry.subject is None or not entry.tenant:
        return entry.subject
    return f"t/{entry.tenant}/u/{entry.subject}"


class AuditTrail:
    """Writes and reads audit entries; a no-op writer when `log` is None (a
    deployment whose backend serves no audit log)."""

    def __init__(self, log: AuditLog | None, clock: Clock) -> None:
        self.log = log
        self.clock = clock

    def entry(
        self, operation: str, *, subject: str | None, counts: Mapping[str, int]
    ) -> AuditEntry:
        """The entry for an operation just done, in the current caller's name."""
        tenant, shown = _recorded(current_tenant(), subject)
        return AuditEntry(
            id=uuid.uuid4().hex,
            at=self.clock.now(),
            operation=operation,
            tenant=tenant,
            subject=shown,
            counts=counts,
            caller=current_caller(),
        )

    async def record(
        self,
        operation: str,
        *,
        subject: str | None,
        counts: Mapping[str, int],
        result: Any = None,
    ) -> AuditEntry | None:
        """Append the entry of an operation that has happened; `AuditNotRecorded`
        (carrying `result`) when it cannot be written after one retry."""
        entry = self.entry(operation, subject=subject, counts=counts)
        if self.log is None:
            _log.debug("no audit log: %s by %s not recorded", operation, entry.caller)
            return None
        try:
            await self.log.append(entry)
        except Exception:
            try:
                await self.log.append(entry)  # idempotent by id
            except Exception as exc:
                _log.error(
                    "audit entry %s (%s) not recorded: %s: %s",
                    entry.id,
                    operation,
                    type(exc).__name__,
                    exc,
                )
                raise AuditNotRecorded(entry, result, exc) from exc
        return entry

    async def page(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        """One page of entries, newest first (`AuditLog.list`)."""
        if self.log is None:
            return AuditPage((), None)
        return await self.log.list(tenant=tenant, since=since, limit=limit, cursor=cursor)

    async def entries(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[AuditEntry]:
        """Every entry (or the newest `limit`), newest first, page by page."""
        async for item in read_entries(self.log, tenant=tenant, since=since, limit=limit):
            yield item


async def read_entries(
    log: AuditLog | None,
    *,
    tenant: str | None = None,
    since: datetime | None = None,
    limit: int | None = None,
) -> AsyncIterator[AuditEntry]:
    """Every entry of `log` (or the newest `limit`), newest first, page by page
    (`AuditLog.list`'s keyset cursor); none without a log."""
    if log is None:
        return
    left = limit
    cursor: str | None = None
    while left is None or left > 0:
        size = 500 if left is None else min(500, left)
        page = await log.list(tenant=tenant, since=since, limit=size, cursor=cursor)
        for item in page.entries:
            yield item
        if left is not None:
            left -= len(page.entries)
        if page.next_cursor is None:
            return
        cursor = page.next_cursor

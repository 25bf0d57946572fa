"""An `EventLog` whose windows show only the global events of the window
domain's family (`domain.event_scopes`): what the agent services read, so a
tenant's planning views, digests and reflections never quote another tenant's
(or a library user's) global events, and a flood of them cannot crowd the
tenant's own events off a page."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from agent_memory.domain.event_scopes import shows_event
from agent_memory.domain.records import Entity, Event, EventWindow
from agent_memory.domain.validation import MAX_LIMIT
from agent_memory.ports.storage import EventLog

__all__ = ["ScopedEvents", "scoped_events"]


def scoped_events(events: EventLog) -> EventLog:
    """`events` with family-scoped windows (itself when it already is)."""
    return events if isinstance(events, ScopedEvents) else ScopedEvents(events)


class ScopedEvents:
    """Delegates to an `EventLog`; `window` leaves out the global events of
    other families and reads further back in their place, so a page of
    `limit` holds the newest `limit` events the domain may see and `limited`
    says whether more of those matched."""

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner

    @property
    def retention(self) -> timedelta:
        return self.inner.retention

    async def append(self, events: Sequence[Event]) -> int:
        return await self.inner.append(events)

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        # one more than asked: whether the page was cut is then known from the
        # events the domain may see, not from other families' global events
        fetch = min(limit + 1, MAX_LIMIT)
        while True:
            found = await self._read(domain, since, fetch, entity, until)
            kept = [e for e in found.events if shows_event(domain, e)]
            if len(kept) > limit or not found.limited or fetch >= MAX_LIMIT:
                return EventWindow(tuple(kept[:limit]), len(kept) > limit or found.limited)
            # read as many more as were left out, at least twice as many: a page
            # holds the newest events, so the longer one starts with this one
            fetch = min(MAX_LIMIT, max(2 * fetch, limit + 1 + len(found.events) - len(kept)))

    async def _read(
        self,
        domain: str,
        since: datetime,
        limit: int,
        entity: Entity | None,
        until: datetime | None,
    ) -> EventWindow:
        if until is None:  # a third-party log may predate `until`
            return await self.inner.window(domain, since=since, limit=limit, entity=entity)
        return await self.inner.window(domain, since=since, limit=limit, entity=entity, until=until)

    async def erase_user(self, user_id: str) -> int:
        return await self.inner.erase_user(user_id)

    async def user_events(self, user_id: str) -> list[Event]:
        return await self.inner.user_events(user_id)

    async def domains(self) -> list[str]:
        return await self.inner.domains()

    async def purge_expired(self) -> int:
        return await self.inner.purge_expired()

    async def ping(self) -> None:
        await self.inner.ping()

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # what a backend offers beyond the port (read by feature checks)
        return getattr(self.inner, name)

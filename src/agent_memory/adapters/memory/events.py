"""In-process `EventLog`: events per domain, ordered by event time on read.

Retention counts from ingestion: an event expires at `recorded_at + retention`
(whatever its event time); expired events are never returned and are purged.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.adapters._common.validation import (
    check_events,
    check_retention,
    check_window_args,
)
from agent_memory.domain.records import Entity, Event, EventWindow
from agent_memory.domain.validation import require_id, require_utc
from agent_memory.ports.models import Clock

__all__ = ["DEFAULT_RETENTION", "InMemoryEventLog", "MemoryEventBackend"]

DEFAULT_RETENTION = timedelta(days=60)


class MemoryEventBackend:
    """Shared state: events keyed by (domain, id)."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], Event] = {}


class InMemoryEventLog:
    """`EventLog` in process."""

    def __init__(
        self,
        *,
        retention: timedelta = DEFAULT_RETENTION,
        clock: Clock | None = None,
        backend: MemoryEventBackend | None = None,
    ) -> None:
        self._retention = check_retention(retention)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._backend = backend if backend is not None else MemoryEventBackend()
        self._life = Lifecycle("memory event log")

    @property
    def retention(self) -> timedelta:
        return self._retention

    @property
    def backend(self) -> MemoryEventBackend:
        return self._backend

    def _cutoff(self) -> datetime:
        """Events recorded before this instant are past retention."""
        return self._clock.now() - self._retention

    async def append(self, events: Sequence[Event]) -> int:
        self._life.check()
        batch = check_events(events)
        stored = 0
        for e in batch:
            key = (e.domain, e.id)
            if key not in self._backend.events:
                self._backend.events[key] = e
                stored += 1
        return stored

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        self._life.check()
        since = check_window_args(domain, since, limit, entity)
        until = None if until is None else require_utc(until, "until")
        cutoff = self._cutoff()
        rows = [
            e
            for e in self._backend.events.values()
            if (e.domain == domain or e.is_global)
            and e.occurred_at >= since
            and (until is None or e.occurred_at < until)
            and e.recorded_at >= cutoff
            and (entity is None or entity in e.entities)
        ]
        rows.sort(key=lambda e: (e.occurred_at, e.id), reverse=True)
        return EventWindow(events=tuple(rows[:limit]), limited=len(rows) > limit)

    async def erase_user(self, user_id: str) -> int:
        self._life.check()
        require_id(user_id, "user_id")
        doomed = [k for k, e in self._backend.events.items() if e.user_id == user_id]
        for k in doomed:
            del self._backend.events[k]
        return len(doomed)

    async def user_events(self, user_id: str) -> list[Event]:
        self._life.check()
        require_id(user_id, "user_id")
        rows = [e for e in self._backend.events.values() if e.user_id == user_id]
        rows.sort(key=lambda e: (e.occurred_at, e.domain, e.id), reverse=True)
        return rows

    async def domains(self) -> list[str]:
        self._life.check()
        return sorted({domain for domain, _ in self._backend.events})

    async def purge_expired(self) -> int:
        self._life.check()
        cutoff = self._cutoff()
        doomed = [k for k, e in self._backend.events.items() if e.recorded_at < cutoff]
        for k in doomed:
            del self._backend.events[k]
        return len(doomed)

    async def ping(self) -> None:
        self._life.check()

    async def close(self) -> None:
        await self._life.begin_close()

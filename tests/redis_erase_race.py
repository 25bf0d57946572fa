"""A forget racing appends on Redis, made deterministic: every round trip the
event log sends during `erase_user` can be followed, before the next one, by an
append from a second handle. Shared by tests/redis (one server) and
tests/redis_cluster (a cluster)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agent_memory.adapters.redis import RedisEventLog
from agent_memory.domain.records import Entity, Event

__all__ = ["Interleaved", "check_erase_races", "erase_with_append_after", "race_event"]

Hook = Callable[[], Awaitable[None]]


class _Pipeline:
    """A pipeline whose `execute` runs the hook after its reply."""

    def __init__(self, pipe: Any, after: Hook) -> None:
        self._pipe, self._after = pipe, after

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)

    def __len__(self) -> int:
        return len(self._pipe)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        out = await self._pipe.execute(*args, **kwargs)
        await self._after()
        return out


class Interleaved:
    """Stands in for a log's client: after each round trip (a command or a
    pipeline) it awaits `after()`, so another client's writes land exactly
    between two of the log's steps."""

    def __init__(self, client: Any, after: Hook) -> None:
        self._client, self._after = client, after

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name == "pipeline":
            return lambda *a, **kw: _Pipeline(attr(*a, **kw), self._after)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            if not inspect.isawaitable(result):
                return result

            async def then() -> Any:
                out = await result
                await self._after()
                return out

            return then()

        return call


def race_event(id: str, user: str, domain: str = "race", **kw: Any) -> Event:
    now = datetime.now(UTC).replace(microsecond=0)
    return Event(
        id=id, domain=domain, agent="agent", action="act", outcome="ok", summary=f"s {id}",
        occurred_at=now - timedelta(minutes=1), recorded_at=now, user_id=user, **kw,
    )  # fmt: skip


async def erase_with_append_after(
    log: RedisEventLog, other: RedisEventLog, step: int, late: list[Event]
) -> int:
    """`log.erase_user("A")` with `other.append(late)` issued right after the
    log's round trip number `step` (1-based); the number of round trips erase
    made."""
    seen = 0
    real = log._r

    async def after() -> None:
        nonlocal seen
        seen += 1
        if seen == step:
            await other.append(late)

    log._r = Interleaved(real, after)  # type: ignore[assignment]
    try:
        await log.erase_user("A")
    finally:
        log._r = real
    return seen


_LATE_SHAPES = {
    "same-domain": lambda n: [race_event(f"late{n}", "A")],
    "new-domain": lambda n: [race_event(f"late{n}", "A", domain=f"fresh{n}")],
    "global": lambda n: [race_event(f"late{n}", "A", is_global=True)],
    "mixed": lambda n: [
        race_event(f"late{n}a", "A", entities=(Entity(type="t", id="x"),)),
        race_event(f"late{n}b", "A", domain=f"other{n}"),
        race_event(f"late{n}c", "B"),
    ],
}


async def _leftovers(log: RedisEventLog, user: str) -> list[tuple[str, str]]:
    """(domain, id) of every event carrying `user` that any window still shows."""
    since = datetime.now(UTC) - timedelta(days=1)
    out: set[tuple[str, str]] = set()
    for domain in await log.domains():
        window = await log.window(domain, since=since, limit=1000)
        out |= {(e.domain, e.id) for e in window.events if e.user_id == user}
        for e in window.events:
            for ent in e.entities:
                w = await log.window(domain, since=since, limit=1000, entity=ent)
                out |= {(x.domain, x.id) for x in w.events if x.user_id == user}
    return sorted(out)


async def check_erase_races(url: str, deployment: str) -> None:
    """For every round trip of `erase_user` and every shape of late batch: the
    append lands right after that step; then a quiet second forget must leave
    nothing of user A (user_events empty, no window shows an A event)."""
    n = 0
    for shape, make in _LATE_SHAPES.items():
        step = 1
        while True:
            n += 1
            dep = f"{deployment}{n}"
            log = RedisEventLog.from_url(url, deployment=dep)
            other = RedisEventLog.from_url(url, deployment=dep)
            try:
                await log.append(
                    [
                        race_event("a1", "A", entities=(Entity(type="t", id="x"),)),
                        race_event("a2", "A", domain="elsewhere"),
                        race_event("g1", "A", is_global=True),
                        race_event("b1", "B"),
                    ]
                )
                trips = await erase_with_append_after(log, other, step, make(n))
                await log.erase_user("A")
                left = [(e.domain, e.id) for e in await log.user_events("A")]
                shown = await _leftovers(log, "A")
                assert (left, shown) == ([], []), (
                    f"late {shape} batch after erase round trip {step} of {trips}: "
                    f"after a quiet second forget user_events={left}, windows show {shown}"
                )
                others = [e.id for e in await log.user_events("B")]
                assert "b1" in others, f"another user's event was erased: {others}"
            finally:
                await log.close()
                await other.close()
            if step >= trips:
                break
            step += 1

"""A purge racing another purge (or a forget) and a same-id append on Redis,
made deterministic: after any round trip `purge_expired` sends, a second handle
purges (or forgets) what the first read and appends fresh events under the same
ids. The fresh events are acknowledged writes: the first purge, finishing, must
leave each of them whole (payload, windows, entity windows, user index), and a
quiet purge after must keep them while deleting everything expired. Shared by
tests/redis (one server) and tests/redis_cluster (a cluster)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import cast

from agent_memory.adapters.redis import RedisEventLog
from agent_memory.adapters.redis.events import _recorded_key
from agent_memory.domain.records import Entity, Event
from redis_erase_race import Interleaved

__all__ = ["check_purge_races", "check_relink_forget_race"]

ENTITY = Entity(type="t", id="x")


def _event(id: str, domain: str, recorded: datetime, **kw: object) -> Event:
    return Event(
        id=id, domain=domain, agent="agent", action="act", outcome="ok",
        summary=f"s {id} {recorded}",
        occurred_at=recorded - timedelta(minutes=1), recorded_at=recorded, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def _batch(recorded: datetime) -> list[Event]:
    return [
        _event("d1", "race", recorded, user_id="A", entities=(ENTITY,)),
        _event("d2", "race", recorded),
        _event("o1", "other", recorded, user_id="B"),
        _event("g1", "race", recorded, user_id="A", is_global=True, entities=(ENTITY,)),
    ]


async def _visible(log: RedisEventLog) -> dict[str, set[str]]:
    """What each read path shows of the fresh batch."""
    since = datetime.now(UTC) - timedelta(days=1)
    out: dict[str, set[str]] = {}
    for domain in ("race", "other"):
        out[f"window {domain}"] = {
            e.id for e in (await log.window(domain, since=since, limit=100)).events
        }
        out[f"entity {domain}"] = {
            e.id for e in (await log.window(domain, since=since, limit=100, entity=ENTITY)).events
        }
    out["user A"] = {e.id for e in await log.user_events("A")}
    out["user B"] = {e.id for e in await log.user_events("B")}
    return out


WANTED = {
    "window race": {"d1", "d2", "g1"},
    "entity race": {"d1", "g1"},
    "window other": {"o1", "g1"},
    "entity other": {"g1"},
    "user A": {"d1", "g1"},
    "user B": {"o1"},
}


Hook = Callable[[RedisEventLog, int], Awaitable[None]]


@asynccontextmanager
async def _racing_purge(url: str, dep: str, hook: Hook) -> AsyncIterator[tuple[RedisEventLog, int]]:
    """An expired batch, then `purge_expired` on one handle with `hook(other,
    n)` awaited after its round trip `n` (`other`: a second handle on the same
    deployment); yields the first handle and the number of round trips."""
    log = RedisEventLog.from_url(url, deployment=dep, retention=timedelta(hours=1))
    other = RedisEventLog.from_url(url, deployment=dep, retention=timedelta(hours=1))
    seen = 0

    async def after() -> None:
        nonlocal seen
        seen += 1
        await hook(other, seen)

    try:
        await log.append(_batch(datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)))
        real = log._r
        log._r = Interleaved(real, after)  # type: ignore[assignment]
        try:
            await log.purge_expired()
        finally:
            log._r = real
        yield log, seen
    finally:
        await log.close()
        await other.close()


async def _append_fresh(other: RedisEventLog) -> None:
    """Every id is free again: the fresh batch is appended whole."""
    assert await other.append(_batch(datetime.now(UTC).replace(microsecond=0))) == 4


async def _purge_with_race_after(url: str, dep: str, how: str, step: int) -> int:
    """One run: expired events, then `purge_expired` with the race after its
    round trip `step`; checks the fresh events; the number of round trips."""

    async def hook(other: RedisEventLog, n: int) -> None:
        if n != step:
            return
        if how == "forget":
            await other.erase_user("A")
            await other.erase_user("B")
        await other.purge_expired()  # what is left of the expired batch
        await _append_fresh(other)

    async with _racing_purge(url, dep, hook) as (log, seen):
        shown = await _visible(log)
        assert shown == WANTED, (
            f"fresh events appended after purge round trip {step} of {seen} "
            f"({how} in between): {shown}"
        )
        await log.purge_expired()
        assert await _visible(log) == WANTED, f"after a quiet purge ({how}, step {step})"
    return seen


async def check_purge_races(url: str, deployment: str) -> None:
    """For every round trip of `purge_expired` and both ways of freeing the ids
    (another purge; a forget of both users, then a purge of the rest): fresh
    same-id events appended right after that step survive the first purge whole,
    and a quiet purge after keeps them."""
    n = 0
    for how in ("purge", "forget"):
        step = 1
        while True:
            n += 1
            trips = await _purge_with_race_after(url, f"{deployment}{n}", how, step)
            if step >= trips:
                break
            step += 1


async def _global_members(log: RedisEventLog) -> set[bytes]:
    """Every member of the global slots' sets (time, recorded time, the entity's)."""
    k = log._keys
    keys = [k.ev_global(), _recorded_key(k.ev_global()), k.ev_global_entity(ENTITY.type, ENTITY.id)]
    out: set[bytes] = set()
    for key in keys:
        out |= set(cast("list[bytes]", await log._r.zrange(key, 0, -1)))
    return out


async def _relink_then_forget(url: str, dep: str, s1: int, s2: int) -> tuple[int, bool]:
    """The purge's round trip `s1`: another handle purges the expired batch and
    appends the fresh one (same ids); round trip `s2` (later): it forgets user A,
    whose global event g1 the purge is relinking. The number of round trips, and
    whether the forget landed (and was checked)."""

    async def hook(other: RedisEventLog, n: int) -> None:
        if n == s1:
            await other.purge_expired()
            await _append_fresh(other)
        elif n == s2:
            await other.erase_user("A")

    async with _racing_purge(url, dep, hook) as (log, seen):
        if seen >= s2:
            left = {m.split(b"\x00")[0] for m in await _global_members(log)}
            assert b"g1" not in left, (
                f"user A forgotten at purge round trip {s2} (fresh batch at {s1}): "
                f"the forgotten global event g1 is still referenced: {sorted(left)}"
            )
            assert (await _visible(log))["user A"] == set()
    return seen, seen >= s2


async def check_relink_forget_race(url: str, deployment: str) -> None:
    """A forget landing while a purge gives a re-appended global event back its
    global references: for every pair of round trips (the fresh append at one,
    the forget at a later one), nothing of the forgotten event stays referenced."""
    most = 0
    for s1 in range(1, 40):  # the purge's round trips with a fresh batch at s1
        trips, _ = await _relink_then_forget(url, f"{deployment}c{s1}", s1, 10**6)
        most = max(most, trips)
        if s1 >= most:
            break
    n = checked = 0
    for s1 in range(1, most):
        for s2 in range(s1 + 1, most + 1):
            n += 1
            checked += (await _relink_then_forget(url, f"{deployment}r{n}", s1, s2))[1]
    # the purge has several round trips, and the forget landed in most pairs
    assert most >= 2, most
    assert checked >= most - 1, (checked, n, most)

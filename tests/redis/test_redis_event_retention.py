"""Redis event log: retention by recorded time on data the contract cannot
reach — events stored before the recorded-time sets existed, and expired
events crowding the newest end of a time-ordered set."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from attrs import evolve

from agent_memory.adapters.redis import RedisEventLog, connect
from agent_memory.adapters.redis.events import _recorded_key
from agent_memory.domain.records import Event


def _event(id: str, domain: str, occurred: datetime, recorded: datetime, **kw: object) -> Event:
    return Event(
        id=id, domain=domain, agent="agent", action="act", outcome="ok", summary=f"s {id}",
        occurred_at=occurred, recorded_at=recorded, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


async def test_events_without_recorded_score_expire_by_event_time(
    redis_url: str, deployment: str
) -> None:
    """When this fails, events written before this release (no recorded-time
    entry) are kept forever or lost: they must expire by event time."""
    log = RedisEventLog.from_url(redis_url, deployment=deployment, retention=timedelta(hours=1))
    client = connect(redis_url)
    try:
        now = datetime.now(UTC)
        await log.append(
            [
                _event("legacy-old", "D", now - timedelta(hours=2), now),
                _event("legacy-new", "D", now - timedelta(minutes=5), now),
                _event("legacy-g", "X", now - timedelta(hours=3), now, is_global=True),
            ]
        )
        keys = log._keys
        # As written by the previous release: no recorded-time sets.
        await client.delete(_recorded_key(keys.ev_domain("D")), _recorded_key(keys.ev_global()))
        await log.append([_event("backfilled", "D", now - timedelta(hours=5), now)])
        since = now - timedelta(days=1)
        got = [e.id for e in (await log.window("D", since=since, limit=10)).events]
        assert got == ["legacy-new", "backfilled"]
        assert await log.purge_expired() == 2
        got = [e.id for e in (await log.window("D", since=since, limit=10)).events]
        assert got == ["legacy-new", "backfilled"]
    finally:
        await client.aclose()
        await log.close()


async def test_expired_events_at_the_newest_end_do_not_shorten_a_page(
    redis_url: str, deployment: str
) -> None:
    """When this fails, the window cut the time-ordered range at `limit + 1`
    before skipping expired members: a page came back short or not limited."""
    log = RedisEventLog.from_url(redis_url, deployment=deployment, retention=timedelta(hours=1))
    try:
        now = datetime.now(UTC)
        stale = now - timedelta(hours=2)
        expired = [_event(f"x{i:02d}", "D", now - timedelta(seconds=i), stale) for i in range(40)]
        kept = [_event(f"k{i}", "D", now - timedelta(minutes=10 + i), now) for i in range(3)]
        globals_ = [evolve(e, id=f"g{e.id}", domain="X", is_global=True) for e in expired[:20]]
        await log.append(expired + kept + globals_)
        since = now - timedelta(days=1)
        page = await log.window("D", since=since, limit=2)
        assert ([e.id for e in page.events], page.limited) == (["k0", "k1"], True)
        page = await log.window("D", since=since, limit=3)
        assert ([e.id for e in page.events], page.limited) == (["k0", "k1", "k2"], False)
        until = now - timedelta(minutes=10)
        page = await log.window("D", since=since, limit=1, until=until)
        assert ([e.id for e in page.events], page.limited) == (["k1"], True)
        assert await log.purge_expired() == 60
    finally:
        await log.close()

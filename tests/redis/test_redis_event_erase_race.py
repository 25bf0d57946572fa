"""Redis event log: an append landing between any two round trips of
`erase_user` never leaves an event its user can no longer find or forget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent_memory.adapters.redis import RedisEventLog, connect
from agent_memory.adapters.redis.events import _gmember
from redis_erase_race import check_erase_races, race_event


async def test_append_between_any_two_erase_steps(redis_url: str, deployment: str) -> None:
    """When this fails, `erase_user` dropped an index entry it had not read
    (e.g. deleted the whole user index after reading it): the late event is
    still stored and shown with its user id, but `user_events` and every later
    forget miss it."""
    await check_erase_races(redis_url, deployment)


async def test_events_indexed_by_an_earlier_release_are_found_and_forgotten(
    redis_url: str, deployment: str
) -> None:
    """When this fails, events whose user index is the earlier releases' single
    per-user set (no per-domain user set) are missed by `user_events` or
    survive `erase_user`."""
    log = RedisEventLog.from_url(redis_url, deployment=deployment)
    client = connect(redis_url)
    try:
        await log.append([race_event("old", "A"), race_event("oldg", "A", is_global=True)])
        k = log._keys
        await client.delete(k.ev_domain_user("race", "A"))
        await client.sadd(k.ev_user("A"), _gmember("race", "old"), _gmember("race", "oldg"))
        assert sorted(e.id for e in await log.user_events("A")) == ["old", "oldg"]
        assert await log.erase_user("A") == 2
        assert await log.user_events("A") == []
        assert await client.exists(k.ev_user("A")) == 0
        since = datetime.now(UTC) - timedelta(days=1)
        assert (await log.window("race", since=since, limit=10)).events == ()
    finally:
        await client.aclose()
        await log.close()

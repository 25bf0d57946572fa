"""Focused EventLog / LeaseStore / Cache tests and raw key checks on a real server."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from attrs import evolve
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot
from redis_helpers import make_record

from agent_memory.adapters.redis import (
    KeySchema,
    RedisCache,
    RedisEventLog,
    RedisLeaseStore,
    RedisMemoryStore,
)
from agent_memory.adapters.redis._keys import lex_prefix_range
from agent_memory.domain.errors import InvalidInput, LeaseNotHeld, ScopeRequired
from agent_memory.domain.records import Entity, Event

NASTY = ["a}b", "*", "@owner:{x}", "-1", "x|y", "ünï", "a*", "a?", "a[b]", "{t}", "\\", "a b"]


def _event(id: str, domain: str, seconds_ago: float, **kw: object) -> Event:
    now = datetime.now(UTC).replace(microsecond=0)
    at = now - timedelta(seconds=seconds_ago)
    return Event(
        id=id, domain=domain, agent="agent", action="act", outcome="ok", summary=f"s {id}",
        occurred_at=at, recorded_at=now, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def _slot(key: str) -> int:
    return int(key_slot(key.encode()))


# -- key schema ---------------------------------------------------------------------


def test_multi_key_operations_share_one_slot() -> None:
    k = KeySchema("am", "prod")
    for scope in NASTY:
        assert _slot(k.ms_record("sp", scope, "1")) == _slot(k.ms_record("sp", scope, "2"))
        assert len({_slot(k.lease(scope, "x")), _slot(k.lease_counter(scope, "x")),
                    _slot(k.lease_index(scope))}) == 1  # fmt: skip
        assert _slot(k.cache_value(scope, "x")) == _slot(k.cache_index(scope))
        assert len({_slot(k.ev_payloads(scope)), _slot(k.ev_domain(scope)),
                    _slot(k.ev_domain_entity(scope, "pod", "p")),
                    _slot(k.ev_domain_user(scope, "u"))}) == 1  # fmt: skip
        assert _slot(k.ev_global()) == _slot(k.ev_global_entity("pod", "p"))


_KEY = re.compile(r"am:v1:prod:[a-z0-9_:]*\{[0-9a-f]{32}\}(:[a-z])?:[0-9a-f]{32}", re.ASCII)


@given(st.text(min_size=1), st.text(min_size=1))
def test_user_values_never_reach_key_names(scope: str, key: str) -> None:
    k = KeySchema("am", "prod")
    for name in (k.lease(scope, key), k.cache_value(scope, key), k.ms_record("sp", scope, key)):
        assert re.fullmatch(_KEY, name), name
        assert name.count("{") == 1
        assert name.count("}") == 1
    assert k.lease(scope, key) != k.lease(scope, key + "x")
    assert k.lease(scope, key) != k.lease(scope + "x", key)


@pytest.mark.parametrize("bad", ["", "a b", "a{b}", "a:b", "x*"])
def test_prefix_and_deployment_validated(bad: str) -> None:
    with pytest.raises(InvalidInput) as err:
        KeySchema(bad, "d")
    assert err.value.field == "prefix"
    with pytest.raises(InvalidInput):
        KeySchema("p", bad)


def test_lex_prefix_range() -> None:
    assert lex_prefix_range("") == (b"-", b"+")
    assert lex_prefix_range("ü") == (b"[\xc3\xbc", b"(\xc3\xbc\xff")


async def test_raw_keys_follow_the_schema(
    client: object, deployment: str, store: RedisMemoryStore, cache: RedisCache,
    leases: RedisLeaseStore, events: RedisEventLog,
) -> None:  # fmt: skip
    for s in NASTY:
        await store.add([make_record(s, owner=s)])
        await cache.put(s, s, b"v")
        await leases.acquire(s, s, "me", timedelta(seconds=30))
        await events.append([_event(s, s, 1, user_id=s, entities=(Entity("t", s),))])
    keys = [k.decode() async for k in client.scan_iter(match=f"agent_memory:v1:{deployment}:*")]  # type: ignore[attr-defined]
    assert len(keys) > 4 * len(NASTY)
    for key in keys:
        assert re.fullmatch(r"[A-Za-z0-9_.:{}-]+", key), key
        assert key.count("{") <= 1
        rest = key.split(":", 3)[3]
        assert not any(s in rest for s in NASTY if len(s) > 1 and s not in ("-1",)), key


# -- event log ------------------------------------------------------------------------


async def test_window_merges_globals_by_event_time(events: RedisEventLog) -> None:
    batch = [
        _event("a1", "A", 30),
        _event("g1", "B", 20, is_global=True),
        _event("a2", "A", 10),
        _event("b1", "B", 5),
        _event("a0", "A", 10),  # tie with a2: id desc
    ]
    assert await events.append(batch) == 5
    assert await events.append(batch) == 0
    since = datetime.now(UTC) - timedelta(hours=1)
    w = await events.window("A", since=since, limit=3)
    assert [e.id for e in w.events] == ["a2", "a0", "g1"]
    assert w.limited is True
    w = await events.window("A", since=since, limit=10)
    assert [e.id for e in w.events] == ["a2", "a0", "g1", "a1"]
    assert w.limited is False


async def test_entity_windows_erase_and_purge(redis_url: str, deployment: str) -> None:
    log = RedisEventLog.from_url(redis_url, deployment=deployment, retention=timedelta(hours=1))
    try:
        pod = Entity("pod", "web:1")
        old = datetime.now(UTC) - timedelta(hours=2)  # recorded past retention
        await log.append(
            [
                _event("e1", "D", 10, entities=(pod,), user_id="u1"),
                _event("e2", "D", 20, user_id="u2"),
                evolve(_event("e3", "D", 7200, entities=(pod,), user_id="u1"), recorded_at=old),
                _event("g", "X", 30, entities=(pod,), is_global=True, user_id="u1"),
            ]
        )
        since = datetime(2000, 1, 1, tzinfo=UTC)
        w = await log.window("D", since=since, limit=10, entity=pod)
        assert [e.id for e in w.events] == ["e1", "g"]
        assert await log.purge_expired() == 1
        assert await log.purge_expired() == 0
        assert await log.erase_user("u1") == 2
        assert await log.erase_user("u1") == 0
        w = await log.window("D", since=since, limit=10)
        assert [e.id for e in w.events] == ["e2"]
        assert (await log.window("D", since=since, limit=10, entity=pod)).events == ()
        with pytest.raises(ScopeRequired):
            await log.window(" ", since=since, limit=1)
    finally:
        await log.close()


async def test_append_is_one_round_trip_and_returns_new_count(events: RedisEventLog) -> None:
    batch = [_event(f"e{i}", f"d{i % 3}", i) for i in range(50)]
    assert await events.append(batch + batch[:5]) == 50
    assert await events.append([*batch[:10], _event("new", "d0", 1)]) == 1


# -- leases ---------------------------------------------------------------------------


async def test_lease_fencing_tokens_only_grow(leases: RedisLeaseStore) -> None:
    ttl = timedelta(milliseconds=60)
    first = await leases.acquire("s", "job", "a", ttl, b"p1")
    assert first is not None
    assert first.token == 1
    assert await leases.acquire("s", "job", "b", ttl) is None
    again = await leases.acquire("s", "job", "a", timedelta(seconds=5), b"p2")
    assert again is not None
    assert (again.token, again.payload) == (1, b"p2")
    assert await leases.release("s", "job", "b") is False
    assert await leases.release("s", "job", "a") is True
    second = await leases.acquire("s", "job", "b", ttl)
    assert second is not None
    assert second.token == 2
    await asyncio.sleep(0.12)  # expired by PX
    assert await leases.get("s", "job") is None
    with pytest.raises(LeaseNotHeld):
        await leases.renew("s", "job", "b", ttl)
    third = await leases.acquire("s", "job", "c", ttl)
    assert third is not None
    assert third.token == 3


async def test_lease_scan_prefix_is_literal(leases: RedisLeaseStore) -> None:
    ttl = timedelta(seconds=30)
    for key in ["a*", "a*b", "ab", "a?", "a[", "b", "ü1", "ü2"]:
        await leases.acquire("s", key, "me", ttl)
    assert [x.key for x in await leases.scan("s", "a*")] == ["a*", "a*b"]
    assert [x.key for x in await leases.scan("s", "ü")] == ["ü1", "ü2"]
    assert [x.key for x in await leases.scan("s")] == sorted(
        ["a*", "a*b", "ab", "a?", "a[", "b", "ü1", "ü2"]
    )
    assert await leases.scan("other") == []


# -- cache ------------------------------------------------------------------------------


async def test_cache_ttl_and_literal_delete_prefix(cache: RedisCache) -> None:
    for key in ["a*", "a*b", "ab", "a?x", "a[1]", "b"]:
        await cache.put("s", key, key.encode())
    await cache.put("other", "a*", b"o")
    assert await cache.delete_prefix("s", "a*") == 2
    assert await cache.get("s", "ab") == b"ab"
    assert await cache.get("other", "a*") == b"o"
    assert await cache.delete_prefix("s", "a[") == 1
    assert await cache.delete_prefix("s", "") == 3
    await cache.put("s", "t", b"x", ttl=timedelta(milliseconds=50))
    assert await cache.get("s", "t") == b"x"
    await asyncio.sleep(0.1)
    assert await cache.get("s", "t") is None
    assert await cache.delete_prefix("s", "t") == 0
    assert await cache.delete("s", "t") is False


async def test_search_vectors_normalised_independent_of_norm(store: RedisMemoryStore) -> None:
    await store.add(
        [
            make_record("big", vector=np.full(8, 100.0)),
            make_record("small", vector=np.full(8, 0.01)),
        ]
    )
    hits = await store.search("alice", np.ones(8, dtype=np.float32))
    assert [h.record.id for h in hits] == ["big", "small"]
    assert all(abs(h.score - 1.0) < 1e-5 for h in hits)


_times = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)


@given(_times, st.text(min_size=1), _times, st.text(min_size=1))
def test_list_sort_key_orders_like_created_at_then_id(
    t1: datetime, id1: str, t2: datetime, id2: str
) -> None:
    from agent_memory.adapters.redis._codec import from_micros, sort_key, to_micros

    a, b = sort_key(t1, id1), sort_key(t2, id2)
    assert (a < b) == ((t1, id1) < (t2, id2))
    assert (a == b) == ((t1, id1) == (t2, id2))
    assert from_micros(to_micros(t1)) == t1


@given(st.text(min_size=1), st.text(min_size=1))
def test_global_member_round_trips_and_orders_by_id(id: str, domain: str) -> None:
    from agent_memory.adapters.redis.events import _gmember, _parse_gmember

    assert _parse_gmember(_gmember(domain, id)) == (domain, id)

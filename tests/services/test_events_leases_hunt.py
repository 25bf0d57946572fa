"""Adversarial hunt over the coordination ports: `EventLog` and `LeaseStore` on
every backend that serves them (memory, SQLite, Redis, PostgreSQL), each
compared with the in-memory backend as the oracle where semantics agree.

Past bugs pinned here:
- Redis scored events by event time as a double: beyond 2**53 µs of the epoch
  (before 1684 or after 2255) neighbouring microseconds collapsed, so a window
  ordered such events by id instead of time and `until` paging lost or repeated
  them; the purge never deleted an expired event whose recorded time lay there;
- Redis leases outlived their `expires_at` by up to a millisecond (a key's PX
  expiry ends after the millisecond it names): `get`/`scan` showed them, and
  their owner could renew or release them while anyone else was refused;
- `Coordinator` built lease keys (and owners) as JSON of the ids, which passed
  the 512-byte key bound for valid long ids: such an entity could not be
  claimed, nor such a request announced (InvalidInput on "key").
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.adapters.memory.events import InMemoryEventLog
from agent_memory.bootstrap import Settings, open_stores
from agent_memory.domain.errors import InvalidInput, LeaseNotHeld
from agent_memory.domain.records import Entity, Event
from agent_memory.ports.storage import EventLog, LeaseStore

EMB = HashingEmbedder(16)
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BACKENDS = ["memory", "sqlite", "redis", "postgres"]


class ManualClock:
    def __init__(self, at: datetime = NOW) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


class Ports:
    def __init__(self, stores: Any, clock: ManualClock, name: str, url: str) -> None:
        self.stores, self.clock, self.name, self.url = stores, clock, name, url
        self.events: EventLog = stores.events
        self.leases: LeaseStore = stores.leases
        # the oracle sees every append of the run (global events show in every domain)
        self.oracle = InMemoryEventLog(clock=clock)


@pytest.fixture(params=BACKENDS)
async def ports(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Ports]:
    clock = ManualClock()
    cfg = Settings(deployment=f"evl-{uuid.uuid4().hex[:10]}")
    if request.param == "memory":
        url = f"memory://evl-{uuid.uuid4().hex}"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'evl.db'}"
    elif request.param == "redis":
        url = str(request.getfixturevalue("redis_url"))
    else:
        url = str(request.getfixturevalue("postgres_url"))
    stores = await open_stores(url, space=EMB.space, settings=cfg, clock=clock)
    try:
        yield Ports(stores, clock, request.param, url)
    finally:
        await stores.close()


def ev(id: str, domain: str, at: datetime, **kw: Any) -> Event:
    return Event(
        id=id,
        domain=domain,
        agent="a",
        action="act",
        outcome="ok",
        summary=f"s {id}",
        occurred_at=at,
        recorded_at=kw.pop("recorded_at", NOW),
        **kw,
    )


def keys(events: Any) -> list[tuple[str, str]]:
    return [(e.domain, e.id) for e in events]


# -- events far from the epoch ---------------------------------------------------

FAR = st.sampled_from(
    [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(1500, 6, 1, tzinfo=UTC),
        datetime(1684, 1, 1, tzinfo=UTC),
        datetime(2255, 12, 31, tzinfo=UTC),
        datetime(2400, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    ]
)


@settings(max_examples=10)
@given(
    bases=st.lists(FAR, min_size=1, max_size=2, unique=True),
    offsets=st.lists(st.integers(0, 40), min_size=1, max_size=8),
    globals_=st.lists(st.booleans(), min_size=8, max_size=8),
    limit=st.integers(1, 4),
)
@example(
    bases=[datetime(2400, 1, 1, tzinfo=UTC)],
    offsets=[0, 1, 2, 3, 4, 5],
    globals_=[False] * 8,
    limit=2,
)
async def test_event_times_far_from_epoch_order_and_page_exactly(
    ports: Ports, bases: list[datetime], offsets: list[int], globals_: list[bool], limit: int
) -> None:
    """Events microseconds apart, years from the epoch: the window orders them by
    time (ids run against time here) and a pager with `until` reads each once."""
    tag = uuid.uuid4().hex[:8]
    d = f"far-{tag}"
    evs = []
    for j, off in enumerate(offsets):
        for b, base in enumerate(bases):
            at = (
                base - timedelta(microseconds=off)
                if base.year == 9999
                else base + timedelta(microseconds=off)
            )
            evs.append(ev(f"{tag}-{99 - off:02d}-{b}-{j}", d, at, is_global=globals_[j]))
    oracle = ports.oracle
    assert await ports.events.append(evs) == await oracle.append(evs)
    since = datetime(1, 1, 1, tzinfo=UTC)
    mine = {e.id for e in evs}

    async def page(log: EventLog, until: datetime | None) -> Any:
        w = await log.window(d, since=since, limit=limit, until=until)
        return list(w.events), w

    until: datetime | None = None
    seen: list[str] = []
    for _ in range(200):
        got, gw = await page(ports.events, until)
        want, ww = await page(oracle, until)
        assert [e.id for e in got] == [e.id for e in want], until
        assert gw.limited == ww.limited
        if not got:
            break
        oldest = got[-1].occurred_at
        # read the oldest instant whole, then page back from it
        whole = await ports.events.window(
            d, since=oldest, until=oldest + timedelta(microseconds=1), limit=100
        )
        seen += [e.id for e in got if e.occurred_at > oldest and e.id in mine]
        seen += [e.id for e in whole.events if e.id in mine]
        until = oldest
    assert sorted(seen) == sorted(mine), "each event read exactly once"
    # the exact bounds hold for far instants too
    for e in evs[:3]:
        got_w = await ports.events.window(
            d, since=e.occurred_at, until=e.occurred_at + timedelta(microseconds=1), limit=100
        )
        want_w = await oracle.window(
            d, since=e.occurred_at, until=e.occurred_at + timedelta(microseconds=1), limit=100
        )
        assert keys(got_w.events) == keys(want_w.events)


async def test_event_recorded_far_in_the_past_is_purged(ports: Ports) -> None:
    """Retention counts from recorded_at, whatever its year: an event recorded in
    1600 is expired, never returned, and purged (and counted) once."""
    tag = uuid.uuid4().hex[:8]
    d = f"old-{tag}"
    old = datetime(1600, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    evs = [
        ev(f"{tag}-old", d, NOW, recorded_at=old),
        ev(f"{tag}-gold", d, NOW, recorded_at=old, is_global=True, user_id=f"{tag}-u"),
        ev(f"{tag}-new", d, NOW),
    ]
    assert await ports.events.append(evs) == 3
    w = await ports.events.window(d, since=NOW - timedelta(1), limit=10)
    assert [e.id for e in w.events if e.id.startswith(tag)] == [f"{tag}-new"]
    assert await ports.events.purge_expired() >= 2
    assert await ports.events.user_events(f"{tag}-u") == []
    assert await ports.events.purge_expired() == 0


# -- lease scans: the prefix is literal -------------------------------------------

_KEYCHARS = st.sampled_from("ab*%_\\[]{}:^é\U0001f600-")


@settings(max_examples=10)
@given(
    keys_=st.lists(st.text(_KEYCHARS, min_size=1, max_size=4), min_size=1, max_size=8, unique=True),
    prefix=st.text(_KEYCHARS, max_size=3),
)
async def test_scan_prefix_is_literal(ports: Ports, keys_: list[str], prefix: str) -> None:
    """`*`, `%`, `_`, `[`, `\\` in a prefix match only themselves; order by code point."""
    scope = f"s-{uuid.uuid4().hex[:8]}"
    for k in keys_:
        got = await ports.leases.acquire(scope, k, "o", timedelta(seconds=30), payload=k.encode())
        assert got is not None
    listed = await ports.leases.scan(scope, prefix)
    assert [x.key for x in listed] == sorted(k for k in keys_ if k.startswith(prefix))
    assert all(x.payload == x.key.encode() for x in listed)


# -- leases under contention --------------------------------------------------------


async def test_concurrent_acquire_one_holder_tokens_grow(ports: Ports) -> None:
    """Many owners racing for one key with short ttls, releasing and re-acquiring:
    never two live holders at once, and every fresh grant has a larger token."""
    scope, key = f"race-{uuid.uuid4().hex[:8]}", "k:{*}"
    ttl = timedelta(milliseconds=30)
    grants: list[tuple[int, str, datetime]] = []

    async def worker(owner: str) -> None:
        for _ in range(15):
            lease = await ports.leases.acquire(scope, key, owner, ttl)
            if lease is not None:
                grants.append((lease.token, owner, lease.expires_at))
                if len(grants) % 2:
                    await ports.leases.release(scope, key, owner)
            await asyncio.sleep(0.002)

    if ports.name != "redis":  # the others expire by the injected clock: let it run
        ports.clock.at = NOW

        async def tick() -> None:
            for _ in range(200):
                ports.clock.at += timedelta(milliseconds=7)
                await asyncio.sleep(0.001)

        await asyncio.gather(tick(), *(worker(f"o{i}") for i in range(8)))
    else:
        await asyncio.gather(*(worker(f"o{i}") for i in range(8)))
    assert grants
    by_token: dict[int, set[str]] = {}
    for token, owner, _ in grants:
        by_token.setdefault(token, set()).add(owner)
    assert all(len(o) == 1 for o in by_token.values()), "one owner per token"
    # every fresh grant took the next token: none reused by another owner, none lost
    tokens = {t for t, _, _ in grants}
    assert tokens == set(range(1, max(tokens) + 1))
    for i in range(8):  # each owner's own calls are sequential: its tokens only grow
        mine = [t for t, o, _ in grants if o == f"o{i}"]
        assert mine == sorted(mine)


async def test_naive_times_are_typed_errors(ports: Ports) -> None:
    naive = datetime(2026, 1, 1)
    with pytest.raises(InvalidInput):
        await ports.events.window("d", since=naive, limit=1)
    with pytest.raises(InvalidInput):
        await ports.events.window("d", since=NOW, limit=1, until=naive)


# -- coordination with ids at their bound -----------------------------------------


@pytest.mark.parametrize("size", [1, 200, 512])
async def test_claims_and_signals_take_ids_of_any_valid_length(ports: Ports, size: int) -> None:
    """An entity, agent or request id may be MAX_ID_BYTES long (quotes escape to
    two bytes in JSON): a request still claims, is seen holding, and releases."""
    from agent_memory.services.coordination import Coordinator, claim_key

    domain = f"co-{uuid.uuid4().hex[:8]}"
    ttl = timedelta(seconds=30)
    ent = Entity("t" * min(size, 3), ('"' * size)[:size])
    agent, req = "a" * size, "é" * (size // 2) or "r"
    first, second = Coordinator(ports.leases, domain, ttl), Coordinator(ports.leases, domain, ttl)
    mine = await first.claim(agent, req, ent, NOW)
    assert mine.acquired
    theirs = await second.claim("other", "r2", ent, NOW)
    assert not theirs.acquired
    assert theirs.holder_agent == agent
    assert theirs.holder_request_id == req
    assert await first.announce(agent, req, doing="x", started_at=NOW) is not None
    assert [(s.agent, s.request_id) for s in await second.active_signals()] == [(agent, req)]
    assert [(c[0], c[1], c[2]) for c in await second.active_claims()] == [(ent, agent, req)]
    assert await first.release(agent, req, [claim_key(ent)]) == 1
    assert (await second.claim("other", "r2", ent, NOW)).acquired


async def test_lease_ends_exactly_at_expires_at(ports: Ports) -> None:
    """At `expires_at` a lease is over: `get` and `scan` no longer show it, its
    owner can neither renew nor release it, and anyone may take it (with a new
    token). Redis runs on its server clock: there, each read is checked against
    the server time taken just before it."""
    scope = f"edge-{uuid.uuid4().hex[:8]}"
    if ports.name != "redis":
        ports.clock.at = NOW
        lease = await ports.leases.acquire(scope, "k", "a", timedelta(seconds=1))
        assert lease is not None
        ports.clock.at = lease.expires_at
        assert await ports.leases.get(scope, "k") is None
        assert await ports.leases.scan(scope) == []
        assert await ports.leases.release(scope, "k", "a") is False
        with pytest.raises(LeaseNotHeld):
            await ports.leases.renew(scope, "k", "a", timedelta(seconds=1))
        taken = await ports.leases.acquire(scope, "k", "b", timedelta(seconds=1))
        assert taken is not None
        assert taken.token > lease.token
        return
    from redis.asyncio import Redis

    server = Redis.from_url(ports.url)
    late: list[str] = []
    try:
        for i in range(20):
            key = f"k{i}"
            lease = await ports.leases.acquire(scope, key, "a", timedelta(milliseconds=3))
            assert lease is not None
            while True:
                sec, us = await server.time()
                before = datetime.fromtimestamp(sec, tz=UTC) + timedelta(microseconds=us)
                got = await ports.leases.get(scope, key)
                listed = [x for x in await ports.leases.scan(scope, key) if x.key == key]
                for seen in [got, *listed]:
                    if seen is not None and seen.expires_at <= before:
                        late.append(f"{key}: shown at {before} expiring {seen.expires_at}")
                if got is None and not listed:
                    break
            taken = await ports.leases.acquire(scope, key, "b", timedelta(seconds=5))
            assert taken is not None
            assert taken.token > lease.token
    finally:
        await server.aclose()
    assert late == [], late[:3]

"""Second adversarial hunt over coordination: activity signals, investigation
claims (leases on entities, fencing tokens, release and expiry) and the digest,
on every backend that serves leases and events (memory, SQLite, Redis,
PostgreSQL).

Past bugs pinned here:
- an acquire whose outcome was unknown (the reply lost to a timeout after the
  server took the lease; Redis `wait_replicas` refusing a lease it had already
  stored) left the request's signal and claim behind after it exited: other
  agents were told for a whole TTL that a finished request was still active
  and still held its entities;
- a backend failure while the signal was announced on enter (a transient
  outage) left the request invisible to the others for its whole run: the
  renewal only renewed what was held, and never announced it;
- a `doing` or `status` that is not valid Unicode (a lone surrogate) was taken,
  then every announcement and renewal failed with a bare `UnicodeEncodeError`:
  now refused at once with `InvalidInput`, as are entities that are not
  `Entity` values;
- the offline (extractive) digest was "within about target_tokens" for its
  notable lines only: its header quoted every top entity, action and outcome
  whole, so long names made a 500-token digest thousands of tokens long (more
  than the 5x a model may use), and one long notable summary hid every later
  one.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agent_memory.adapters.memory import HashingEmbedder, InMemoryEventLog, InMemoryLeaseStore
from agent_memory.bootstrap import Settings, Stores, open_stores
from agent_memory.domain.digest import extractive_digest
from agent_memory.domain.errors import InvalidInput, LeaseNotHeld, ScopeRequired
from agent_memory.domain.records import Entity, Event
from agent_memory.domain.validation import MAX_ID_BYTES
from agent_memory.domain.views import estimate_tokens
from agent_memory.ports.storage import LeaseStore
from agent_memory.services import request as request_module
from agent_memory.services.compaction import Compactor, CompactorOptions
from agent_memory.services.coordination import (
    SIGNAL_PREFIX,
    Coordinator,
    claim_key,
    request_owner,
    signal_key,
)
from agent_memory.services.request import AgentMemory, RequestOptions

EMB = HashingEmbedder(16)
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BACKENDS = ["memory", "sqlite", "redis", "postgres"]
POD = Entity("pod", "web-1")


class ManualClock:
    def __init__(self, at: datetime = NOW) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


class Backend:
    """One deployment on one backend; `open()` gives another handle on it (like
    another process would)."""

    def __init__(self, name: str, url: str, cfg: Settings, clock: ManualClock) -> None:
        self.name, self.url, self.cfg, self.clock = name, url, cfg, clock
        self.opened: list[Stores] = []

    @property
    def manual_time(self) -> bool:
        """Leases expire by the injected clock (Redis uses its server's)."""
        return self.name != "redis"

    async def open(self) -> Stores:
        stores = await open_stores(self.url, space=EMB.space, settings=self.cfg, clock=self.clock)
        self.opened.append(stores)
        assert stores.leases is not None
        assert stores.events is not None
        assert stores.cache is not None
        return stores


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    cfg = Settings(deployment=f"coh-{uuid.uuid4().hex[:10]}")
    if request.param == "memory":
        url = f"memory://coh-{uuid.uuid4().hex}"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'coh.db'}"
    elif request.param == "redis":
        url = str(request.getfixturevalue("redis_url"))
    else:
        url = str(request.getfixturevalue("postgres_url"))
    b = Backend(request.param, url, cfg, ManualClock())
    try:
        yield b
    finally:
        for stores in b.opened:
            await stores.close()


def _leases(stores: Stores) -> LeaseStore:
    assert stores.leases is not None
    return stores.leases


def _memory(stores: Stores, clock: Any, **opts: Any) -> AgentMemory:
    assert stores.events is not None
    return AgentMemory(
        events=stores.events,
        leases=_leases(stores),
        clock=clock,
        options=RequestOptions(**opts),
    )


async def _gone(leases: LeaseStore, domain: str, key: str) -> None:
    """Wait (up to 5 s) until the lease of `key` has ended."""
    for _ in range(500):
        if await leases.get(domain, key) is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{key} did not expire")


# -- many claimants of one entity -------------------------------------------------


async def test_many_handles_claiming_one_entity_never_two_holders(backend: Backend) -> None:
    """Eight requests on four handles claim one entity over and over, holding it
    briefly: at no time do two believe they hold it, the store's holder is the
    one that believes it, and every fresh grant has a larger fencing token."""
    handles = [await backend.open() for _ in range(4)]
    domain = f"race-{uuid.uuid4().hex[:6]}"
    ttl = timedelta(seconds=60)
    holding: set[str] = set()
    overlaps: list[tuple[str, set[str]]] = []
    tokens: list[int] = []

    async def agent(i: int) -> None:
        stores = handles[i % len(handles)]
        coord = Coordinator(_leases(stores), domain, ttl)
        for n in range(6):
            req = f"r{i}-{n}"
            result = await coord.claim(f"A{i}", req, POD, NOW)
            if not result.acquired:
                assert result.holder_agent is not None, result
                await asyncio.sleep(0.001)
                continue
            if holding:
                overlaps.append((req, set(holding)))
            holding.add(req)
            lease = await _leases(stores).get(domain, claim_key(POD))
            assert lease is not None
            assert lease.owner == request_owner(f"A{i}", req)
            tokens.append(lease.token)
            await asyncio.sleep(0.002)
            holding.discard(req)
            assert await coord.release(f"A{i}", req, [claim_key(POD)]) == 1

    await asyncio.gather(*(agent(i) for i in range(8)))
    assert overlaps == [], overlaps[:3]
    assert tokens, "someone held the claim"
    assert tokens == sorted(tokens), "fencing tokens of successive holders grow"
    assert len(set(tokens)) == len(tokens), "no token granted twice"


_CLAIMANT = """
import asyncio, json, sys, time
from datetime import UTC, datetime, timedelta
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Settings, open_stores
from agent_memory.domain.records import Entity
from agent_memory.services.coordination import Coordinator, claim_key, request_owner

async def main(url, deployment, name, domain):
    stores = await open_stores(url, space=HashingEmbedder(16).space,
                               settings=Settings(deployment=deployment))
    coord = Coordinator(stores.leases, domain, timedelta(seconds=60))
    ent = Entity("pod", "web-1")
    grants = []
    try:
        for n in range(25):
            req = f"{name}-{n}"
            res = await coord.claim(name, req, ent, datetime.now(UTC))
            if res.acquired:
                got = time.time()
                lease = await stores.leases.get(domain, claim_key(ent))
                assert lease is not None and lease.owner == request_owner(name, req)
                await asyncio.sleep(0.002)
                before_release = time.time()
                assert await coord.release(name, req, [claim_key(ent)]) == 1
                grants.append([lease.token, got, before_release])
            else:
                await asyncio.sleep(0.001)
    finally:
        await stores.close()
    print(json.dumps(grants))

asyncio.run(main(*sys.argv[1:]))
"""


@pytest.mark.parametrize("name", ["sqlite", "redis", "postgres"])
async def test_processes_claiming_one_entity_never_overlap(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Three processes claim and release one entity: every grant has its own
    token, and the grants ordered by token never overlap in time (the holder
    of token n called release before the holder of n + 1 got its grant)."""
    if name == "sqlite":
        url = f"sqlite:///{tmp_path / 'procs.db'}"
    else:
        url = str(request.getfixturevalue(f"{name}_url"))
    deployment = f"cop-{uuid.uuid4().hex[:10]}"
    domain = "k8s"
    # create the schema once, before the processes race to open it
    first = await open_stores(url, space=EMB.space, settings=Settings(deployment=deployment))
    await first.close()
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CLAIMANT,
            url,
            deployment,
            f"P{i}",
            domain,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for i in range(3)
    ]
    outs = [await asyncio.wait_for(p.communicate(), 60) for p in procs]
    grants: list[tuple[int, float, float, str]] = []
    for i, (p, (out, err)) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, err.decode()[-2000:]
        grants += [(t, got, rel, f"P{i}") for t, got, rel in json.loads(out)]
    assert grants
    tokens = [g[0] for g in grants]
    assert len(set(tokens)) == len(tokens), "a token granted twice"
    grants.sort()
    for prev, nxt in itertools.pairwise(grants):
        assert prev[2] < nxt[1], f"{nxt} granted while {prev} still held the claim"
    for i in range(3):
        mine = [g[0] for g in grants if g[3] == f"P{i}"]
        assert mine == sorted(mine)


# -- expiry and release: takeable at once, not before -------------------------------


async def test_a_claim_is_takeable_exactly_at_its_expiry_and_at_once_after_release(
    backend: Backend,
) -> None:
    """A's claim (ttl 10 s) is refused to B a microsecond before it ends and
    granted at its end, with a larger token; A's renewal after the end is
    `LeaseNotHeld` and its release a no-op that leaves B's claim alone; B's
    release frees it for C at once. Redis expires by its server clock: there
    the ttl is short and the end is awaited."""
    stores = await backend.open()
    leases = _leases(stores)
    domain = f"edge-{uuid.uuid4().hex[:6]}"
    ttl = timedelta(seconds=10) if backend.manual_time else timedelta(milliseconds=200)
    a = Coordinator(leases, domain, ttl)
    b = Coordinator(leases, domain, ttl)
    backend.clock.at = NOW
    assert (await a.claim("A", "ra", POD, NOW)).acquired
    first = await leases.get(domain, claim_key(POD))
    assert first is not None
    if backend.manual_time:
        backend.clock.at = first.expires_at - timedelta(microseconds=1)
        held = await b.claim("B", "rb", POD, NOW)
        assert not held.acquired
        assert (held.holder_agent, held.holder_request_id) == ("A", "ra")
        backend.clock.at = first.expires_at
    else:
        await _gone(leases, domain, claim_key(POD))
    taken = await b.claim("B", "rb", POD, NOW)
    assert taken.acquired, taken
    second = await leases.get(domain, claim_key(POD))
    assert second is not None
    assert second.token > first.token
    with pytest.raises(LeaseNotHeld):
        await a.renew("A", "ra", [claim_key(POD)])
    assert await a.release("A", "ra", [claim_key(POD)]) == 0
    still = await leases.get(domain, claim_key(POD))
    assert still is not None
    assert still.owner == request_owner("B", "rb")
    assert await b.release("B", "rb", [claim_key(POD)]) == 1
    c = await Coordinator(leases, domain, ttl).claim("C", "rc", POD, NOW)
    assert c.acquired, "a released claim is takeable at once"
    third = await leases.get(domain, claim_key(POD))
    assert third is not None
    assert third.token > second.token


async def test_signals_are_seen_by_others_until_their_ttl_and_not_after(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running request's signal is in the other agents' `<agent_coordination>`
    until its TTL ends (no renewal ran: the renewal sleeps in real time), and
    gone from it at the end exactly; its claim likewise leaves `<agent_memory>`."""
    monkeypatch.setattr(request_module, "asyncio", _Ticks())  # no renewal round runs
    stores = await backend.open()
    other = await backend.open()
    backend.clock.at = NOW
    ttl = timedelta(minutes=5) if backend.manual_time else timedelta(milliseconds=600)
    mem_a = _memory(stores, backend.clock, signal_ttl=ttl)
    mem_b = _memory(other, backend.clock, signal_ttl=ttl)
    domain = f"sig-{uuid.uuid4().hex[:6]}"
    async with mem_a.request(
        agent="agent-a", domain=domain, request_id="ra", entities=[POD], doing="drain node"
    ) as a:
        assert a.claims[0].acquired
        signal = await _leases(stores).get(domain, signal_key("agent-a", "ra"))
        assert signal is not None
        async with mem_b.request(agent="agent-b", domain=domain, request_id="rb") as b:
            if backend.manual_time:
                backend.clock.at = signal.expires_at - timedelta(microseconds=1)
            seen = await b.planning_context()
            assert "drain node" in seen.coordination
            assert '"ra"' in seen.agent_memory
            if backend.manual_time:
                backend.clock.at = signal.expires_at
            else:
                await _gone(_leases(other), domain, signal_key("agent-a", "ra"))
                await _gone(_leases(other), domain, claim_key(POD))
            gone = await b.planning_context()
            assert "drain node" not in gone.coordination
            assert "agent-a" not in gone.coordination
            assert '"ra"' not in gone.agent_memory


# -- hostile ids across domains ---------------------------------------------------

_HOSTILE = st.text(
    st.sampled_from(list(':*{}|@-" \\[],#/\u00e9\u4e2d\U0001f600\u0301\u200dab\t\n')),
    min_size=1,
    max_size=6,
).filter(str.strip)


def _long(text: str, size: int) -> str:
    """`text` repeated to `size` UTF-8 bytes at most (whole characters)."""
    out = ""
    while True:
        for ch in text:
            if len((out + ch).encode()) > size:
                return out or text[0]
            out += ch


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    agent=_HOSTILE,
    req=_HOSTILE,
    etype=_HOSTILE,
    eid=_HOSTILE,
    size=st.sampled_from([0, 200, MAX_ID_BYTES]),
)
@example(agent='a"', req="]", etype="pod", eid='x","y', size=0)
@example(agent="a", req="r", etype='pod","x', eid="y", size=MAX_ID_BYTES)
async def test_hostile_ids_claim_and_signal_in_their_own_domain_only(
    backend: Backend, agent: str, req: str, etype: str, eid: str, size: int
) -> None:
    """Ids made of separators, quotes, escapes, combining marks and emoji, up to
    the 512-byte bound: the claim and the signal round-trip exactly, a second
    request is told the exact holder, a look-alike entity or domain is
    independent, and the other domain sees nothing."""
    if size:
        agent, eid = _long(agent, size), _long(eid, size)
    if not backend.opened:
        await backend.open()
    leases = _leases(backend.opened[0])
    tag = uuid.uuid4().hex[:6]
    domain, twin = f"t/x/d/{tag}:a", f"t/x/d/{tag}:a "
    ttl = timedelta(minutes=5)
    backend.clock.at = NOW
    ent = Entity(etype, eid)
    look_alike = Entity(etype + " ", eid)
    mine = Coordinator(leases, domain, ttl)
    assert await mine.announce(agent, req, doing="d", started_at=NOW, entities=[ent]) is not None
    assert (await mine.claim(agent, req, ent, NOW)).acquired
    theirs = await Coordinator(leases, domain, ttl).claim("B", "rb", ent, NOW)
    assert not theirs.acquired
    assert (theirs.holder_agent, theirs.holder_request_id) == (agent, req)
    assert (await Coordinator(leases, domain, ttl).claim("B", "rb", look_alike, NOW)).acquired
    assert (await Coordinator(leases, twin, ttl).claim("C", "rc", ent, NOW)).acquired
    signals = await mine.active_signals()
    assert [(s.agent, s.request_id, s.entities) for s in signals] == [(agent, req, (ent,))]
    claims = {(c[0], c[1], c[2]) for c in await mine.active_claims()}
    assert claims == {(ent, agent, req), (look_alike, "B", "rb")}
    twin_coord = Coordinator(leases, twin, ttl)
    assert await twin_coord.active_signals() == []
    assert [(c[0], c[1]) for c in await twin_coord.active_claims()] == [(ent, "C")]
    assert await mine.release(agent, req, [claim_key(ent), signal_key(agent, req)]) == 2


def test_hostile_request_arguments_are_refused_with_typed_errors() -> None:
    """NUL, lone surrogates, over-long ids and non-entities are refused when the
    request is made (or the status set), naming the argument — not later, by a
    failing announcement that leaves the request invisible to the others."""
    memory = AgentMemory(
        events=InMemoryEventLog(), leases=InMemoryLeaseStore(), clock=ManualClock()
    )
    bad: list[tuple[dict[str, Any], str]] = [
        ({"agent": "a\x00"}, "agent"),
        ({"request_id": "r\x00"}, "request_id"),
        ({"agent": "a" * (MAX_ID_BYTES + 1)}, "agent"),
        ({"request_id": "\u00e9" * (MAX_ID_BYTES // 2 + 1)}, "request_id"),
        ({"doing": "fix \ud800"}, "doing"),
        ({"doing": 7}, "doing"),
        ({"entities": [("pod", "web-1")]}, "entities"),
        ({"entities": POD}, "entities"),
    ]
    for change, field in bad:
        args: dict[str, Any] = {"agent": "A", "domain": "k8s", "request_id": "r1", **change}
        with pytest.raises(InvalidInput) as caught:
            memory.request(**args)
        assert caught.value.field == field, (change, caught.value)
    with pytest.raises(ScopeRequired):
        memory.request(agent="A", domain=" ", request_id="r1")
    with pytest.raises(InvalidInput) as caught:
        memory.request(agent="A", domain="k8s\x00", request_id="r1")
    assert caught.value.field == "domain"
    with pytest.raises(InvalidInput):
        Entity("pod", "web\x00")
    req = memory.request(agent="A", domain="k8s", request_id="r1", doing="ok \x00 nul is text")
    with pytest.raises(InvalidInput) as caught:
        req.status("waiting \udc80")
    assert caught.value.field == "status"


# -- backend failures during claims and signals -------------------------------------


class _LostReplies:
    """A lease store whose `acquire` takes effect and then raises (the reply
    lost to a timeout; a Redis `WAIT` that did not see the replicas)."""

    def __init__(self, inner: LeaseStore) -> None:
        self._inner = inner
        self.lost = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def acquire(self, *args: Any, **kwargs: Any) -> Any:
        await self._inner.acquire(*args, **kwargs)
        self.lost += 1
        raise TimeoutError("the reply was lost")


async def test_an_acquire_whose_reply_was_lost_leaves_nothing_after_the_request(
    backend: Backend,
) -> None:
    """The store took the signal and the claim but the replies were lost: the
    request goes on (the failures are reported), and its exit releases what it
    may hold — the others are not told for a whole TTL that a finished request
    still runs and still holds its entity."""
    stores = await backend.open()
    leases = _leases(stores)
    lossy = _LostReplies(leases)
    assert stores.events is not None
    memory = AgentMemory(events=stores.events, leases=lossy, clock=backend.clock)  # type: ignore[arg-type]
    domain = f"lost-{uuid.uuid4().hex[:6]}"
    async with memory.request(agent="A", domain=domain, request_id="r1", entities=[POD]) as req:
        failures = req.reports["activity-announcement"].failures
        assert {f.operation for f in failures} == {"announce", "claim pod/web-1"}
        assert lossy.lost == 2
        assert len(await leases.scan(domain, "")) == 2, "the store did take both"
    assert await leases.scan(domain, "") == [], "the exited request left leases behind"
    assert req.reports["cleanup"].ok, req.reports["cleanup"].as_dict()
    taken = await Coordinator(leases, domain, timedelta(minutes=5)).claim("B", "rb", POD, NOW)
    assert taken.acquired


class _Ticks:
    """Replaces `asyncio` in the request module: its `sleep` waits for a tick the
    test gives (and says it is waiting), everything else is asyncio's."""

    def __init__(self) -> None:
        self.ticks: asyncio.Queue[None] = asyncio.Queue()
        self.waiting = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, _seconds: float) -> None:
        self.waiting.set()
        await self.ticks.get()

    async def tick(self) -> None:
        self.waiting.clear()
        self.ticks.put_nowait(None)
        await asyncio.wait_for(self.waiting.wait(), 10)


class _Outage:
    """A lease store that fails every call while `down`."""

    def __init__(self, inner: LeaseStore) -> None:
        self._inner = inner
        self.down = True

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise ConnectionError("backend unreachable")
            return await attr(*args, **kwargs)

        return call


async def test_a_signal_the_enter_could_not_announce_is_announced_by_the_renewal(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backend is unreachable while the request enters: the agent goes on
    and the failure is reported. Once the backend is back, the next renewal
    round announces the signal (with the latest status), so the request is not
    invisible to the others for the rest of its run; the exit releases it."""
    stores = await backend.open()
    leases = _leases(stores)
    outage = _Outage(leases)
    ticks = _Ticks()
    monkeypatch.setattr(request_module, "asyncio", ticks)
    assert stores.events is not None
    memory = AgentMemory(events=stores.events, leases=outage, clock=backend.clock)  # type: ignore[arg-type]
    domain = f"blip-{uuid.uuid4().hex[:6]}"
    async with memory.request(agent="A", domain=domain, request_id="r1", doing="triage") as req:
        assert [f.operation for f in req.reports["activity-announcement"].failures] == ["announce"]
        await asyncio.wait_for(ticks.waiting.wait(), 3)
        await ticks.tick()  # still down: reported, nothing announced
        assert await leases.scan(domain, SIGNAL_PREFIX) == []
        assert not req.reports["activity-renewal"].ok
        outage.down = False
        req.status("waiting for approval")
        await ticks.tick()
        signals = await leases.scan(domain, SIGNAL_PREFIX)
        assert [s.key for s in signals] == [signal_key("A", "r1")], req.reports[
            "activity-renewal"
        ].as_dict()
        assert json.loads(signals[0].payload)["status"] == "waiting for approval"
        await ticks.tick()  # renewed from then on
        assert len(await leases.scan(domain, SIGNAL_PREFIX)) == 1
    assert await leases.scan(domain, "") == []


async def test_a_failing_backend_during_planning_is_reported_not_raised(
    backend: Backend,
) -> None:
    """Scans failing while the planning context is built: the views still
    render (without the others' signals and claims) and the report names what
    failed."""
    stores = await backend.open()
    leases = _leases(stores)
    outage = _Outage(leases)
    outage.down = False
    assert stores.events is not None
    memory = AgentMemory(events=stores.events, leases=outage, clock=backend.clock)  # type: ignore[arg-type]
    domain = f"plan-{uuid.uuid4().hex[:6]}"
    backend.clock.at = NOW
    async with memory.request(agent="A", domain=domain, request_id="r1", entities=[POD]) as req:
        outage.down = True
        ctx = await req.planning_context()
        outage.down = False
    operations = {f.operation for f in ctx.report.failures}
    assert {"signals", "claims"} <= operations, ctx.report.as_dict()
    assert ctx.coordination.startswith("<agent_coordination>")
    assert ctx.agent_memory
    assert await leases.scan(domain, "") == []


# -- the digest: within its budget, and only the domain's own activity ----------------


def _ev(i: int, domain: str, **kw: Any) -> Event:
    at = kw.pop("at", NOW - timedelta(minutes=i))
    return Event(
        id=kw.pop("id", f"e{i}"),
        domain=domain,
        agent=kw.pop("agent", "a"),
        action=kw.pop("action", "act"),
        outcome=kw.pop("outcome", "ok"),
        summary=kw.pop("summary", f"summary {i}"),
        occurred_at=at,
        recorded_at=at,
        **kw,
    )


_WORDS = st.text(st.sampled_from(list("ab \u00e9\u4e2d-:/\U0001f600")), min_size=1, max_size=400)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(st.tuples(_WORDS, _WORDS, _WORDS, _WORDS, st.booleans()), min_size=1, max_size=8),
    target=st.integers(1, 600),
)
@example(
    rows=[("act " * 300, "ok " * 200, "x" * 500, "s", False)] * 6,
    target=500,
)
@example(rows=[("act", "failed", "pod-1", "why " * 900, True), ("act", "failed", "p", "ok", True)],
         target=200)  # fmt: skip
def test_the_extractive_digest_stays_within_its_target(
    rows: list[tuple[str, str, str, str, bool]], target: int
) -> None:
    """Whatever the events' names and summaries, the offline digest's estimate
    never passes `target_tokens` (it is empty when not even its first line
    fits: the compactor then shows raw events), and one long notable summary
    does not hide the notable events after it."""
    events = [
        _ev(
            i,
            "d",
            action=action,
            outcome=outcome,
            summary=summary,
            entities=[Entity("pod", "x" + eid[: MAX_ID_BYTES // 4])],
            importance=0.9 if notable else 0.1,
        )
        for i, (action, outcome, eid, summary, notable) in enumerate(rows)
    ]
    text = extractive_digest(events, target)
    assert estimate_tokens(text) <= target, (estimate_tokens(text), target, text[:300])
    if text:
        assert text.startswith(f"{len(events)} events from ")
    if target >= 200 and len(rows) == 2 and rows[0][3].startswith("why why"):
        assert "\n- " in text, "the short notable event is shown"
        assert text.endswith(": ok"), text


async def test_a_tenant_digest_never_quotes_another_tenant_or_domain(backend: Backend) -> None:
    """Tenants a and b share one event log: the digest of a's domain is built
    from a's events and a's global events only, never b's (global or not), nor
    those of a domain of no tenant, and each digest is cached in its own
    domain's scope."""
    stores = await backend.open()
    assert stores.events is not None
    assert stores.cache is not None
    backend.clock.at = NOW
    tag = uuid.uuid4().hex[:6]
    da, db, plain = f"t/a/d/{tag}", f"t/b/d/{tag}", f"{tag}"
    await stores.events.append(
        [
            _ev(1, da, summary="alpha-own"),
            _ev(2, f"t/a/d/{tag}-2", summary="alpha-global", is_global=True),
            _ev(3, db, summary="bravo-own"),
            _ev(4, db, summary="bravo-global", is_global=True, importance=0.9),
            _ev(5, plain, summary="plain-global", is_global=True, importance=0.9),
        ]
    )
    comp = Compactor(
        events=stores.events,
        cache=stores.cache,
        clock=backend.clock,
        options=CompactorOptions(target_tokens=400),
    )
    got = await comp.digest(da)
    assert got.digest is not None, got.report.as_dict()
    assert "alpha-own" in got.digest
    assert "alpha-global" in got.digest
    for foreign in ("bravo", "plain-global"):
        assert foreign not in got.digest
    assert estimate_tokens(got.digest) <= 400
    again = await comp.digest(db)
    assert again.digest is not None
    assert "bravo-own" in again.digest
    assert "alpha" not in again.digest
    assert (await comp.digest(da)).path == "cached"


# -- whose request is "own": the agent's, not every agent's with that id -------------


async def test_another_agent_on_the_same_request_id_is_shown(backend: Backend) -> None:
    """An orchestrator fans one request id out to several agents of a domain.
    A request is an (agent, request id) pair (its signal key and lease owner
    say so): the other agent working under the same id is another active
    agent, and its claim another request's investigation, so both are shown;
    only the caller's own signal and claim are left out."""
    stores = await backend.open()
    backend.clock.at = NOW
    memory = _memory(stores, backend.clock)
    domain = f"fan-{uuid.uuid4().hex[:6]}"
    async with (
        memory.request(
            agent="planner", domain=domain, request_id="trace-1", entities=[POD],
            doing="drain node",
        ) as planner,
        memory.request(
            agent="fixer", domain=domain, request_id="trace-1",
            entities=[Entity("pod", "db-1")], doing="restart db",
        ) as fixer,
    ):  # fmt: skip
        assert planner.claims[0].acquired
        assert fixer.claims[0].acquired
        ctx = await fixer.planning_context()
        assert "planner" in ctx.coordination, ctx.coordination
        assert "drain node" in ctx.coordination
        assert "restart db" not in ctx.coordination, "its own signal is left out"
        assert '"web-1"' in ctx.agent_memory, "the planner's claim is shown"
        assert '"db-1"' not in ctx.agent_memory, "its own claim is left out"

"""Adversarial hunt: data that moves (import, migrate) while a user is forgotten
stays whole, and the forgotten user stays forgotten.

An import and a `users.forget` of the same target run side by side; every port
call of either is a step, and hypothesis picks which side takes the next one
(`_Turns`), so the forget can start, pause and end anywhere around the
import's batches and its final check. Whatever the order, once both are done
the target holds none of the forgotten user's items of the file (records,
derived knowledge, events, triples, cache entries, checkpoints, digests) and
every item of the other user. Runs on memory, SQLite, PostgreSQL and Redis, and
on a file whose source was re-embedded before it was exported."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import InMemoryTripleStore
from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.bootstrap.connect import connect, reading_space
from agent_memory.domain.records import Entity, Event, MemoryRecord
from agent_memory.domain.triples import Triple
from agent_memory.portability import (
    ImportFailed,
    Ports,
    VerificationFailed,
    export,
    import_file,
    migrate,
    open_ports,
    ports_of,
    read_header,
    reembed,
)
from agent_memory.services.audit import AuditTrail
from agent_memory.services.compaction import CACHE_KEY as DIGEST_KEY
from agent_memory.services.graph_memory import CHECKPOINT_SCOPE, checkpoint_key
from agent_memory.services.knowledge import KNOWLEDGE_NAMESPACE
from agent_memory.services.portability.format import CacheItem, RecordItem
from agent_memory.services.user_memory import ForgottenUsers, UserMemory, user_cache_scope

from .helpers import read_items, settings

ALICE, BOB = "alice", "bob"
DOMAINS = {ALICE: "ops-a", BOB: "ops-b"}


# -- the file ---------------------------------------------------------------------------


def _record(
    owner: str, id: str, namespace: str, dim: int, at: datetime, **attributes: Any
) -> MemoryRecord:
    return MemoryRecord(
        id=id, owner=owner, namespace=namespace, kind="reflection" if attributes else "fact",
        content=f"{id} of {owner}", vector=np.ones(dim, dtype=np.float32), created_at=at,
        updated_at=at, attributes=attributes,
    )  # fmt: skip


async def _populate(ports: Ports) -> None:
    """Each user: three facts, a knowledge fragment derived from their event,
    two events, triples in two loops, a profile cache entry, a checkpoint and
    their domain's digest."""
    assert ports.events is not None
    assert ports.cache is not None
    assert ports.triples is not None
    now = datetime.now(UTC).replace(microsecond=0)
    dim = ports.store.space.dimension
    for user, domain in DOMAINS.items():
        await ports.store.add(
            [_record(user, f"f{i}", "assistant", dim, now - timedelta(seconds=i)) for i in range(3)]
            + [_record(domain, f"k-{user}", KNOWLEDGE_NAMESPACE, dim, now, user_id=user)]
        )
        await ports.events.append(
            [
                Event(
                    id=f"e{i}-{user}",
                    domain=domain,
                    agent="a",
                    action="act",
                    outcome="ok",
                    summary=f"{user} asked",
                    occurred_at=now - timedelta(minutes=i + 1),
                    recorded_at=now,
                    entities=(Entity("pod", "web"),),
                    user_id=user,
                )
                for i in range(2)
            ]
        )
        await ports.triples.add(
            [
                Triple(user, loop, user, "uses", f"tool-{loop}", created_at=now)
                for loop in ("l1", "l2")
            ]
        )
        await ports.cache.put(user_cache_scope(user), "profile", user.encode())
        await ports.cache.put(CHECKPOINT_SCOPE, checkpoint_key(user, "l1") + "/1", user.encode())
        await ports.cache.put(domain, DIGEST_KEY, f"digest of {user}".encode())


async def _write_file(tmp_path: Path, *, reembedded: bool = False) -> str:
    """An export of both users (from a SQLite source re-embedded from 256 to 64
    dimensions first, when `reembedded`)."""
    s = settings(tmp_path, embedder="hashing")
    source = f"sqlite:///{tmp_path}/source-{uuid.uuid4().hex[:6]}.db"
    async with open_ports(source, space=await reading_space(source, s), settings=s) as ports:
        await _populate(ports)
    if reembedded:
        assert (await reembed(source, to_model="hashing", dimension=64, settings=s)).complete
    path = str(tmp_path / f"file-{uuid.uuid4().hex[:6]}.jsonl")
    await export(source, path, settings=s)
    return path


# -- the target -------------------------------------------------------------------------


KINDS = ["memory", "sqlite", "postgres", "redis"]


def _with_kinds(name: str, values: list[str]) -> pytest.MarkDecorator:
    """Parametrize `kind` (indirectly) and `name` over every pair but those a
    backend cannot hold: Redis keeps no triples (not a skip: no such case)."""
    pairs = [(k, v) for k in KINDS for v in values if not (k == "redis" and v.startswith("triple"))]
    return pytest.mark.parametrize(("kind", name), pairs, indirect=["kind"])


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    """The target's backend; the server's URL for PostgreSQL and Redis."""
    if request.param in ("postgres", "redis"):
        return str(request.getfixturevalue(f"{request.param}_url"))
    return str(request.param)


@contextlib.asynccontextmanager
async def _target(kind: str, tmp_path: Path, path: str) -> AsyncIterator[Ports]:
    """A fresh, empty deployment of `kind` (every port of it, in the file's space)."""
    s = settings(tmp_path, embedder="hashing")
    space = read_header(path).spaces[0]
    if kind == "memory":
        async with connect("memory://", settings=s, embedder=HashingEmbedder(space.dimension)) as m:
            yield ports_of(m, InMemoryTripleStore())
        return
    url = f"sqlite:///{tmp_path}/t-{uuid.uuid4().hex[:8]}.db" if kind == "sqlite" else kind
    async with open_ports(url, space=space, settings=s) as ports:
        yield ports


# -- turns ------------------------------------------------------------------------------

#: Chooses which side takes the next step, given what each waiting side is
#: about to call (`port.method`).
Pick = Callable[[dict[str, str]], str]


class _Turns:
    """Runs coroutines side by side, one port call at a time: each side waits at
    every port call (`gate`) until `pick` chooses it among the sides waiting."""

    def __init__(self, pick: Pick) -> None:
        self._pick = pick
        self._waiting: dict[str, tuple[asyncio.Event, str]] = {}
        self._running = 0
        self._changed = asyncio.Event()
        self._free = False
        self.steps: list[str] = []

    async def gate(self, side: str, what: str) -> None:
        if self._free:
            return
        go = asyncio.Event()
        self._waiting[side] = (go, what)
        self._running -= 1
        self._changed.set()
        await go.wait()
        self.steps.append(f"{side}:{what}")

    async def run(self, **sides: Awaitable[Any]) -> dict[str, Any]:
        async def side(work: Awaitable[Any]) -> Any:
            try:
                return await work
            finally:
                self._running -= 1
                self._changed.set()

        self._running = len(sides)
        tasks = {name: asyncio.ensure_future(side(work)) for name, work in sides.items()}
        try:
            while True:
                while self._running > 0:
                    self._changed.clear()
                    await self._changed.wait()
                if not self._waiting:
                    break
                chosen = self._pick({s: what for s, (_, what) in self._waiting.items()})
                go, _ = self._waiting.pop(chosen)
                self._running += 1
                go.set()
        except BaseException:
            # `pick` gave up (hypothesis ran out of data): let both sides finish
            # freely, so that no task is left pending
            self._free = True
            for go, _ in self._waiting.values():
                go.set()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            raise
        return {name: task.result() for name, task in tasks.items()}


class _Gated:
    """A port whose every coroutine method waits for its side's turn first."""

    def __init__(self, inner: Any, turns: _Turns, side: str, label: str) -> None:
        self._inner, self._turns, self._side, self._label = inner, turns, side, label

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            await self._turns.gate(self._side, f"{self._label}.{name}")
            return await attr(*args, **kwargs)

        return call


def _gated(ports: Ports, turns: _Turns, side: str) -> Ports:
    def g(port: Any, label: str) -> Any:
        return None if port is None else _Gated(port, turns, side, label)

    return Ports(
        store=g(ports.store, "store"), events=g(ports.events, "events"),
        cache=g(ports.cache, "cache"), leases=g(ports.leases, "leases"),
        triples=g(ports.triples, "triples"), backend=ports.backend,
        audit=g(ports.audit, "audit"),
    )  # fmt: skip


def _forgetter(ports: Ports) -> UserMemory:
    clock = SystemClock()
    return UserMemory(
        store=ports.store, embedder=HashingEmbedder(ports.store.space.dimension), clock=clock,
        events=ports.events, cache=ports.cache, triples=ports.triples,
        audit=AuditTrail(ports.audit, clock),
    )  # fmt: skip


def _forget_at(call: str, nth: int = 1) -> Pick:
    """The import runs until it is about to make its `nth` call `call`; the
    forget then runs to its end, and the import goes on."""
    seen = 0
    fire = False

    def pick(waiting: dict[str, str]) -> str:
        nonlocal seen, fire
        if "import" in waiting and waiting["import"] == call and not fire:
            seen += 1
            fire = seen >= nth
        if "forget" in waiting and (fire or "import" not in waiting):
            return "forget"
        return "import"

    return pick


def _forget_paused_at(call: str) -> Pick:
    """The forget runs first until it is about to make call `call`; the import
    then runs to its end, and the forget goes on."""

    def pick(waiting: dict[str, str]) -> str:
        if "import" in waiting and waiting.get("forget", call) == call:
            return "import"
        return "forget" if "forget" in waiting else "import"

    return pick


async def _race(
    kind: str, tmp_path: Path, path: str, pick: Pick, batch_size: int = 2
) -> tuple[list[str], list[str], list[str]]:
    """Import `path` into a fresh target of `kind` while alice is forgotten
    there, in the order `pick` gives; what the target then holds of alice's
    and of bob's items, and the steps taken."""
    skip = ("triples",) if kind.startswith("redis") else ()
    async with _target(kind, tmp_path, path) as ports:
        turns = _Turns(pick)
        importing = import_file(
            _gated(ports, turns, "import"), path, batch_size=batch_size, resume=False, skip=skip
        )
        forgetting = _forgetter(_gated(ports, turns, "forget")).forget(ALICE)
        done = await turns.run(importing=importing, forget=forgetting)
        assert done["importing"].complete
        assert done["forget"].complete, done["forget"].failures
        return await _held(ports, path, ALICE), await _held(ports, path, BOB), turns.steps


# -- what the target holds ----------------------------------------------------------------


async def _held(ports: Ports, path: str, user: str) -> list[str]:
    """The file's items of `user` (what `users.forget(user)` removes) that the
    target holds, as the file has them."""
    items = read_items(path)
    events = tuple(i for i in items if isinstance(i, Event) and i.user_id == user)
    loops = frozenset((t.owner, t.loop) for t in items if isinstance(t, Triple) and t.owner == user)
    theirs = ForgottenUsers(frozenset({user}), events, loops)
    found: list[str] = []
    assert ports.events is not None
    assert ports.cache is not None
    for item in items:
        if isinstance(item, RecordItem) and theirs.holds_record(item.record):
            r = item.record
            if await ports.store.get(r.owner, r.id) is not None:
                found.append(f"record {r.owner}/{r.id}")
        elif (
            isinstance(item, CacheItem)
            and theirs.holds_cache(item.scope, item.key)
            and await ports.cache.get(item.scope, item.key) is not None
        ):
            found.append(f"cache {item.scope}/{item.key}")
    found += [f"event {e.id}" for e in await ports.events.user_events(user)]
    if ports.triples is not None:
        found += [f"triple {t.loop}" for t in await ports.triples.query(user, limit=100)]
    return sorted(found)


def _expected(path: str, user: str, *, triples: bool) -> list[str]:
    items = read_items(path)
    events = tuple(i for i in items if isinstance(i, Event) and i.user_id == user)
    loops = frozenset((t.owner, t.loop) for t in items if isinstance(t, Triple) and t.owner == user)
    theirs = ForgottenUsers(frozenset({user}), events, loops)
    out = []
    for item in items:
        if isinstance(item, RecordItem) and theirs.holds_record(item.record):
            out.append(f"record {item.record.owner}/{item.record.id}")
        elif isinstance(item, CacheItem) and theirs.holds_cache(item.scope, item.key):
            out.append(f"cache {item.scope}/{item.key}")
        elif isinstance(item, Event) and item.user_id == user:
            out.append(f"event {item.id}")
        elif isinstance(item, Triple) and item.owner == user and triples:
            out.append(f"triple {item.loop}")
    return sorted(out)


# -- a forget completing while a batch is stored ---------------------------------------


@pytest.fixture(scope="module")
def file(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("file")
    return asyncio.run(_write_file(tmp))


@_with_kinds("call", ["store.add", "events.append", "triples.add", "cache.put"])
async def test_a_batch_stored_while_the_forget_ran_is_removed_whatever_its_kind(
    kind: str, tmp_path: Path, file: str, call: str
) -> None:
    """The forget runs whole between the import's check of the trail and the
    store of a batch of alice's items (of each kind): the batch lands after the
    forget deleted, so the import must remove it at its end. When this fails,
    the forgotten user's items of that kind (triples, cache entries) survived."""
    alice, bob, steps = await _race(kind, tmp_path, file, _forget_at(call))
    assert f"import:{call}" in steps
    assert alice == [], steps
    assert bob == _expected(file, BOB, triples=not kind.startswith("redis"))


async def _write_after_the_forget(ports: Ports, loop: str) -> None:
    """What alice tells after her forget: a fact, a profile, a triple in `loop`."""
    assert ports.cache is not None
    dim = ports.store.space.dimension
    now = datetime.now(UTC)
    await ports.store.add([_record(ALICE, "after", "assistant", dim, now)])
    await ports.cache.put(user_cache_scope(ALICE), "profile", b"told after the forget")
    if ports.triples is not None:
        await ports.triples.add([Triple(ALICE, loop, ALICE, "likes", "tea", created_at=now)])


@pytest.mark.parametrize("loop", ["l1", "l3"])
async def test_what_the_user_writes_after_the_forget_is_kept_by_the_removal(
    kind: str, tmp_path: Path, file: str, loop: str
) -> None:
    """The forget runs whole just before the import stores its triples; then
    alice writes a fact, her profile and a triple (in a loop of the file's, or
    a new one); then the import ends and removes what it wrote of hers. Her
    new writes stay; of the file's items only a loop she wrote in again stays
    (the triple store deletes per loop, not per triple). When this fails, the
    removal deleted data written after the forget, or left the file's."""
    redis = kind.startswith("redis")
    skip = ("triples",) if redis else ()
    async with _target(kind, tmp_path, file) as ports:
        fired = {"now": False}

        def pick(waiting: dict[str, str]) -> str:
            fired["now"] = fired["now"] or waiting.get("import") == (
                "cache.put" if redis else "triples.add"
            )
            for side in ("forget", "writer") if fired["now"] else ():
                if side in waiting:
                    return side
            return "import" if "import" in waiting else sorted(waiting)[0]

        turns = _Turns(pick)  # the writer waits at its first call until the forget is done
        done = await turns.run(
            importing=import_file(_gated(ports, turns, "import"), file, batch_size=2, skip=skip),
            forget=_forgetter(_gated(ports, turns, "forget")).forget(ALICE),
            writer=_write_after_the_forget(_gated(ports, turns, "writer"), loop),
        )
        assert done["importing"].complete
        assert done["forget"].complete
        assert turns.steps.index("writer:store.add") > turns.steps.index("forget:audit.append")
        left = await _held(ports, file, ALICE)
        profile = f"cache {user_cache_scope(ALICE)}/profile"  # her new one
        triples = [] if redis else ["triple l1"] * (loop == "l1") + [f"triple {loop}"]
        assert left == sorted([profile, *triples]), turns.steps
        assert await ports.store.get(ALICE, "after") is not None
        assert ports.cache is not None
        assert await ports.cache.get(user_cache_scope(ALICE), "profile") == b"told after the forget"
        assert await _held(ports, file, BOB) == _expected(file, BOB, triples=not redis)


class _ForgetThenCrash:
    """The target's store: alice's forget runs whole just before the first
    batch holding her records is stored, and the next batch fails (the
    importing process dies) — while `armed`."""

    def __init__(self, ports: Ports) -> None:
        self._ports, self._store = ports, ports.store
        self.armed, self.forgot = True, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def add(self, batch: list[MemoryRecord]) -> None:
        if self.armed and self.forgot:
            raise ConnectionError("the importing process died")
        if self.armed and any(r.owner == ALICE for r in batch):
            assert (await _forgetter(self._ports).forget(ALICE)).complete
            self.forgot = True
        await self._store.add(batch)


async def test_a_resumed_import_removes_what_the_interrupted_run_wrote_after_the_forget(
    kind: str, tmp_path: Path, file: str
) -> None:
    """The first run stores a batch of alice's records after her forget deleted
    them and dies before its end (where it would have removed them); the
    second run resumes after that batch, reads the forget on the trail and
    leaves her later items out. When this fails, the first run's batch of the
    forgotten user survived: the resumed run removed nothing, since she was
    forgotten before it started."""
    skip = ("triples",) if kind.startswith("redis") else ()
    async with _target(kind, tmp_path, file) as ports:
        store = _ForgetThenCrash(ports)
        target = attrs.evolve(ports, store=store)
        with pytest.raises(ImportFailed):
            await import_file(target, file, batch_size=2, skip=skip)
        assert store.forgot
        store.armed = False
        summary = await import_file(target, file, batch_size=2, skip=skip)
        assert summary.complete
        assert summary.resumed_after > 0
        assert await _held(ports, file, ALICE) == []
        assert await _held(ports, file, BOB) == _expected(file, BOB, triples=not skip)


# -- a forget still running when the import ends ----------------------------------------

#: The calls a whole-user forget makes, in order (the first of each): pausing
#: it before one lets the import run whole in between.
FORGET_CALLS = [
    "events.user_events",
    "store.delete_scope",
    "events.erase_user",
    "cache.delete_prefix",
    "triples.query",
    "audit.append",
]


@_with_kinds("call", FORGET_CALLS)
async def test_a_forget_still_running_when_the_import_ends_leaves_nothing_behind(
    kind: str, tmp_path: Path, file: str, call: str
) -> None:
    """The forget has started (it read the user's lineage, deleted some of
    their data) and is paused before `call` while the whole import runs; then
    it goes on to its end. Its audit entry comes after the import's last check,
    so the import cannot learn of it from the trail. When this fails, what the
    import wrote before the forget reached that kind survived the forget."""
    alice, bob, steps = await _race(kind, tmp_path, file, _forget_paused_at(call))
    assert f"forget:{call}" in steps
    assert alice == [], steps
    assert bob == _expected(file, BOB, triples=not kind.startswith("redis"))


# -- any order ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reembedded_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("reembedded")
    path = asyncio.run(_write_file(tmp, reembedded=True))
    assert read_header(path).spaces[0].dimension == 64  # the space after the switch
    return path


async def _any_order(kind: str, tmp_path: Path, path: str, data: Any) -> None:
    """Hypothesis picks, at every port call, whether the import or the forget
    takes the next step. Afterwards the target holds nothing of alice's and all
    of bob's; when it does not, the steps in the message show the order."""
    # runs: the side chosen takes that many steps before the other gets one
    # (so either can run whole, or almost, while the other waits mid-way)
    turn = {"side": data.draw(st.sampled_from(["import", "forget"])), "left": 0}
    turn["left"] = data.draw(st.integers(0, 120))

    def pick(waiting: dict[str, str]) -> str:
        if len(waiting) == 1:
            return next(iter(waiting))
        if turn["left"] <= 0:
            turn["side"] = "forget" if turn["side"] == "import" else "import"
            turn["left"] = data.draw(st.integers(0, 120))
        turn["left"] -= 1
        return turn["side"]

    alice, bob, steps = await _race(kind, tmp_path, path, pick, batch_size=3)
    assert alice == [], steps
    assert bob == _expected(path, BOB, triples=not kind.startswith("redis")), steps


@pytest.mark.parametrize("embedded", ["memory", "sqlite"])
@pytest.mark.parametrize("reembedded", [False, True], ids=["one-space", "reembedded"])
@hsettings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_in_any_order_the_forgotten_user_stays_forgotten_and_the_rest_arrives(
    embedded: str, tmp_path: Path, file: str, reembedded_file: str, reembedded: bool, data: Any
) -> None:
    """Any order of the import's and the forget's steps, on the embedded
    backends (the file's source re-embedded to another space before it was
    exported, in one variant): nothing of alice's stays, all of bob's arrives."""
    await _any_order(embedded, tmp_path, reembedded_file if reembedded else file, data)


@pytest.mark.parametrize("server", ["postgres", "redis"])
@pytest.mark.parametrize("reembedded", [False, True], ids=["one-space", "reembedded"])
@hsettings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_in_any_order_on_the_servers_too(
    request: pytest.FixtureRequest,
    server: str,
    tmp_path: Path,
    file: str,
    reembedded_file: str,
    reembedded: bool,
    data: Any,
) -> None:
    """The same on PostgreSQL and Redis (a fresh deployment per example costs a
    schema: fewer examples; the fixed orders above cover every phase there)."""
    url = str(request.getfixturevalue(f"{server}_url"))
    await _any_order(url, tmp_path, reembedded_file if reembedded else file, data)


# -- migrate while the source changes -----------------------------------------------------


class _ChangesTheSource:
    """The target's store; right after the migrate's first record batch is
    stored there, `change` runs on the source (a writer that did not stop)."""

    def __init__(self, store: Any, change: Callable[[], Awaitable[None]]) -> None:
        self._store, self._change, self.changed = store, change, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def add(self, batch: list[MemoryRecord]) -> None:
        await self._store.add(batch)
        if not self.changed:
            self.changed = True
            await self._change()


async def _update(ports: Ports) -> None:
    stored = await ports.store.get(BOB, "f0")
    assert stored is not None
    later = stored.updated_at + timedelta(seconds=1)
    await ports.store.update(attrs.evolve(stored, content="bob changed his mind", updated_at=later))


async def _delete(ports: Ports) -> None:
    assert await ports.store.delete(BOB, "f1")


async def _forget(ports: Ports) -> None:
    assert (await _forgetter(ports).forget(ALICE)).complete


async def _drop_loop(ports: Ports) -> None:
    assert ports.triples is not None
    assert await ports.triples.delete_scope(BOB, loop="l2") == 1


CHANGES: dict[str, tuple[Callable[[Ports], Awaitable[None]], tuple[str, ...], str]] = {
    # what changes on the source, the ports left out, a word the report names
    "update": (_update, (), "'bob'/'f0'"),
    "delete": (_delete, (), "'bob'"),
    "forget": (_forget, (), "audit"),
    "forget-no-audit": (_forget, ("audit",), "'alice'"),
    "triples": (_drop_loop, (), "triples exported"),
}


@pytest.mark.parametrize("reembedded", [False, True], ids=["one-space", "reembedded"])
@_with_kinds("change", sorted(CHANGES))
async def test_a_migrate_whose_source_changed_meanwhile_is_not_verified(
    kind: str, tmp_path: Path, change: str, reembedded: bool
) -> None:
    """A writer changes the source after the export read it, while the import
    writes (a record updated or deleted, a user forgotten, a loop's triples
    dropped; the source re-embedded into another space first, in one variant).
    The target then holds the source's old state: the migrate must not say
    "verified". When this fails, verification compared the target with the
    export (or with counts the change does not move), not with what the source
    holds at the end."""
    act, skip, named = CHANGES[change]
    if kind.startswith("redis"):
        skip = (*skip, "triples")
    s = settings(tmp_path, embedder="hashing")
    source = f"sqlite:///{tmp_path}/source.db"
    async with open_ports(source, space=await reading_space(source, s), settings=s) as ports:
        await _populate(ports)
    if reembedded:
        assert (await reembed(source, to_model="hashing", dimension=64, settings=s)).complete
    space = await reading_space(source, s)
    async with (
        open_ports(source, space=space, settings=s) as src,
        _target_in(kind, tmp_path, space) as dst,
    ):
        store = _ChangesTheSource(dst.store, lambda: act(src))
        with pytest.raises(VerificationFailed) as caught:
            await migrate(source, attrs.evolve(dst, store=store), settings=s, skip=skip)
        assert store.changed
    assert any(named in p for p in caught.value.problems), caught.value.problems


@contextlib.asynccontextmanager
async def _target_in(kind: str, tmp_path: Path, space: Any) -> AsyncIterator[Ports]:
    s = settings(tmp_path, embedder="hashing")
    if kind == "memory":
        async with connect("memory://", settings=s, embedder=HashingEmbedder(space.dimension)) as m:
            yield ports_of(m, InMemoryTripleStore())
        return
    url = f"sqlite:///{tmp_path}/t-{uuid.uuid4().hex[:8]}.db" if kind == "sqlite" else kind
    async with open_ports(url, space=space, settings=s) as ports:
        yield ports

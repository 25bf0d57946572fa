"""The per-item writer lease of `AgentMemoryStore` when a writer process dies,
stalls, or is paused while it holds the lease (sqlite, redis, postgres).

Writers of one item in different processes are serialised by a lease on the
item (scope `langgraph.writers`). These tests put a worker process inside that
critical section (its MemoryStore stalls on the write of the item record), then:

- SIGKILL it: the next put of the item from another process waits for the
  lease at most about one lease TTL (`_WRITER_TTL`), and at least part of it
  (the dead holder's lease is honoured, not ignored);
- let it stall, alive, for several TTLs: it keeps its lease (the holder renews
  it while its write runs), so a put from another process waits and lands after
  it, never in the middle;
- SIGSTOP it past the TTL, let another process put, then SIGCONT it: its write
  of the item record, already past every check, lands late over the newer
  value; the holder finds its lease lost and redoes its put under a new lease,
  so the item ends as one write's value with exactly that value's vectors.

And, in one process with hypothesis choosing the point: a writer whose lease is
taken from it just before any one of its record writes, while another writer
puts or deletes the item, still leaves the item as one write's.

Qdrant is left out as in test_langgraph_processes_hunt.py (its local mode locks
its directory to one process).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import agent_memory
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Memory, Settings
from agent_memory.domain.langgraph_layout import owner_of
from agent_memory.entrypoints.langgraph import store as store_module
from agent_memory.entrypoints.langgraph.store import (
    ITEM_KIND,
    VECTOR_KIND,
    record_namespace_of,
)
from agent_memory.langgraph import AgentMemoryStore

DIMENSION = 32
BACKENDS = ["sqlite", "redis", "postgres"]
FIELDS = ["a", "b", "c"]
INDEX: dict[str, Any] = {"fields": FIELDS}
SHORT_TTL = 1.0  # seconds: the lease TTL of the stall and pause tests
BRIEF = 10.0  # seconds: the longest a dead writer may block an item ("briefly")
SCOPE = "langgraph.writers"


# -- the worker processes ------------------------------------------------------------
def _warm() -> None:
    import agent_memory.adapters.postgres
    import agent_memory.adapters.redis
    import agent_memory.adapters.sqlite
    import agent_memory.langgraph  # noqa: F401


def _noop(_: int) -> int:
    return os.getpid()


def _open(url: str, deployment: str) -> Any:
    return agent_memory.connect(
        url, settings=Settings(deployment=deployment), embedder=HashingEmbedder(DIMENSION)
    )


def _signal(path: str) -> None:
    """Tell the test this worker is in the critical section: its pid, in a file."""
    Path(path).write_text(str(os.getpid()))


class _StallOnItem:
    """The worker's MemoryStore: the first `update` of the item record `key`
    (the write that replaces an existing item) writes the worker's pid to
    `signal_path`, then sleeps `stall` seconds before it goes through."""

    def __init__(self, store: Any, key: str, signal_path: str, stall: float) -> None:
        self._store, self._key, self._path, self._stall = store, key, signal_path, stall
        self._stalled = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def update(self, record: Any) -> None:
        meta = record.attributes.get("langgraph", {})
        if not self._stalled and record.kind == ITEM_KIND and meta.get("key") == self._key:
            self._stalled = True
            _signal(self._path)
            await asyncio.sleep(self._stall)
        await self._store.update(record)


def _holder(
    url: str,
    deployment: str,
    ns: list[str],
    key: str,
    value: dict[str, Any],
    ttl: float | None,
    stall: float,
    signal_path: str,
) -> float:
    """Put `value`, stalling `stall` s inside the item's critical section (with
    the writer lease TTL set to `ttl` s, when given); when the put returned."""
    if ttl is not None:
        store_module._WRITER_TTL = timedelta(seconds=ttl)

    async def main() -> float:
        async with _open(url, deployment) as memory:
            memory.stores.store = _StallOnItem(memory.stores.store, key, signal_path, stall)
            store = AgentMemoryStore(memory, index=INDEX)
            await store.aput(tuple(ns), key, value)
            return time.time()

    return asyncio.run(main())


@pytest.fixture(scope="module")
def pool() -> Iterator[Any]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(len(BACKENDS), initializer=_warm) as workers:
        workers.map(_noop, range(len(BACKENDS)))
        yield workers


@pytest.fixture
def short_ttl(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(store_module, "_WRITER_TTL", timedelta(seconds=SHORT_TTL))
    return SHORT_TTL


def _url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'lg.db'}"
    if backend == "redis":
        return str(request.getfixturevalue("redis_url"))
    return str(request.getfixturevalue("postgres_url"))


def _wait_for_pid(path: Path, pending: Any, timeout: float = 30.0) -> int:
    """The pid a worker wrote once inside the critical section."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        if pending.ready():
            pending.get()  # raises the worker's error
            raise AssertionError("the worker finished without entering the critical section")
        time.sleep(0.01)
    raise AssertionError("the worker never entered the critical section")


# -- the checks ----------------------------------------------------------------------
def _value(tag: str, n: int) -> dict[str, Any]:
    return {f: f"{tag} {f} {uuid.uuid4().hex[:8]}" for f in FIELDS[:n]}


def _texts(value: dict[str, Any]) -> list[str]:
    return sorted(value[f] for f in FIELDS if isinstance(value.get(f), str))


async def _check_one_write(
    memory: Memory, store: AgentMemoryStore, ns: tuple[str, ...], key: str
) -> dict[str, Any]:
    """The item's records are one write's: its vector records are exactly its
    value's texts, each embedded as itself, and a search by each text scores
    the item as that text. The final value."""
    page = await memory.store.list(owner_of(ns), namespace=record_namespace_of(ns), limit=500)
    items = [r for r in page.records if r.kind == ITEM_KIND]
    vectors = [r for r in page.records if r.kind == VECTOR_KIND]
    assert len(items) == 1, f"{len(items)} item records for one key"
    value: dict[str, Any] = items[0].attributes["langgraph"]["value"]
    got = sorted(v.content for v in vectors)
    assert got == _texts(value), (
        f"the item holds {value!r} but its vector records embed {got!r} "
        "(another write's vectors kept beside it)"
    )
    assert items[0].attributes["langgraph"]["vectors"] == len(vectors)
    embedder = HashingEmbedder(DIMENSION)
    for v in vectors:
        want = np.asarray((await embedder.embed([v.content]))[0], dtype=np.float32)
        assert np.allclose(v.vector, want, atol=1e-5), f"vector of {v.content!r} is another text's"
    for text in _texts(value):
        hits = await store.asearch(ns, query=text)
        assert [h.key for h in hits] == [key]
        assert hits[0].score is not None, f"search by {text!r} scores nothing"
        assert hits[0].score > 0.999, f"search by {text!r} scores {hits[0].score}"
    return value


# -- the tests -----------------------------------------------------------------------
async def test_writers_killed_holding_the_lease_block_their_items_about_one_ttl(
    pool: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """On each backend (all three at once, to spend one TTL in all), a worker
    SIGKILLed inside an item's critical section leaves its lease behind: the
    next put of the item from another process waits for it to run out, i.e. at
    most one lease TTL (plus polling) and at most BRIEF seconds (the lease used
    to last 30 s, because it was not renewed and had to cover a whole write);
    and it does wait (the dead holder's lease is honoured). When it fails by
    timing out: the lease lasts too long."""
    ttl = store_module._WRITER_TTL.total_seconds()
    ns, key = ("erin", "memories"), "k"
    async with contextlib.AsyncExitStack() as stack:
        memories, stores, pids = {}, {}, {}
        for backend in BACKENDS:
            url, deployment = _url(backend, request, tmp_path), f"lgd-{uuid.uuid4().hex[:10]}"
            memory = memories[backend] = await stack.enter_async_context(_open(url, deployment))
            store = stores[backend] = AgentMemoryStore(memory, index=INDEX)
            await store.aput(ns, key, _value("first", 2))
            signal_path = tmp_path / f"in-section-{backend}"
            dead = _value("dead", 1)
            pending = pool.apply_async(
                _holder, (url, deployment, list(ns), key, dead, None, 3600.0, str(signal_path))
            )
            pids[backend] = _wait_for_pid(signal_path, pending)
        for backend, memory in memories.items():
            held = await memory.leases.get(SCOPE, store_module._item_id(ns, key))
            assert held is not None, f"{backend}: the item's lease is not held"
            assert held.owner.startswith(f"{pids[backend]}:"), (
                f"{backend}: the worker in the critical section does not hold the lease: {held}"
            )
        for pid in pids.values():
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        last = {backend: _value("last", 3) for backend in BACKENDS}

        async def put(backend: str) -> float:
            try:
                await asyncio.wait_for(stores[backend].aput(ns, key, last[backend]), BRIEF)
            except TimeoutError:
                pytest.fail(
                    f"{backend}: a put waited over {BRIEF} s for a dead writer (TTL {ttl} s)"
                )
            return time.monotonic() - killed

        waits = dict(zip(BACKENDS, await asyncio.gather(*map(put, BACKENDS)), strict=True))
        for backend, waited in waits.items():
            assert waited <= ttl + 1.5, (
                f"{backend}: the put waited {waited:.2f} s for a dead writer's lease (TTL {ttl} s)"
            )
            assert waited >= ttl / 3, (
                f"{backend}: the put took the item {waited:.2f} s after its holder died: the "
                f"lease (TTL {ttl} s, renewed every {ttl / 3:.2f} s) was not honoured"
            )
            final = await _check_one_write(memories[backend], stores[backend], ns, key)
            assert final == last[backend]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_live_writer_stalling_past_the_ttl_is_never_overtaken(
    pool: Any, backend: str, request: pytest.FixtureRequest, tmp_path: Path, short_ttl: float
) -> None:
    """A worker whose write stalls for 2 TTLs, alive, keeps the item's lease
    (it renews it while the write runs): a put of the item from another process
    started meanwhile waits and lands after it, so the later put's value is the
    final one and the item is one write's. When it fails: the lease ran out under
    a live writer (not renewed), and the other put wrote in the middle of its write."""
    url, deployment = _url(backend, request, tmp_path), f"lgd-{uuid.uuid4().hex[:10]}"
    ns, key = ("frank", "memories"), "k"
    signal_path = tmp_path / "in-section"
    async with _open(url, deployment) as memory:
        store = AgentMemoryStore(memory, index=INDEX)
        await store.aput(ns, key, _value("first", 2))
        slow = _value("slow", 1)
        pending = pool.apply_async(
            _holder,
            (url, deployment, list(ns), key, slow, short_ttl, 2.0 * short_ttl, str(signal_path)),
        )
        _wait_for_pid(signal_path, pending)
        later = _value("later", 3)
        await store.aput(ns, key, later)
        landed = time.time()
        slow_done = await asyncio.to_thread(pending.get, 60)
        assert slow_done <= landed, (
            f"the put landed {slow_done - landed:.2f} s before the stalled writer's returned: "
            "it overtook a live lease holder"
        )
        assert await _check_one_write(memory, store, ns, key) == later


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_writer_paused_past_its_lease_leaves_no_stale_write(
    pool: Any, backend: str, request: pytest.FixtureRequest, tmp_path: Path, short_ttl: float
) -> None:
    """A worker SIGSTOPped just before its write of the item record lands (past
    every check it makes) loses its lease; another process puts a value of three
    texts meanwhile; SIGCONT lets the stale write land over it. The worker must
    notice it lost the lease and redo its put under a new one: the item ends as
    one write's value with exactly that value's vectors, never the paused
    writer's value beside the other write's vectors. When it fails: a holder
    that lost its lease finished its write (no fencing), or redid it without
    sweeping the vector records another write left."""
    url, deployment = _url(backend, request, tmp_path), f"lgd-{uuid.uuid4().hex[:10]}"
    ns, key = ("grace", "memories"), "k"
    signal_path = tmp_path / "in-section"
    async with _open(url, deployment) as memory:
        store = AgentMemoryStore(memory, index=INDEX)
        await store.aput(ns, key, _value("first", 2))
        paused = _value("paused", 1)
        pending = pool.apply_async(
            _holder, (url, deployment, list(ns), key, paused, short_ttl, 0.3, str(signal_path))
        )
        pid = _wait_for_pid(signal_path, pending)
        os.kill(pid, signal.SIGSTOP)
        try:
            newer = _value("newer", 3)
            await asyncio.wait_for(store.aput(ns, key, newer), timeout=short_ttl + 10)
            await asyncio.sleep(0.3)  # the paused writer's stall is over: it writes at once
        finally:
            os.kill(pid, signal.SIGCONT)
        await asyncio.to_thread(pending.get, 60)  # its put succeeds
        final = await _check_one_write(memory, store, ns, key)
        assert final == paused, (
            "the paused writer's put returned before its value was the item's "
            f"(final {final!r}): its late write was not redone"
        )


# -- in one process: the lease lost before any one record write ------------------------
class _LoseLeaseAt:
    """Writer A's MemoryStore: just before A's `at`-th record write (add, update
    or delete), A's writer lease is released from under it (as if it expired
    while A stalled) and writer B's op runs to completion; then A's write lands."""

    def __init__(self, store: Any, at: int, meanwhile: Any) -> None:
        self._store, self._at, self._meanwhile = store, at, meanwhile
        self._writes, self.fired = 0, False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in ("add", "update", "delete"):
            return attr

        async def write(*args: Any, **kwargs: Any) -> Any:
            if self._writes == self._at and not self.fired:
                self.fired = True
                await self._meanwhile()
            self._writes += 1
            return await attr(*args, **kwargs)

        return write


_OPS = st.one_of(st.none(), st.integers(0, 3))  # None: delete; n: a value of n texts


def _op_value(tag: str, op: int | None) -> dict[str, Any] | None:
    if op is None:
        return None
    return {"z": f"{tag} unindexed"} if op == 0 else _value(tag, op)


async def _apply(store: AgentMemoryStore, ns: tuple[str, ...], key: str, value: Any) -> None:
    if value is None:
        await store.adelete(ns, key)
    else:
        await store.aput(ns, key, value)


async def _lose_lease_scenario(
    url: str, first: int | None, a_op: int | None, b_op: int | None, at: int
) -> bool:
    ns, key = ("heidi", "memories"), "k"
    item_id = store_module._item_id(ns, key)
    async with _open(url, f"lgd-{uuid.uuid4().hex[:10]}") as memory:
        b_store = AgentMemoryStore(memory, index=INDEX)  # on the plain MemoryStore
        await _apply(b_store, ns, key, _op_value("first", first))
        a_value, b_value = _op_value("a", a_op), _op_value("b", b_op)

        async def meanwhile() -> None:
            held = await memory.leases.get(SCOPE, item_id)
            assert held is not None, "writer A writes without holding the item's lease"
            assert await memory.leases.release(SCOPE, item_id, held.owner)
            await _apply(b_store, ns, key, b_value)

        raw = memory.stores.store
        lose = memory.stores.store = _LoseLeaseAt(raw, at, meanwhile)
        a_store = AgentMemoryStore(memory, index=INDEX)
        memory.stores.store = raw
        await _apply(a_store, ns, key, a_value)
        if not lose.fired:
            return False
        # A's call returned after B's: A's op is the last one, and whole
        if a_value is None:
            assert await b_store.aget(ns, key) is None, "a deleted item is back"
            page = await raw.list(owner_of(ns), namespace=record_namespace_of(ns), limit=500)
            left = [r.content for r in page.records if r.kind in (ITEM_KIND, VECTOR_KIND)]
            assert not left, f"records of a deleted item left: {left}"
        else:
            assert await _check_one_write(memory, b_store, ns, key) == a_value
        return True


@pytest.mark.parametrize("backend", ["memory", *BACKENDS])
def test_a_lease_lost_before_any_record_write_leaves_one_write(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Writer A loses the item's lease just before its `at`-th record write (a
    put or delete is several), writer B (another store on the same deployment)
    puts or deletes the item meanwhile, then A's late write lands: A must find
    its lease lost and redo its op, so the item ends as A's op left it, with
    exactly the vectors of its value. When it fails: a writer finished a write
    whose lease it lost, or its redo kept vector records of B's write."""
    if backend == "memory":
        urls = iter(lambda: f"memory://lgd-{uuid.uuid4().hex}", None)
    elif backend == "sqlite":
        urls = iter(lambda: f"sqlite:///{tmp_path / uuid.uuid4().hex}.db", None)
    else:
        url = _url(backend, request, tmp_path)
        urls = iter(lambda: url, None)

    @settings(
        max_examples=8 if backend in ("redis", "postgres") else 15,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(first=_OPS, a_op=_OPS, b_op=_OPS, at=st.integers(0, 5))
    def run(first: int | None, a_op: int | None, b_op: int | None, at: int) -> None:
        assume(asyncio.run(_lose_lease_scenario(next(urls), first, a_op, b_op, at)))

    run()

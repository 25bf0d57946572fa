"""`AgentMemoryStore` written by several PROCESSES on one server backend at once.

A deployment runs its graph in several worker processes (gunicorn, a job queue,
multiprocessing) against one SQLite file, Redis or PostgreSQL. The store's
per-item lock lives in one process; these tests drive the same (namespace, key)
from worker processes started with the `spawn` method and then check the
LangGraph contract on what is left:

- no call raises (LangGraph's own store tests expect parallel writes to one key
  to succeed);
- the final state is exactly one of the written values (last writer wins), and
  its vector records are exactly that value's texts, each embedded as itself: a
  search with the final text scores it as that text, never by a stale vector of
  another write;
- no duplicate items in search, no orphan vector records or registry entries
  (scanned raw through the MemoryStore port);
- `list_namespaces` racing the last delete of a namespace ends listing exactly
  the namespaces that hold items.

Qdrant is left out: its local mode (`qdrant+local://`) locks its directory to one
process, and no Qdrant server runs in the test session.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import agent_memory
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Memory, Settings
from agent_memory.domain.langgraph_layout import REGISTRY_KIND, REGISTRY_OWNER, owner_of
from agent_memory.entrypoints.langgraph.store import (
    ITEM_KIND,
    VECTOR_KIND,
    record_namespace_of,
)
from agent_memory.langgraph import AgentMemoryStore

DIMENSION = 32
BACKENDS = ["sqlite", "redis", "postgres"]
WORKERS = 3
FIELDS = ["a", "b", "c"]
INDEX: dict[str, Any] = {"fields": FIELDS}


# -- the worker processes ------------------------------------------------------------
def _warm() -> None:
    import agent_memory.adapters.postgres
    import agent_memory.adapters.redis
    import agent_memory.adapters.sqlite
    import agent_memory.langgraph  # noqa: F401


def _noop(_: int) -> int:
    return 0


async def _open(url: str, deployment: str) -> Any:
    return agent_memory.connect(
        url, settings=Settings(deployment=deployment), embedder=HashingEmbedder(DIMENSION)
    )


class _Jittery:
    """The worker's MemoryStore with a pause of up to 2 ms before each call, so the
    writes of the processes interleave at every step rather than by luck."""

    def __init__(self, store: Any, seed: int) -> None:
        self._store, self._random = store, random.Random(seed)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in ("add", "get", "update", "delete", "list", "search"):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(self._random.uniform(0, 0.002))
            return await attr(*args, **kwargs)

        return call


def _worker(url: str, deployment: str, ops: list[tuple[Any, ...]], start_at: float) -> list[str]:
    """Run `ops` on its own connection from `start_at` on; the errors raised."""

    async def main() -> list[str]:
        errors: list[str] = []
        async with await _open(url, deployment) as memory:
            memory.stores.store = _Jittery(memory.stores.store, os.getpid())
            store = AgentMemoryStore(memory, index=INDEX)
            await asyncio.sleep(max(0.0, start_at - time.time()))
            for op in ops:
                try:
                    if op[0] == "put":
                        _, ns, key, value, index = op
                        await store.aput(tuple(ns), key, value, index=index)
                    elif op[0] == "delete":
                        await store.adelete(tuple(op[1]), op[2])
                    elif op[0] == "list":
                        await store.alist_namespaces(prefix=tuple(op[1]))
                    elif op[0] == "search":
                        await store.asearch(tuple(op[1]), query=op[2])
                except Exception as exc:  # every one is a failure the test reports
                    errors.append(f"{op[0]}: {type(exc).__name__}: {exc}")
        return errors

    return asyncio.run(main())


@pytest.fixture(scope="module")
def pool() -> Iterator[Any]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(WORKERS, initializer=_warm) as workers:
        workers.map(_noop, range(WORKERS))
        yield workers


def _url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'lg.db'}"
    if backend == "redis":
        return str(request.getfixturevalue("redis_url"))
    return str(request.getfixturevalue("postgres_url"))


def _run(pool: Any, url: str, deployment: str, scripts: list[list[tuple[Any, ...]]]) -> None:
    start_at = time.time() + 0.5
    pending = [pool.apply_async(_worker, (url, deployment, s, start_at)) for s in scripts]
    errors = [e for p in pending for e in p.get(timeout=60)]
    assert not errors, f"calls raised under concurrent processes: {errors[:5]}"


# -- the checks ----------------------------------------------------------------------
def _texts(value: dict[str, Any]) -> list[str]:
    return [value[f] for f in FIELDS if isinstance(value.get(f), str)]


async def _raw(memory: Memory, namespace: tuple[str, ...]) -> list[Any]:
    out, cursor = [], None
    while True:
        page = await memory.store.list(
            owner_of(namespace), namespace=record_namespace_of(namespace), limit=500, cursor=cursor
        )
        out.extend(page.records)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


async def _registered(memory: Memory) -> set[tuple[str, ...]]:
    page = await memory.store.list(REGISTRY_OWNER, kinds=[REGISTRY_KIND], limit=500)
    return {tuple(r.attributes["namespace"]) for r in page.records}


async def _check_item(
    memory: Memory,
    store: AgentMemoryStore,
    namespace: tuple[str, ...],
    key: str,
    written: list[tuple[dict[str, Any], bool]],
) -> None:
    """The item is one written value (or gone), and its vector records are
    exactly that value's indexed texts, each embedded as itself."""
    records = [r for r in await _raw(memory, namespace) if r.kind in (ITEM_KIND, VECTOR_KIND)]
    items = [r for r in records if r.kind == ITEM_KIND]
    vectors = [r for r in records if r.kind == VECTOR_KIND]
    assert len(items) <= 1, f"{len(items)} item records for one key"
    if not items:
        assert not vectors, (
            f"orphan vector records of a deleted item: {[v.content for v in vectors]}"
        )
        return
    value = items[0].attributes["langgraph"]["value"]
    indexed = {(repr(v), i) for v, i in written}
    assert (repr(value), True) in indexed or (repr(value), False) in indexed, (
        f"final value {value!r} was never written"
    )
    expected = (
        sorted(_texts(value)) if (repr(value), True) in indexed else []
    )  # each value is written either indexed or not, never both
    got = sorted(v.content for v in vectors)
    assert got == expected, (
        f"the vectors of the final value {value!r} are {got!r}, want {expected!r}"
    )
    embedder = HashingEmbedder(DIMENSION)
    for v in vectors:
        want = np.asarray((await embedder.embed([v.content]))[0], dtype=np.float32)
        assert np.allclose(v.vector, want, atol=1e-5), f"vector of {v.content!r} is another text's"
    hits = await store.asearch(namespace, query=expected[0] if expected else "anything")
    keys = [h.key for h in hits]
    assert keys.count(key) == 1, f"search lists {key!r} {keys.count(key)} times"
    hit = next(h for h in hits if h.key == key)
    if expected:
        assert hit.score is not None, f"search by the final text {expected[0]!r} scores nothing"
        assert hit.score > 0.999, (
            f"search by the final text {expected[0]!r} scores {hit.score} (a stale vector)"
        )
    else:
        assert hit.score is None, f"an unindexed final value scored {hit.score} (a stale vector)"


# -- the races -----------------------------------------------------------------------
ROUNDS = 12


def _value(worker: int, i: int) -> dict[str, Any]:
    """Values with 1 to 3 texts each, so a put replaces more or fewer vectors."""
    n = 1 + (worker + i) % 3
    return {f: f"w{worker} r{i} {f} {uuid.uuid4().hex[:6]}" for f in FIELDS[:n]}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_parallel_puts_of_one_key_leave_one_value_and_its_vectors(
    pool: Any, backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url, deployment = _url(backend, request, tmp_path), f"lgp-{uuid.uuid4().hex[:10]}"
    ns, key = ("alice", "memories"), "k"
    scripts, written = [], []
    for w in range(WORKERS):
        values = [_value(w, i) for i in range(ROUNDS)]
        written += [(v, True) for v in values]
        scripts.append([("put", ns, key, v, None) for v in values])
    _run(pool, url, deployment, scripts)
    async with await _open(url, deployment) as memory:
        store = AgentMemoryStore(memory, index=INDEX)
        assert await store.aget(ns, key) is not None
        await _check_item(memory, store, ns, key, written)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_puts_racing_deletes_of_one_key_leave_no_orphan_vectors(
    pool: Any, backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A delete reads the item's vector count, then deletes the records: a put
    from another process in between used to leave its vectors without an item,
    which a later put of fewer texts then scored the item by."""
    url, deployment = _url(backend, request, tmp_path), f"lgp-{uuid.uuid4().hex[:10]}"
    ns, key = ("bob", "memories"), "k"
    scripts, written = [], []
    for w in range(WORKERS):
        script: list[tuple[Any, ...]] = []
        for i in range(ROUNDS):
            if (w + i) % 2:
                script.append(("delete", ns, key))
            else:
                value = _value(w, i)
                written.append((value, True))
                script.append(("put", ns, key, value, None))
        scripts.append(script)
    _run(pool, url, deployment, scripts)
    async with await _open(url, deployment) as memory:
        store = AgentMemoryStore(memory, index=INDEX)
        await _check_item(memory, store, ns, key, written)
        registered = ns in await _registered(memory)
        held = await store.aget(ns, key) is not None
        assert registered == held, f"registry entry {registered}, item held {held}"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_indexed_and_unindexed_puts_of_one_key_leave_the_final_ones_vectors(
    pool: Any, backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A put with `index=False` replaces every vector of the item; one racing an
    indexed put from another process must not keep that put's vectors beside its
    own unindexed value (nor drop the vectors of an indexed final value)."""
    url, deployment = _url(backend, request, tmp_path), f"lgp-{uuid.uuid4().hex[:10]}"
    ns, key = ("carol", "memories"), "k"
    scripts, written = [], []
    for w in range(WORKERS):
        script: list[tuple[Any, ...]] = []
        for i in range(ROUNDS):
            value, indexed = _value(w, i), (w + i) % 2 == 0
            written.append((value, indexed))
            script.append(("put", ns, key, value, None if indexed else False))
        scripts.append(script)
    _run(pool, url, deployment, scripts)
    async with await _open(url, deployment) as memory:
        store = AgentMemoryStore(memory, index=INDEX)
        await _check_item(memory, store, ns, key, written)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_list_namespaces_racing_the_last_delete_of_a_namespace(
    pool: Any, backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Processes put and delete the only item of a few namespaces while another
    lists them: once they stop, the registry names exactly the namespaces that
    hold an item, and `list_namespaces` lists exactly those."""
    url, deployment = _url(backend, request, tmp_path), f"lgp-{uuid.uuid4().hex[:10]}"
    spaces = [("dave", "n", str(j)) for j in range(3)]
    scripts: list[list[tuple[Any, ...]]] = []
    for w in range(WORKERS - 1):
        script: list[tuple[Any, ...]] = []
        for i in range(ROUNDS):
            ns = spaces[(w + i) % len(spaces)]
            key = f"k{i % 2}"
            script.append(("put", ns, key, _value(w, i), None))
            script.append(("delete", ns, key))
            if i % 3 == w:
                script.append(("put", ns, key, _value(w, i), None))
        scripts.append(script)
    scripts.append([("list", ("dave",))] * ROUNDS + [("search", ("dave",), "w0")] * 5)
    _run(pool, url, deployment, scripts)
    async with await _open(url, deployment) as memory:
        store = AgentMemoryStore(memory, index=INDEX)
        holding = set()
        for ns in spaces:
            records = await _raw(memory, ns)
            items = {r.attributes["langgraph"]["key"] for r in records if r.kind == ITEM_KIND}
            vectors = [r for r in records if r.kind == VECTOR_KIND]
            keyed = {v.attributes["langgraph"]["key"] for v in vectors}
            assert keyed <= items, f"vectors of deleted items {keyed - items} in {ns}"
            if items:
                holding.add(ns)
            for key in items:
                hits = [h.key for h in await store.asearch(ns)]
                assert hits.count(key) == 1, f"search lists {key!r} {hits.count(key)} times"
        assert await _registered(memory) == holding, "registry entries differ from held items"
        assert set(await store.alist_namespaces(prefix=("dave",))) == holding


# -- the sync facade: threads, then forks of the process -----------------------------
_FORK_SCRIPT = textwrap.dedent(
    """
    import multiprocessing, os, sys, threading, time
    import agent_memory.sync
    from agent_memory.langgraph import AgentMemoryStore

    def child(memory, store, queue):
        out = []
        for name, call in (
            ("facade", lambda: memory.cache.get("s", "k")),
            ("store", lambda: store.get(("u", "notes"), "k")),
            ("search", lambda: store.search(("u",), query="hello")),
            ("close", memory.close),
        ):
            try:
                call()
                out.append(f"{name}=ok")
            except BaseException as exc:
                out.append(f"{name}={type(exc).__name__}")
        queue.put("|".join(out))

    for url in sys.argv[1:]:
        memory = agent_memory.sync.connect(url)
        store = AgentMemoryStore(memory, index={"fields": ["text"]})
        store.put(("u", "notes"), "k", {"text": "hello"})
        stop = threading.Event()
        def busy(n):
            i = 0
            while not stop.is_set():
                store.put(("u", "notes"), f"b{n}", {"text": f"busy {i}"})
                memory.cache.put("s", "k", b"v")
                i += 1
        threads = [threading.Thread(target=busy, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        context = multiprocessing.get_context("fork")
        for _ in range(3):  # forked while the threads' calls are in flight
            queue = context.Queue()
            proc = context.Process(target=child, args=(memory, store, queue))
            proc.start()
            proc.join(20)
            if proc.is_alive():
                proc.kill()
                print("CHILD HUNG")
            else:
                print(f"exit={proc.exitcode}|" + queue.get(timeout=5))
        stop.set()
        for t in threads:
            t.join(20)
            if t.is_alive():
                print("PARENT THREAD HUNG")
        assert store.get(("u", "notes"), "k").value == {"text": "hello"}
        assert len(store.search(("u",), query="hello")) == 4
        memory.close()
    print("PARENT OK")
    """
)


def test_forked_children_of_a_threaded_sync_program_refuse_at_once(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A synchronous program (`agent_memory.sync.connect`) whose threads are
    mid-call when it forks (multiprocessing's default on Linux) on each server
    backend: the child's facade and store calls raise `ConfigurationError` at
    once, its close() is a no-op, it exits; the parent's threads and
    connection carry on."""
    script = tmp_path / "fork.py"
    script.write_text(_FORK_SCRIPT)
    urls = [_url(b, request, tmp_path) for b in BACKENDS]
    done = subprocess.run(
        [sys.executable, str(script), *urls], capture_output=True, text=True, timeout=120
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "HUNG" not in out, out
    lines = done.stdout.splitlines()
    assert lines[-1] == "PARENT OK", out
    children = [dict(p.split("=", 1) for p in line.split("|")) for line in lines[:-1]]
    assert len(children) == 3 * len(urls), out
    for child in children:
        assert child == {
            "exit": "0",
            "facade": "ConfigurationError",
            "store": "ConfigurationError",
            "search": "ConfigurationError",
            "close": "ok",
        }, child

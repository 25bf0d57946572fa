"""Parallel writers on one LangGraph key (LangGraph's `test_large_batches`
workload: threads calling the sync API while the loop runs): put is an upsert,
delete of a missing item a no-op, and no interleaving raises, on every backend."""

from __future__ import annotations

import asyncio
import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agent_memory.langgraph import AgentMemoryStore

THREADS = 10
CALLS_PER_THREAD = 300
KEYS = 3


def workload(store: AgentMemoryStore, worker: int) -> list[BaseException]:
    """One thread's calls: put, get, search, put again, delete, on shared keys."""
    errors: list[BaseException] = []
    namespace = ("test", "foo", "bar")
    steps = itertools.cycle(["put", "get", "search", "put", "delete", "list"])
    for call in range(CALLS_PER_THREAD):
        key = f"key{(worker + call) % KEYS}"
        try:
            match next(steps):
                case "put":
                    store.put(namespace, key, {"foo": f"bar{worker}-{call}", "text": "coffee"})
                case "get":
                    item = store.get(namespace, key)
                    assert item is None or item.created_at <= item.updated_at
                case "search":
                    store.search(("test",), query="coffee" if call % 12 == 2 else None, limit=5)
                case "delete":
                    store.delete(namespace, key)
                case _:
                    store.list_namespaces(prefix=("test",))
        except BaseException as exc:  # every failure is counted
            errors.append(exc)
    return errors


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis", "postgres", "qdrant"])
async def test_parallel_sync_writers_on_shared_keys_never_fail(open_memory, backend: str) -> None:  # type: ignore[no-untyped-def]
    async with open_memory(backend) as memory:
        store = AgentMemoryStore(memory, index={"fields": ["text"]})
        with ThreadPoolExecutor(THREADS) as pool:
            futures = [asyncio.wrap_future(pool.submit(workload, store, w)) for w in range(THREADS)]
            outcomes: list[Any] = await asyncio.gather(*futures)
        errors = [e for errs in outcomes for e in errs]
        assert errors == [], (
            f"{len(errors)} of {THREADS * CALLS_PER_THREAD} calls failed: {errors[:5]!r}"
        )
        # The store is consistent afterwards: every live item is listed and found.
        namespace = ("test", "foo", "bar")
        live = [await store.aget(namespace, f"key{k}") for k in range(KEYS)]
        live_keys = sorted(i.key for i in live if i is not None)
        found = sorted(h.key for h in await store.asearch(("test",), limit=10))
        assert found == live_keys
        listed = await store.alist_namespaces(prefix=("test",))
        assert listed == ([namespace] if live_keys else [])
        for k in range(KEYS):
            await store.aput(namespace, f"key{k}", {"text": "tea"})
        items = [await store.aget(namespace, f"key{k}") for k in range(KEYS)]
        assert all(i is not None and i.value == {"text": "tea"} for i in items)

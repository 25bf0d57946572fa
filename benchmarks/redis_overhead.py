"""Overhead of the redis adapters over the same operations written directly with redis-py.

Same server, same data (10,000 records; 10,000 events), measured in the same run,
interleaved. Prints one ratio per operation (ours / direct; target <= 1.15x):

- search: `RedisMemoryStore.search(owner, q, limit=10)` vs one FT.SEARCH KNN with
  the owner filter, fields decoded to dicts;
- window: `RedisEventLog.window(domain, since, limit=50)` vs two ZREVRANGEBYSCORE
  and the payload HMGETs in pipelines, JSON decoded;
- append: `RedisEventLog.append(100 events)` vs one pipeline of HSETNX + ZADD NX;
- add: `RedisMemoryStore.add(100 records of one owner)` vs one pipeline of HSET
  with the same fields (the same encoded hash, so the same index entries), which
  neither rejects duplicates atomically nor keeps keyword statistics.

`search/k+1` is printed for information: the direct query there also reads the
row past the cut, which exact ties by id need (ours always does).

Usage: python benchmarks/redis_overhead.py [--rounds N]   (REDIS_URL to use your server)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from agent_memory.adapters.redis import RedisEventLog, RedisMemoryStore, connect
from agent_memory.adapters.redis._codec import encode_event, encode_record, to_micros
from agent_memory.adapters.redis._keys import KeySchema, digest
from agent_memory.domain.records import EmbeddingSpace, Event, MemoryRecord

DIM = 64
RECORDS = 10_000
OWNERS = 10
EF = 64  # the store's default EF_RUNTIME: both sides search with the same quality


def _records(rng: np.random.Generator) -> list[MemoryRecord]:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    vectors = rng.standard_normal((RECORDS, DIM)).astype(np.float32)
    return [
        MemoryRecord(
            id=f"r{i}",
            owner=f"owner-{i % OWNERS}",
            namespace="facts",
            kind="fact",
            content=f"record number {i}",
            vector=vectors[i],
            created_at=at + timedelta(seconds=i),
            updated_at=at + timedelta(seconds=i),
        )
        for i in range(RECORDS)
    ]


def _events(n: int, domain: str, now: datetime, tag: str = "") -> list[Event]:
    return [
        Event(
            id=f"{tag}e{i}",
            domain=domain,
            agent="agent",
            action="deploy",
            outcome="ok",
            summary=f"event {i}",
            occurred_at=now - timedelta(seconds=i),
            recorded_at=now,
            is_global=(i % 50 == 0),
        )
        for i in range(n)
    ]


def _batch(rng: np.random.Generator, at: datetime, tag: str) -> list[MemoryRecord]:
    """100 records of one owner, with a sentence of text each (keyword-indexed)."""
    vectors = rng.standard_normal((100, DIM)).astype(np.float32)
    return [
        MemoryRecord(
            id=f"{tag}{i}",
            owner="adder",
            namespace="facts",
            kind="fact",
            content=f"note {i}: the user mentioned painting a sunset over the lake on day {i}",
            vector=vectors[i],
            created_at=at,
            updated_at=at,
        )
        for i in range(100)
    ]


async def _timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t = time.perf_counter()
    await fn()
    return time.perf_counter() - t


async def _compare(
    name: str, ours: Callable[[], Awaitable[Any]], direct: Callable[[], Awaitable[Any]], rounds: int
) -> float:
    for _ in range(20):  # warm up both paths
        await ours()
        await direct()
    a: list[float] = []
    b: list[float] = []
    for i in range(rounds):  # ABBA order: neither side always runs first
        if i % 2:
            b.append(await _timed(direct))
            a.append(await _timed(ours))
        else:
            a.append(await _timed(ours))
            b.append(await _timed(direct))
    ma, mb = statistics.median(a), statistics.median(b)
    # Each pair ran back to back, so its ratio is robust to load drifting on the machine.
    ratio = statistics.median(x / y for x, y in zip(a, b, strict=True))
    print(f"{name:10s} ours {ma * 1e3:7.3f} ms   direct {mb * 1e3:7.3f} ms   ratio {ratio:.2f}x")
    return ratio


async def run(url: str, rounds: int) -> dict[str, float]:
    rng = np.random.default_rng(1)
    deployment = "bench" + uuid.uuid4().hex[:8]
    space = EmbeddingSpace(model="bench-model", dimension=DIM)
    store = RedisMemoryStore.from_url(url, space, deployment=deployment, ef_runtime=EF)
    log = RedisEventLog.from_url(url, deployment=deployment)
    r = connect(url)
    keys = KeySchema(deployment=deployment)
    try:
        records = _records(rng)
        for i in range(0, RECORDS, 1000):  # batches: one script must not outlast the timeout
            await store.add(records[i : i + 1000])
        now = datetime.now(UTC).replace(microsecond=0)
        for d in range(5):
            await log.append(_events(RECORDS // 5, f"domain-{d}", now))
        queries = rng.standard_normal((64, DIM)).astype(np.float32)
        state = {"i": 0}

        def next_query() -> np.ndarray[Any, Any]:
            state["i"] += 1
            return queries[state["i"] % len(queries)]

        owner = "owner-3"
        oh = digest(owner)
        index = store.index_name

        async def ours_search() -> Any:
            return await store.search(owner, next_query(), limit=10)

        def direct_search(k: int) -> Callable[[], Awaitable[Any]]:
            async def run() -> Any:
                res = await r.execute_command(
                    "FT.SEARCH", index, f"(@oh:{{{oh}}})=>[KNN {k} @vec $v EF_RUNTIME {EF} AS d]",
                    "PARAMS", "2", "v", next_query().tobytes(),
                    "RETURN", "12", "id", "owner", "namespace", "kind", "content", "context",
                    "ca", "ua", "imp", "attrs", "vec", "d",
                    "SORTBY", "d", "ASC", "LIMIT", "0", str(k), "DIALECT", "2",
                )  # fmt: skip
                out = []
                for i in range(2, len(res), 2):
                    f = dict(zip(res[i][::2], res[i][1::2], strict=True))
                    f[b"vec"] = np.frombuffer(f[b"vec"], dtype=np.float32)
                    f[b"attrs"] = json.loads(f[b"attrs"])
                    out.append(f)
                return out[:10]

            return run

        domain = "domain-2"
        since = now - timedelta(days=1)

        async def ours_window() -> Any:
            return await log.window(domain, since=since, limit=50)

        async def direct_window() -> Any:
            floor = to_micros(since)
            pipe = r.pipeline(transaction=False)
            pipe.zrevrangebyscore(
                keys.ev_domain(domain), "+inf", floor, start=0, num=51, withscores=True
            )
            pipe.zrevrangebyscore(keys.ev_global(), "+inf", floor, start=0, num=51, withscores=True)
            own, glob = await pipe.execute()
            rows = [(score, i, domain) for i, score in own]
            for m, score in glob:
                id_raw, _, dom_hex = m.rpartition(b"\x00")
                rows.append((score, id_raw, bytes.fromhex(dom_hex.decode()).decode()))
            rows.sort(reverse=True)
            by: dict[str, list[bytes]] = {}
            for _, i, d in rows[:50]:
                by.setdefault(d, []).append(i)
            pipe = r.pipeline(transaction=False)
            for d, ids in by.items():
                pipe.hmget(keys.ev_payloads(d), ids)
            docs = [json.loads(x) for got in await pipe.execute() for x in got if x]
            docs.sort(key=lambda x: (x["occurred_at"], x["id"]), reverse=True)
            return docs, len(rows) > 50

        counter = {"n": 0}

        async def ours_append() -> Any:
            counter["n"] += 1
            return await log.append(_events(100, "append-ours", now, tag=f"b{counter['n']}-"))

        async def direct_append() -> Any:
            counter["n"] += 1
            batch = _events(100, "append-direct", now, tag=f"b{counter['n']}-")
            pipe = r.pipeline(transaction=False)
            payloads = keys.ev_payloads("append-direct")
            zset = keys.ev_domain("append-direct")
            for e in batch:
                pipe.hsetnx(payloads, e.id, encode_event(e))  # the same JSON document
                pipe.zadd(zset, {e.id: to_micros(e.occurred_at)}, nx=True)
            return await pipe.execute()

        async def ours_add() -> Any:
            counter["n"] += 1
            return await store.add(_batch(rng, now, f"a{counter['n']}-"))

        async def direct_add() -> Any:
            counter["n"] += 1
            pipe = r.pipeline(transaction=False)
            for rec in _batch(rng, now, f"a{counter['n']}-"):
                tags = {
                    "oh": digest(rec.owner),
                    "nh": digest(rec.namespace),
                    "kh": digest(rec.kind),
                }
                pipe.hset(
                    keys.ms_record(space.identity, rec.owner, rec.id),
                    mapping=encode_record(rec, tags),
                )
            return await pipe.execute()

        return {
            "search": await _compare("search", ours_search, direct_search(10), rounds),
            # For information: a direct query that, like ours, reads one row past the
            # cut (what exact ties by id need).
            "search/k+1": await _compare("search/k+1", ours_search, direct_search(11), rounds),
            "window": await _compare("window", ours_window, direct_window, rounds),
            "append": await _compare("append", ours_append, direct_append, rounds // 4),
            "add": await _compare("add", ours_add, direct_add, rounds // 10),
        }
    finally:
        await store.drop_index()
        await store.close()
        await log.close()
        async for key in r.scan_iter(match=f"agent_memory:v1:{deployment}:*", count=1000):
            await r.delete(key)
        await r.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=1000)
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL")
    server = None
    if not url:
        from servers.redis_server import launch_redis

        server = launch_redis()
        url = server.url
    try:
        ratios = asyncio.run(run(url, args.rounds))
    finally:
        if server is not None:
            server.stop()
    print("ratios (target <= 1.15x): " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))


if __name__ == "__main__":
    main()

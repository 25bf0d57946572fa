"""Overhead of the redis adapters over the same operations written directly with redis-py.

Same server, same data (10,000 records of 10 owners; 10,000 events in 5
domains), on the shared harness (`_harness.py`: paired, interleaved, median of
the per-pair ratios, inputs built before the clock starts, GC as in
production). The direct sides use the same key layout and the same encoded
values, so both sides store and read the same data
(`tests/test_benchmarks.py` checks it):

- `redis_search`: `store.search(owner, q, limit=10)` vs one FT.SEARCH KNN 10
  with the owner filter, fields decoded (vector from its bytes, attributes from
  JSON). The owner holds 1,000 records, under the store's exact threshold, so
  both sides search exactly (`HYBRID_POLICY ADHOC_BF`). `redis_search_k_plus_1`
  (no target): the direct query also reads the row past the cut, which exact
  ties by id need (ours asks for it too; its script returns the rows' values
  without names or keys, and that row's distance only unless it ties).
- `redis_window`: `log.window(domain, since, limit=50)` vs the same window
  script (retention checked server-side) called directly on the domain's and
  the global sets in one pipeline, the references merged and cut at 50, and the
  payloads fetched with HMGET and decoded from JSON (dicts).
- `redis_append_script`: `log.append(100 events)` vs the same append script
  called directly (EVALSHA, keys and arguments built from the events) and the
  SADD of the domain, in one pipeline.
- `redis_append_zadd` (no target, informational): the same append vs one
  pipeline of plain commands: one HSET of the 100 payloads, one ZADD NX per
  sorted set (time, recorded time, each entity) with all its members, one SADD.
  It writes the same keys and values into empty keys, but it is not the same
  result: it is not idempotent (HSET overwrites a payload already stored; the
  script keeps the first one), so it is no fair baseline and its ratio is no
  target. The fair append comparison is `redis_append_script`.
- `redis_add`: `store.add(100 records of one owner)` vs one pipeline of HSET
  with the same fields (the same encoded hash, so the same index entries),
  which neither rejects duplicates atomically nor keeps keyword statistics.

Cluster column (`--cluster`): the same comparisons on a 3 + 3 Redis Cluster
(`tests/servers/redis_cluster_server.py`, or `REDIS_CLUSTER_URL`), both sides on
one redis-py `RedisCluster`: `redis_cluster_*` lines. On a cluster node the
Search module returns no document fields, so the direct search is a script too:
one EVALSHA (routed by the owner's slot) of a script running FT.SEARCH on the
owner's primary's index and returning each hit's distance and its fields' values
(HMGET; no names, no keys, as the adapter's script returns them), decoded the
same way. Window and append are the same pipelines
(routed per slot); the add is a pipeline of HSET to the owner's slot.
`tests/test_benchmarks.py` runs the same equality checks on a cluster.

Keyword vs vector (`--keyword LOCOMO_JSON`, off by default: loading takes
minutes): `redis_keyword_vs_vector` times `store.search_text(owner, question,
limit=10)` against `store.search(owner, q, limit=10)` on the same owner of
20,000 turns: the LoCoMo turns (`"speaker: text"`) cycled, so texts repeat and
scores tie heavily, each with a random 384-d vector (under the exact threshold,
so the vector side is the exact search). Questions are LoCoMo questions, vector
queries random. Target: keyword search at most 1.5x the vector search.

Usage: python benchmarks/redis_overhead.py [--rounds N] [--cluster] [--keyword FILE]
(REDIS_URL / REDIS_CLUSTER_URL to use your server / cluster)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import numpy as np
from _harness import compare_async

from agent_memory.adapters.redis import RedisEventLog, RedisMemoryStore, connect
from agent_memory.adapters.redis._codec import RECORD_FIELDS, encode_event, encode_record, to_micros
from agent_memory.adapters.redis._keys import KeySchema, digest
from agent_memory.adapters.redis.events import _APPEND, _WINDOW
from agent_memory.domain.records import EmbeddingSpace, Entity, Event, MemoryRecord

DIM = 64
TARGET = 1.15
WINDOW_LIMIT = 50
SPACE = EmbeddingSpace(model="bench-model", dimension=DIM)
Side = Callable[[], Awaitable[Any]]

# The direct search on a cluster node (whose Search module returns no document
# fields). KEYS: any key in the owner's slot (routing). ARGV: n, n fields, then
# FT.SEARCH's arguments (`RETURN 1 d`). Per hit: its distance, then its fields'
# values.
_DIRECT_SEARCH_C = """
local n = tonumber(ARGV[1])
local res = redis.call('FT.SEARCH', unpack(ARGV, n + 2, #ARGV))
local out = {}
for i = 2, #res, 2 do
  out[#out + 1] = res[i + 1][2]
  out[#out + 1] = redis.call('HMGET', res[i], unpack(ARGV, 2, n + 1))
end
return out
"""


def make_records(n: int, owners: int, rng: np.random.Generator) -> list[MemoryRecord]:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return [
        MemoryRecord(
            id=f"r{i}",
            owner=f"owner-{i % owners}",
            namespace="facts",
            kind="fact",
            content=f"record number {i}",
            vector=vectors[i],
            created_at=at + timedelta(seconds=i),
            updated_at=at + timedelta(seconds=i),
            attributes={"turn": i},
        )
        for i in range(n)
    ]


def make_events(
    n: int, domain: str, now: datetime, tag: str = "", globals_: bool = True
) -> list[Event]:
    """`n` events of `domain`, one a second back from `now`, each about one of
    five services; with `globals_`, every 50th is global."""
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
            entities=(Entity("service", f"svc-{i % 5}"),),
            metadata={"n": i},
            is_global=globals_ and i % 50 == 0,
        )
        for i in range(n)
    ]


def make_batch(rng: np.random.Generator, at: datetime, tag: str) -> list[MemoryRecord]:
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


def _recorded(time_key: str) -> str:
    return time_key[:-1] + "r"  # the recorded-time set next to a time-ordered set


class Bench:
    """Our adapters and a plain client on one server; direct writes go to the
    key space of `direct` (another deployment), so both sides can write the
    same events and records."""

    def __init__(self, url: str, deployment: str) -> None:
        self.deployment = deployment
        self.store = RedisMemoryStore.from_url(url, SPACE, deployment=deployment)
        self.log = RedisEventLog.from_url(url, deployment=deployment)
        self.r = connect(url)
        self.keys = KeySchema(deployment=deployment)
        self.append_script = self.r.register_script(_APPEND)
        self.window_script = self.r.register_script(_WINDOW)
        self.search_script = self.r.register_script(_DIRECT_SEARCH_C)
        self.cluster = url.lower().startswith(("redis+cluster:", "rediss+cluster:"))

    def direct_keys(self, suffix: str) -> KeySchema:
        return KeySchema(deployment=f"{self.deployment}-{suffix}")

    async def close(self) -> None:
        await self.store.drop_index()
        await self.store.close()
        await self.log.close()
        async for key in self.r.scan_iter(match=f"agent_memory:v1:{self.deployment}*", count=1000):
            await self.r.delete(key)
        await self.r.aclose()

    # -- search ------------------------------------------------------------

    def search_sides(self, owner: str, queries: list[Any], k: int = 10) -> tuple[Side, Side]:
        """(ours, direct): the n-th call of each searches `queries[n]` (cycling)."""
        store, r = self.store, cast(Any, self.r)
        ours_q, direct_q = cycle(queries), cycle(queries)
        oh = digest(owner)
        index = store.index_name
        fields = [*RECORD_FIELDS, "d"]

        async def ours() -> Any:
            return await store.search(owner, next(ours_q), limit=10)

        stats = store._stats_key(owner)
        load: list[Any] = [len(RECORD_FIELDS), *RECORD_FIELDS]
        names = [name.encode() for name in RECORD_FIELDS]
        script = self.search_script
        cluster = self.cluster

        async def direct() -> Any:
            query = f"(@oh:{{{oh}}})=>[KNN {k} @vec $v HYBRID_POLICY ADHOC_BF AS d]"
            blob = next(direct_q).tobytes()
            tail = ("SORTBY", "d", "ASC", "LIMIT", "0", str(k), "DIALECT", "2")
            if cluster:  # the owner's primary's index; fields read by the script
                name = store._names(r, r.get_node_from_key(stats))
                res = await script(
                    keys=[stats],
                    args=[*load, name, query, "PARAMS", "2", "v", blob, "RETURN", "1", "d", *tail],
                )
                out = []
                for d, values in list(zip(res[::2], res[1::2], strict=True))[:10]:
                    f = dict(zip(names, values, strict=True))
                    f[b"d"] = d
                    f[b"vec"] = np.frombuffer(f[b"vec"], dtype=np.float32)
                    f[b"attrs"] = json.loads(f[b"attrs"])
                    out.append(f)
                return out
            res = await r.execute_command(
                "FT.SEARCH", index, query, "PARAMS", "2", "v", blob,
                "RETURN", str(len(fields)), *fields, *tail,
            )  # fmt: skip
            out = []
            for row in res[2::2][:10]:
                f = dict(zip(row[::2], row[1::2], strict=True))
                f[b"vec"] = np.frombuffer(f[b"vec"], dtype=np.float32)
                f[b"attrs"] = json.loads(f[b"attrs"])
                out.append(f)
            return out

        return ours, direct

    # -- window ------------------------------------------------------------

    def window_sides(self, domain: str, since: datetime) -> tuple[Side, Side]:
        log, r, keys, script = self.log, self.r, self.keys, self.window_script
        floor = to_micros(since)

        async def ours() -> Any:
            return await log.window(domain, since=since, limit=WINDOW_LIMIT)

        async def direct() -> Any:
            args: list[Any] = [
                "+inf",
                floor,
                to_micros(datetime.now(UTC) - log.retention),
                WINDOW_LIMIT + 1,
            ]
            pipe = r.pipeline(transaction=False)
            own_keys = [keys.ev_domain(domain), _recorded(keys.ev_domain(domain))]
            pipe.execute_command("EVALSHA", script.sha, 2, *own_keys, *args)
            glob_keys = [keys.ev_global(), _recorded(keys.ev_global())]
            pipe.execute_command("EVALSHA", script.sha, 2, *glob_keys, *args)
            own, glob = await pipe.execute()
            rows = [(float(s), i, domain) for i, s in zip(own[::2], own[1::2], strict=True)]
            for m, s in zip(glob[::2], glob[1::2], strict=True):
                id_raw, _, dom_hex = m.rpartition(b"\x00")
                rows.append((float(s), id_raw, bytes.fromhex(dom_hex.decode()).decode()))
            rows.sort(reverse=True)
            by: dict[str, list[bytes]] = {}
            for _, i, d in rows[:WINDOW_LIMIT]:
                by.setdefault(d, []).append(i)
            pipe = r.pipeline(transaction=False)
            for d, ids in by.items():
                pipe.hmget(keys.ev_payloads(d), ids)
            docs = [json.loads(x) for got in await pipe.execute() for x in got if x]
            docs.sort(key=lambda x: (x["occurred_at"], x["id"]), reverse=True)
            return docs, len(rows) > WINDOW_LIMIT

        return ours, direct

    # -- append --------------------------------------------------------------

    def append_ours(self, batches: Iterator[list[Event]]) -> Side:
        log = self.log

        async def ours() -> Any:
            return await log.append(next(batches))

        return ours

    def append_script_direct(self, batches: Iterator[list[Event]], keys: KeySchema) -> Side:
        """The adapter's append script, called directly, for batches of one domain
        without global events (the batches the benchmark appends)."""
        r, script = self.r, self.append_script

        async def direct() -> Any:
            batch = next(batches)
            domain = batch[0].domain
            time_key = keys.ev_domain(domain)
            script_keys = [keys.ev_payloads(domain), time_key, _recorded(time_key)]
            slot: dict[str, int] = {}
            args: list[Any] = []
            for e in batch:
                user = 0  # the user's set in the domain's slot, when the event has a user
                if e.user_id is not None:
                    key = keys.ev_domain_user(domain, e.user_id)
                    if key not in slot:
                        script_keys.append(key)
                        slot[key] = len(script_keys)
                    user = slot[key]
                idx = []
                for ent in e.entities:
                    key = keys.ev_domain_entity(domain, ent.type, ent.id)
                    if key not in slot:
                        script_keys.append(key)
                        slot[key] = len(script_keys)
                    idx.append(slot[key])
                args += [e.id, encode_event(e), to_micros(e.occurred_at), to_micros(e.recorded_at)]
                args += ["0", user, len(idx), *idx]
            pipe = r.pipeline(transaction=False)
            pipe.execute_command("EVALSHA", script.sha, len(script_keys), *script_keys, *args)
            pipe.sadd(keys.ev_domains(), domain)
            return await pipe.execute()

        return direct

    def append_zadd_direct(self, batches: Iterator[list[Event]], keys: KeySchema) -> Side:
        """Plain commands, one per key: HSET of every payload, ZADD NX of every
        member of each sorted set, SADD of the domain."""
        r = self.r

        async def direct() -> Any:
            batch = next(batches)
            domain = batch[0].domain
            time_key = keys.ev_domain(domain)
            payloads: dict[str, bytes] = {}
            times: dict[str, int] = {}
            recorded: dict[str, int] = {}
            entities: dict[str, dict[str, int]] = {}
            for e in batch:
                payloads[e.id] = encode_event(e)
                score = times[e.id] = to_micros(e.occurred_at)
                recorded[e.id] = to_micros(e.recorded_at)
                for ent in e.entities:
                    entities.setdefault(keys.ev_domain_entity(domain, ent.type, ent.id), {})[
                        e.id
                    ] = score
            pipe = r.pipeline(transaction=False)
            pipe.hset(keys.ev_payloads(domain), mapping=payloads)  # type: ignore[arg-type]
            pipe.zadd(time_key, times, nx=True)
            pipe.zadd(_recorded(time_key), recorded, nx=True)
            for key, members in entities.items():
                pipe.zadd(key, members, nx=True)
            pipe.sadd(keys.ev_domains(), domain)
            return await pipe.execute()

        return direct

    # -- add -------------------------------------------------------------------

    def add_sides(
        self,
        ours_batches: Iterator[list[MemoryRecord]],
        direct_batches: Iterator[list[MemoryRecord]],
    ) -> tuple[Side, Side]:
        store, r = self.store, self.r
        keys = self.keys

        async def ours() -> Any:
            return await store.add(next(ours_batches))

        async def direct() -> Any:
            pipe = r.pipeline(transaction=False)
            for rec in next(direct_batches):
                tags = {
                    "oh": digest(rec.owner),
                    "nh": digest(rec.namespace),
                    "kh": digest(rec.kind),
                }
                pipe.hset(
                    keys.ms_record(SPACE.identity, rec.owner, rec.id),
                    mapping=encode_record(rec, tags),  # type: ignore[arg-type]
                )
            return await pipe.execute()

        return ours, direct


KEYWORD_TURNS = 20_000
KEYWORD_TARGET = 1.5


def locomo_texts(path: str) -> tuple[list[str], list[str]]:
    """Every turn (`"speaker: text"`) and every question of a LoCoMo file."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    turns: list[str] = []
    questions: list[str] = []
    for conv in data:
        sessions = conv["conversation"]
        for key in sorted(sessions):
            if key.startswith("session_") and isinstance(sessions[key], list):
                turns += [f"{t['speaker']}: {t['text']}" for t in sessions[key]]
        questions += [q["question"] for q in conv["qa"]]
    return turns, questions


async def keyword_vs_vector(url: str, path: str, rounds: int, prefix: str) -> None:
    """`redis_keyword_vs_vector` (see the module docstring)."""
    turns, questions = locomo_texts(path)
    rng = np.random.default_rng(5)
    space = EmbeddingSpace(model="bench-keyword", dimension=384)
    store = RedisMemoryStore.from_url(url, space, deployment="kw" + uuid.uuid4().hex[:8])
    at = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        vectors = rng.standard_normal((KEYWORD_TURNS, 384)).astype(np.float32)
        for start in range(0, KEYWORD_TURNS, 1000):
            await store.add(
                [
                    MemoryRecord(
                        owner="talker", id=f"t{i:06d}", namespace="conversation",
                        kind="turn", content=turns[i % len(turns)], vector=vectors[i],
                        created_at=at + timedelta(seconds=i), updated_at=at + timedelta(seconds=i),
                    )
                    for i in range(start, min(start + 1000, KEYWORD_TURNS))
                ]
            )  # fmt: skip
        texts = cycle([questions[i] for i in rng.choice(len(questions), 64, replace=False)])
        qs = cycle(list(rng.standard_normal((64, 384)).astype(np.float32)))

        async def keyword() -> Any:
            return await store.search_text("talker", next(texts), limit=10)

        async def vector() -> Any:
            return await store.search("talker", next(qs), limit=10)

        result = await compare_async(
            f"{prefix}_keyword_vs_vector", keyword, vector, rounds=rounds, target=KEYWORD_TARGET
        )
        print(result.line(), flush=True)
    finally:
        await store.drop_index()
        await store.close()


def cycle(items: list[Any]) -> Iterator[Any]:
    while True:
        yield from items


async def run(url: str, rounds: int, prefix: str = "redis") -> None:
    rng = np.random.default_rng(1)
    bench = Bench(url, "bench" + uuid.uuid4().hex[:8])
    try:
        records = make_records(10_000, 10, rng)
        for i in range(0, len(records), 1000):  # batches: one script must not outlast the timeout
            await bench.store.add(records[i : i + 1000])
        now = datetime.now(UTC).replace(microsecond=0)
        for d in range(5):
            await bench.log.append(make_events(2000, f"domain-{d}", now))
        queries = list(rng.standard_normal((64, DIM)).astype(np.float32))

        if bench.cluster:  # the scripts on every primary before the clock starts
            for script in (bench.append_script, bench.window_script, bench.search_script):
                await bench.r.script_load(script.script)

        async def report(name: str, ours: Side, direct: Side, n: int, target: float | None) -> None:
            name = prefix + name.removeprefix("redis")
            result = await compare_async(name, ours, direct, rounds=n, target=target)
            print(result.line(), flush=True)

        ours, direct = bench.search_sides("owner-3", queries)
        await report("redis_search", ours, direct, rounds, TARGET)
        ours, direct = bench.search_sides("owner-3", queries, k=11)
        await report("redis_search_k_plus_1", ours, direct, rounds, None)
        ours, direct = bench.window_sides("domain-2", now - timedelta(days=1))
        await report("redis_window", ours, direct, rounds, TARGET)

        calls = rounds // 4 + 3  # the harness's warm-up included
        for name, make_direct, suffix, target in (
            ("redis_append_script", bench.append_script_direct, "script", TARGET),
            ("redis_append_zadd", bench.append_zadd_direct, "zadd", None),  # not idempotent
        ):
            batches = [
                make_events(100, "append", now, tag=f"{suffix}{i}-", globals_=False)
                for i in range(calls)
            ]
            ours_side = bench.append_ours(iter(batches))
            direct_side = make_direct(iter(batches), bench.direct_keys(suffix))
            await report(name, ours_side, direct_side, rounds // 4, target)

        calls = rounds // 10 + 3
        ours_batches = [make_batch(rng, now, f"a{i}-") for i in range(calls)]
        direct_batches = [make_batch(rng, now, f"d{i}-") for i in range(calls)]
        ours, direct = bench.add_sides(iter(ours_batches), iter(direct_batches))
        await report("redis_add", ours, direct, rounds // 10, TARGET)
    finally:
        await bench.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--cluster", action="store_true", help="the Redis Cluster column")
    parser.add_argument(
        "--keyword", metavar="LOCOMO_JSON", help="also keyword vs vector search on LoCoMo turns"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    if args.cluster:
        url = os.environ.get("REDIS_CLUSTER_URL")
        cluster = None
        if not url:
            from servers.redis_cluster_server import launch_cluster

            cluster = launch_cluster()
            url = cluster.url
        try:
            asyncio.run(run(url, args.rounds, prefix="redis_cluster"))
            if args.keyword:
                asyncio.run(
                    keyword_vs_vector(url, args.keyword, args.rounds // 10, "redis_cluster")
                )
        finally:
            if cluster is not None:
                cluster.stop()
        return
    url = os.environ.get("REDIS_URL")
    server = None
    if not url:
        from servers.redis_server import launch_redis

        server = launch_redis()
        url = server.url
    try:
        asyncio.run(run(url, args.rounds))
        if args.keyword:
            asyncio.run(keyword_vs_vector(url, args.keyword, args.rounds // 10, "redis"))
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()

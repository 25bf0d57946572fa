"""Migrate N memory records (384-dimensional vectors, short texts) from a SQLite
file to PostgreSQL with `agent_memory.portability.migrate` — export to a
versioned JSON Lines file, import in batches, verify counts per port and a
sample field by field — and report records/s for each phase and overall.

No baseline: this measures one end-to-end operation a user runs rarely, so the
number to watch is throughput at scale, not a ratio. Per phase it prints wall
time and records/s (`MigrateSummary.seconds`: export, check, write, index,
verify); then the client's own CPU time and the load average, because on a
shared machine the wall time says as much about the neighbours as about us.

    .venv/bin/python benchmarks/migrate.py                 # 100,000 records
    .venv/bin/python benchmarks/migrate.py --records 10000

`DATABASE_URL` points at your PostgreSQL; otherwise one is started the way the
tests start it (tests/servers/).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from agent_memory import connect
from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.domain.records import MemoryRecord
from agent_memory.portability import migrate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

DIM = 384
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def postgres_url(stack: ExitStack, tmp: Path) -> str:
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    from servers.postgres_server import start_postgres

    pg = start_postgres(tmp / "pg")
    stack.callback(pg.destroy)
    return pg.uri


async def fill(url: str, n: int, owners: int) -> float:
    rng = np.random.default_rng(3)
    embedder = HashingEmbedder(dimension=DIM)
    start = time.perf_counter()
    async with connect(url, embedder=embedder) as memory:
        for at in range(0, n, 5_000):
            count = min(5_000, n - at)
            vectors = rng.standard_normal((count, DIM)).astype(np.float32)
            await memory.store.add(
                [
                    MemoryRecord(
                        owner=f"user-{(at + i) % owners}",
                        id=f"r{at + i:07d}",
                        namespace="notes",
                        kind="fact",
                        content=f"note {at + i} about project {(at + i) % 97}",
                        vector=vectors[i],
                        created_at=T0,
                        updated_at=T0,
                    )
                    for i in range(count)
                ]
            )
    return time.perf_counter() - start


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--owners", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=500, help="import batch size")
    args = parser.parse_args()
    os.environ.setdefault("AGENT_MEMORY_EMBEDDING_DIMENSION", str(DIM))
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        source = f"sqlite:///{Path(tmp) / 'source.db'}"
        target = postgres_url(stack, Path(tmp))
        filled = await fill(source, args.records, args.owners)
        print(f"filled SQLite: {args.records / filled:,.0f} records/s")
        load = os.getloadavg()[0]
        cpu = _cpu()
        start = time.perf_counter()
        summary = await migrate(source, target, workdir=tmp, batch_size=args.batch_size)
        took = time.perf_counter() - start
        cpu = _cpu() - cpu
        print(summary.imported.describe())
        for phase, seconds in summary.seconds.items():
            rate = f"{args.records / seconds:,.0f} records/s" if seconds > 0 else "-"
            print(f"  {phase:<7} {seconds:7.1f} s  {rate}")
        print(
            f"  client CPU {cpu:.1f} s (user+sys of this process); load average "
            f"{load:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores"
        )
        rate = args.records / took
        print(f"migrate: {args.records:,} records in {took:.1f} s = {rate:,.0f} records/s")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    asyncio.run(main())

"""Migrate N memory records (384-dimensional vectors, short texts) from a SQLite
file to PostgreSQL with `agent_memory.portability.migrate` — export to a
versioned JSON Lines file, import in batches, verify counts per port and a
sample field by field — and report records/s for each phase and overall.

No baseline: this measures one end-to-end operation a user runs rarely, so the
number to watch is throughput at scale, not a ratio. Per phase (export, check,
write, index, verify: `MigrateSummary.seconds`) it prints the wall time and
records/s, and the CPU seconds this process and the PostgreSQL server spent
(when it started the server; Linux /proc) with records per CPU-second — on a
shared machine the wall time says as much about the neighbours as about us,
so the load average is printed too.

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


def postgres_server(stack: ExitStack, tmp: Path) -> tuple[str, int | None]:
    """The target URL, and the postmaster's pid when we started the server."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"], None
    from servers.postgres_server import start_postgres

    pg = start_postgres(tmp / "pg")
    stack.callback(pg.destroy)
    return str(pg.uri), pg.pid


def server_cpu(postmaster: int | None) -> float | None:
    """CPU seconds (user+sys) the server has used: the postmaster, its live
    children (backends, parallel workers) and the children it reaped. Linux."""
    if postmaster is None or not Path("/proc").is_dir():
        return None
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == postmaster:
            ticks += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        elif int(fields[1]) == postmaster:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


# `migrate`'s progress stages, by phase.
PHASES = {
    "records": "export",
    "events": "export",
    "cache": "export",
    "check": "check",
    "import": "write",
    "index": "index",
    "verify": "verify",
}


class PhaseClock:
    """CPU seconds of this process and of the server per phase, from the
    stages `migrate` reports to its progress callback."""

    def __init__(self, postmaster: int | None) -> None:
        self.postmaster = postmaster
        self.phase: str | None = None
        self.mark = (_cpu(), server_cpu(postmaster))
        self.client: dict[str, float] = {}
        self.server: dict[str, float] = {}

    def __call__(self, stage: str, _done: int, _total: int | None) -> None:
        phase = PHASES.get(stage, stage)
        if phase != self.phase:
            self.close()
            self.phase = phase

    def close(self) -> None:
        now = (_cpu(), server_cpu(self.postmaster))
        if self.phase is not None:
            self.client[self.phase] = self.client.get(self.phase, 0.0) + now[0] - self.mark[0]
            if now[1] is not None and self.mark[1] is not None:
                self.server[self.phase] = self.server.get(self.phase, 0.0) + now[1] - self.mark[1]
        self.mark = now


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
    n = args.records
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        source = f"sqlite:///{Path(tmp) / 'source.db'}"
        target, postmaster = postgres_server(stack, Path(tmp))
        filled = await fill(source, n, args.owners)
        print(f"filled SQLite: {n / filled:,.0f} records/s")
        load = os.getloadavg()[0]
        clock = PhaseClock(postmaster)
        start = time.perf_counter()
        summary = await migrate(
            source, target, workdir=tmp, batch_size=args.batch_size, progress=clock
        )
        took = time.perf_counter() - start
        clock.close()
        print(summary.imported.describe())
        print("  phase     wall s   records/s   client CPU s   server CPU s   records/CPU-s")
        for phase, seconds in summary.seconds.items():
            if seconds <= 0:
                continue
            client = clock.client.get(phase, 0.0)
            server = clock.server.get(phase)
            cpu = client + (server or 0.0)
            print(
                f"  {phase:<7} {seconds:8.1f} {n / seconds:11,.0f} {client:14.1f} "
                + (f"{server:14.1f}" if server is not None else f"{'-':>14}")
                + (f" {n / cpu:15,.0f}" if cpu > 0 else f" {'-':>15}")
            )
        client = sum(clock.client.values())
        server = sum(clock.server.values())
        print(
            f"  client CPU {client:.1f} s, server CPU {server:.1f} s (user+sys); load average "
            f"{load:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores"
        )
        rate = n / took
        print(f"migrate: {n:,} records in {took:.1f} s = {rate:,.0f} records/s")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    asyncio.run(main())

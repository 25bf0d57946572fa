"""Many handles opening the same NEW file at once: none may fail with
"database is locked" while the first one switches it to WAL and creates the
schema (SQLite refuses that lock at once, without the busy handler)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from agent_memory.adapters.sqlite import SqliteLeaseStore


async def test_concurrent_first_opens_of_one_file_all_succeed(tmp_path: Path) -> None:
    for round_ in range(40):
        path = tmp_path / f"fresh-{round_}.db"
        stores = [SqliteLeaseStore(path) for _ in range(12)]
        try:
            results = await asyncio.gather(
                *(
                    s.acquire("jobs", "lock", f"replica-{i}", timedelta(seconds=30))
                    for i, s in enumerate(stores)
                )
            )
        finally:
            for s in stores:
                await s.close()
        assert sum(r is not None for r in results) == 1, "exactly one replica holds the lock"

"""Two processes writing one SQLite file at once lose nothing, and leases stay
exclusive across processes (fencing tokens unique per key, no lost update of a
lease-guarded counter)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlite_worker import EVENTS, KEYS, LEASE_ROUNDS, RECORDS, SPACE

from agent_memory.adapters.sqlite import open_sqlite

WORKER = Path(__file__).with_name("sqlite_worker.py")
NAMES = ("alpha", "beta")


def _run_workers(db: Path, tmp: Path) -> list[dict[str, Any]]:
    """Start both workers, release them at the same instant, return their reports."""
    go = tmp / "go"
    outs = [tmp / f"{n}.json" for n in NAMES]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(db), name, str(go), str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, out in zip(NAMES, outs, strict=True)
    ]
    try:
        deadline = time.monotonic() + 60
        while not all(Path(f"{out}.ready").exists() for out in outs):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            assert time.monotonic() < deadline, "workers never became ready"
            time.sleep(0.01)
        go.touch()
        for proc in procs:
            _out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return [json.loads(out.read_text()) for out in outs]


async def test_two_processes_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    observer = open_sqlite(db, space=SPACE)
    # Warm this process's matrix cache before the other processes write.
    assert await observer.store.search("shared", np.ones(SPACE.dimension), limit=5) == []

    reports = await asyncio.to_thread(_run_workers, db, tmp_path)
    spans = [r["span"] for r in reports]
    assert max(s[0] for s in spans) < min(s[1] for s in spans), f"no overlap: {spans}"

    # Every record of both processes is there, once ...
    ids: list[str] = []
    cursor = None
    while True:
        page = await observer.store.list("shared", limit=300, cursor=cursor)
        ids.extend(r.id for r in page.records)
        cursor = page.next_cursor
        if cursor is None:
            break
    expected = {f"{n}-{i}" for n in NAMES for i in range(RECORDS)}
    assert len(ids) == len(expected)
    assert set(ids) == expected
    # ... and search through the cache warmed before they wrote sees all of them.
    hits = await observer.store.search("shared", np.ones(SPACE.dimension), limit=5000)
    assert {h.record.id for h in hits} == expected

    window = await observer.events.window(
        "shared", since=datetime.now(UTC) - timedelta(days=1), limit=5000
    )
    assert not window.limited
    assert {e.id for e in window.events} == {f"{n}-{i}" for n in NAMES for i in range(EVENTS)}

    # Fencing: per key, the tokens both processes got are exactly 1..n, each once,
    # so no two acquisitions ever shared a token (one holder at a time) ...
    observed = [r["tokens"] for r in reports]
    assert sum(len(obs[k]) for obs in observed for k in KEYS) == 2 * LEASE_ROUNDS
    for key in KEYS:
        tokens = sorted(t for obs in observed for t in obs[key])
        assert tokens == list(range(1, len(tokens) + 1)), (key, tokens)
        # ... and the counter each holder incremented under the lease lost no update.
        counter = await observer.cache.get("counters", key)
        assert counter is not None, key
        assert int(counter) == len(tokens), (key, counter, len(tokens))
    await observer.close()

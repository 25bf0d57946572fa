"""The bulk path: an import into PostgreSQL runs in the store's bulk-load session
(`BulkLoad`: rows COPY'd without the HNSW index, the index built once at the end)
and stays idempotent and resumable; a small import into a larger store keeps the
index; other targets keep the plain batch path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from agent_memory.adapters.postgres import schema_for_deployment
from agent_memory.bootstrap.connect import connect
from agent_memory.bootstrap.settings import Settings
from agent_memory.portability import BulkLoad, export, import_file, ports_of

from .helpers import events, records, settings, snapshot

ROOT = Path(__file__).resolve().parents[2]
OWNERS = ["ana", "bo:{x}", "ç"]
DOMAINS = ["dev", "ops"]


async def _hnsw_indexes(url: str, s: Settings) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = %s AND indexdef LIKE %s",
            (schema_for_deployment(s.deployment), "%USING hnsw%"),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def _export(tmp_path: Path, name: str, n: int, start: int = 0) -> str:
    """A file of records r-<start>..r-<start+n-1> (and 6 events when start is 0)."""
    async with connect("memory://", settings=settings(tmp_path)) as m:
        batch = records(start + n)[start:]
        await m.store.add(batch)
        if start == 0:
            await m.events.append(events(6, datetime.now(UTC)))
        path = str(tmp_path / name)
        await export(m, path)
    return path


async def test_bulk_import_is_idempotent_and_builds_the_index_once(
    tmp_path: Path, postgres_url: str
) -> None:
    s = settings(tmp_path)
    path = await _export(tmp_path, "all.jsonl", 60)
    done = await import_file(postgres_url, path, settings=s, batch_size=8)
    assert done.complete, done.describe()
    assert done.bulk, done.describe()
    assert (done.written["record"], done.written["event"]) == (60, 6)
    assert "bulk load, index built in" in done.describe()
    assert await _hnsw_indexes(postgres_url, s) == 1
    async with connect(postgres_url, settings=s) as m:
        assert isinstance(m.store, BulkLoad)
        first = await snapshot(ports_of(m), OWNERS, DOMAINS)
    assert len(first["records"]) == 60  # type: ignore[arg-type]

    again = await import_file(postgres_url, path, settings=s, batch_size=8)  # a re-run
    assert again.complete, again.describe()
    assert (again.written["record"], again.updated["record"]) == (0, 0)
    assert (again.unchanged["record"], again.unchanged["event"]) == (60, 6)
    assert await _hnsw_indexes(postgres_url, s) == 1
    async with connect(postgres_url, settings=s) as m:
        assert await snapshot(ports_of(m), OWNERS, DOMAINS) == first
        hits = await m.store.search("ana", first["records"][("ana", "r-0")].vector, limit=1)  # type: ignore[index]
        assert [h.record.id for h in hits] == ["r-0"]

    # A few records into a larger store: rebuilding its index would cost more
    # than inserting them, so the session keeps the index.
    few = await _export(tmp_path, "few.jsonl", 5, start=60)
    small = await import_file(postgres_url, few, settings=s, batch_size=8)
    assert small.complete, small.describe()
    assert not small.bulk, small.describe()
    assert small.written["record"] == 5
    assert await _hnsw_indexes(postgres_url, s) == 1

    # An import interrupted after its records (the index still dropped) and
    # resumed with only events left rebuilds the index all the same.
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT quote_ident(schemaname) || '.' || quote_ident(indexname) FROM pg_indexes"
            " WHERE schemaname = %s AND indexdef LIKE %s",
            (schema_for_deployment(s.deployment), "%USING hnsw%"),
        )
        row = await cur.fetchone()
        assert row is not None
        await conn.execute(f"DROP INDEX {row[0]}")
    assert await _hnsw_indexes(postgres_url, s) == 0
    async with connect("memory://", settings=settings(tmp_path)) as m:
        await m.events.append(events(3, datetime.now(UTC)))
        only_events = str(tmp_path / "events.jsonl")
        await export(m, only_events)
    rest = await import_file(postgres_url, only_events, settings=s)
    assert rest.complete, rest.describe()
    assert rest.bulk, rest.describe()
    assert await _hnsw_indexes(postgres_url, s) == 1


async def test_other_targets_keep_the_batch_path(tmp_path: Path) -> None:
    s = settings(tmp_path)
    path = await _export(tmp_path, "all.jsonl", 12)
    url = f"sqlite:///{tmp_path}/t.db"
    done = await import_file(url, path, settings=s, batch_size=5)
    assert done.complete, done.describe()
    assert not done.bulk
    assert done.index_seconds == 0.0
    async with connect(url, settings=s) as m:
        assert not isinstance(m.store, BulkLoad)


_CHILD = """
import asyncio, os, signal, sys
from agent_memory.portability import import_file
def kill(line, summary):
    if summary.written["record"] >= 12:
        os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(import_file(sys.argv[1], sys.argv[2], batch_size=4, on_batch=kill))
"""


async def test_bulk_import_killed_mid_file_resumes_and_rebuilds_the_index(
    tmp_path: Path, postgres_url: str
) -> None:
    s = settings(tmp_path)
    path = await _export(tmp_path, "big.jsonl.gz", 40)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "AGENT_MEMORY_DEPLOYMENT": s.deployment,
    }
    child = subprocess.run(  # noqa: ASYNC221
        [sys.executable, "-c", _CHILD, postgres_url, path],
        env=env, capture_output=True, timeout=120,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    progress = json.loads(Path(path + ".progress").read_text())  # noqa: ASYNC240
    assert 1 < progress["line"] < 41  # stopped mid-records
    assert await _hnsw_indexes(postgres_url, s) == 0  # the bulk session had dropped it

    resumed = subprocess.run(  # noqa: ASYNC221
        [sys.executable, "-m", "agent_memory.entrypoints.cli", "import", "--url", postgres_url,
         path],
        env=env, capture_output=True, timeout=120, text=True,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed after line {progress['line']}" in resumed.stdout
    assert "already there" not in resumed.stdout  # the stored batches are skipped, not redone
    assert "bulk load" in resumed.stdout
    assert not Path(path + ".progress").exists()  # noqa: ASYNC240
    assert await _hnsw_indexes(postgres_url, s) == 1  # rebuilt by the resumed session

    clean = settings(tmp_path)  # another deployment: another schema
    await import_file(postgres_url, path, settings=clean)
    async with (
        connect(postgres_url, settings=s) as a,
        connect(postgres_url, settings=clean) as b,
    ):
        got = await snapshot(ports_of(a), OWNERS, DOMAINS)
        want = await snapshot(ports_of(b), OWNERS, DOMAINS)
    assert len(want["records"]) == 40  # type: ignore[arg-type]
    assert got == want

"""SQLite event log: schema version 3 (retention by `recorded_at`) on files
written by version 2, and the window's bounds as index ranges."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agent_memory.adapters.sqlite import SCHEMA_VERSION
from agent_memory.adapters.sqlite.events import SqliteEventLog
from agent_memory.domain.records import Event


def _event(id: str, occurred: datetime, recorded: datetime, **kw: object) -> Event:
    return Event(
        id=id, domain="D", agent="agent", action="act", outcome="ok", summary=f"s {id}",
        occurred_at=occurred, recorded_at=recorded, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def _as_version_2(path: Path) -> None:
    """Turn a current file back into version 2's events layout."""
    with sqlite3.connect(path) as conn:
        conn.execute("DROP INDEX events_recorded")
        conn.execute("ALTER TABLE events DROP COLUMN recorded_at")
        conn.execute("CREATE INDEX events_time ON events (occurred_at)")
        conn.execute("PRAGMA user_version = 2")
    conn.close()


async def test_version_2_files_get_recorded_at_from_the_stored_events(tmp_path: Path) -> None:
    """When this fails, migration 3 left `recorded_at` at its default (every old
    event expired at once) or misread the stored JSON (microseconds, offsets)."""
    path = tmp_path / "v2.db"
    now = datetime.now(UTC)
    log = SqliteEventLog(path, retention=timedelta(hours=1))
    await log.append(
        [
            _event("backfilled", now - timedelta(days=3), now - timedelta(microseconds=7)),
            _event("stale", now - timedelta(minutes=1), now - timedelta(hours=2)),
            _event("global", now - timedelta(days=2), now, is_global=True),
        ]
    )
    await log.close()
    _as_version_2(path)

    log = SqliteEventLog(path, retention=timedelta(hours=1))
    try:
        since = now - timedelta(days=7)
        got = [e.id for e in (await log.window("D", since=since, limit=10)).events]
        assert got == ["global", "backfilled"]
        assert await log.purge_expired() == 1
    finally:
        await log.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
        stored = dict(conn.execute("SELECT id, recorded_at FROM events").fetchall())
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    conn.close()
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    want = (now - timedelta(microseconds=7) - epoch) // timedelta(microseconds=1)
    assert stored["backfilled"] == want
    assert "events_recorded" in indexes
    assert "events_time" not in indexes


async def test_window_bounds_are_index_ranges(tmp_path: Path) -> None:
    """When this fails, `since`/`until` no longer bound the event-time indexes
    (the window scans the domain and filters)."""
    path = tmp_path / "plan.db"
    log = SqliteEventLog(path)
    now = datetime.now(UTC)
    await log.append([_event(f"e{i}", now - timedelta(seconds=i), now) for i in range(50)])
    traced: list[str] = []

    # The statement the adapter runs, read back through sqlite's trace hook.
    def trace(statement: str) -> None:
        if statement.startswith("SELECT body FROM events"):
            traced.append(statement)

    await log._db.run(lambda c: c.set_trace_callback(trace))
    await log.window("D", since=now - timedelta(days=1), limit=5, until=now)
    await log.close()
    assert traced
    with sqlite3.connect(path) as conn:
        plan = " | ".join(str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + traced[-1]))
    conn.close()
    assert "SCAN" not in plan, plan
    assert "events_domain_time (domain=? AND occurred_at>? AND occurred_at<?)" in plan, plan
    assert "events_global_time (occurred_at>? AND occurred_at<?)" in plan, plan

"""Shared builders for the portability tests: deterministic data and comparisons."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.records import Entity, Event, MemoryRecord
from agent_memory.domain.triples import Triple
from agent_memory.portability import ExportReader, Ports
from agent_memory.services.portability.format import CacheItem, Item, RecordItem, open_export

DIM = 256  # the default hashing embedder's dimension
BASE = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def settings(tmp_path: Path, **changes: Any) -> Settings:
    """Settings isolated per test: a fresh deployment (Redis prefix, PostgreSQL
    schema) and a coordination SQLite file under tmp_path."""
    base = Settings.from_env()
    deployment = "pt" + uuid.uuid4().hex[:10]
    return attrs.evolve(
        base,
        deployment=deployment,
        coordination_url=f"sqlite:///{tmp_path}/coord-{deployment}.db",
        **changes,
    )


def records(
    n: int, owners: tuple[str, ...] = ("ana", "bo:{x}", "ç"), seed: int = 7
) -> list[MemoryRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        at = BASE + timedelta(milliseconds=37 * i)
        out.append(
            MemoryRecord(
                id=f"r-{i}",
                owner=owners[i % len(owners)],
                namespace="knowledge" if i % 5 == 0 else "prefs",
                kind="fact",
                content=f"fact number {i} about {owners[i % len(owners)]}",
                vector=rng.standard_normal(DIM).astype(np.float32),
                created_at=at,
                updated_at=at + timedelta(seconds=1),
                importance=round(0.1 + (i % 9) / 10, 3),
                attributes={"i": i, "tags": ["a", "ü"], "nested": {"x": None}},
                context=f"context {i}" if i % 2 else "",
            )
        )
    return out


def events(
    n: int, now: datetime, users: tuple[str | None, ...] = ("ana", None, "bo:{x}")
) -> list[Event]:
    now = now.replace(microsecond=now.microsecond // 1000 * 1000)
    return [
        Event(
            id=f"e-{i}",
            domain=("ops", "dev")[i % 2],
            agent="agent-1",
            action=f"action {i}",
            outcome="ok",
            summary=f"did {i}",
            occurred_at=now - timedelta(minutes=i),
            recorded_at=now - timedelta(seconds=i),
            entities=(Entity("pod", f"web-{i % 3}"),),
            user_id=users[i % len(users)],
            importance=0.25,
            metadata={"n": i},
            is_global=i == 3,
        )
        for i in range(n)
    ]


def triples(now: datetime) -> list[Triple]:
    at = now.replace(microsecond=0)
    return [
        Triple(
            owner="ana", loop="l1", subject="svc", predicate="uses", object="redis", created_at=at
        ),
        Triple(
            owner="ana", loop="l2", subject="svc", predicate="decided", object="pg", created_at=at
        ),
        Triple(
            owner="bo:{x}", loop="l1", subject="a", predicate="read", object="f.py", created_at=at
        ),
    ]


def read_items(path: str) -> list[Item]:
    with open_export(path, "r") as stream:
        return [item for _, item in ExportReader(stream).items()]


def by_type(items: list[Item]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {"record": [], "event": [], "triple": [], "cache": []}
    for item in items:
        if isinstance(item, RecordItem):
            out["record"].append(item)
        elif isinstance(item, Event):
            out["event"].append(item)
        elif isinstance(item, Triple):
            out["triple"].append(item)
        elif isinstance(item, CacheItem):
            out["cache"].append(item)
    return out


async def snapshot(ports: Ports, owners: list[str], domains: list[str]) -> dict[str, object]:
    """Everything comparable the ports hold for these owners and domains."""
    from agent_memory.services.portability.transfer import domain_events

    recs = {}
    for owner in owners:
        cursor = None
        while True:
            page = await ports.store.list(owner, limit=500, cursor=cursor)
            for r in page.records:
                recs[(r.owner, r.id)] = r
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    evs = {}
    if ports.events is not None:
        for d in domains:
            for e in await domain_events(ports.events, d):
                evs[(e.domain, e.id)] = e
    return {"records": recs, "events": evs}


def assert_same_records(got: dict, want: dict) -> None:  # type: ignore[type-arg]
    assert sorted(got) == sorted(want)
    for key, w in want.items():
        g = got[key]
        assert g.vector.dtype == np.float32
        assert np.array_equal(g.vector, w.vector), key  # exact float32
        assert attrs.evolve(g, vector=w.vector) == w, (key, g, w)


def sqlite_rows_with(path: Path, text: str) -> list[str]:
    """The tables of a SQLite file with a row holding `text` anywhere."""
    con = sqlite3.connect(path)
    try:
        tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return [
            t
            for t in tables
            for row in con.execute(f'SELECT * FROM "{t}"')
            if any(text in str(v) for v in row)
        ]
    finally:
        con.close()

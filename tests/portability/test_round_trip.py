"""Round trips through every backend, data compared exactly; data-subject export."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_memory.adapters.memory import InMemoryTripleStore
from agent_memory.bootstrap.connect import connect
from agent_memory.portability import Ports, export, import_file, migrate, open_ports, ports_of
from agent_memory.services.graph_memory import CHECKPOINT_SCOPE, checkpoint_key
from agent_memory.services.portability.format import CacheItem
from agent_memory.services.portability.transfer import verify_copy
from agent_memory.services.user_memory import user_cache_scope

from .helpers import (
    assert_same_records,
    by_type,
    events,
    read_items,
    records,
    settings,
    snapshot,
    triples,
)

OWNERS = ["ana", "bo:{x}", "ç"]
DOMAINS = ["dev", "ops"]


async def test_round_trip_memory_sqlite_redis_postgres_qdrant_memory(
    tmp_path: Path, redis_url: str, postgres_url: str
) -> None:
    """Every hop imports the previous hop's export and exports again; the data
    that arrives back in memory equals the original (vectors bit for bit)."""
    s = settings(tmp_path)
    now = datetime.now(UTC)
    async with connect("memory://", settings=s) as src:
        await src.store.add(records(30))
        await src.events.append(events(10, now))
        await src.cache.put("ops", "digest", b"\x00\xffbytes", timedelta(hours=1))
        await src.cache.put(CHECKPOINT_SCOPE, "k/latest", b"checkpoint")
        want = await snapshot(ports_of(src), OWNERS, DOMAINS)
        path = str(tmp_path / "hop0.jsonl.gz")
        first = await export(src, path)
    assert first.counts["record"] == 30
    assert first.counts["event"] == 10
    hops = [
        f"sqlite:///{tmp_path}/hop.db",
        redis_url,
        postgres_url,
        f"qdrant+local:///{tmp_path}/qdrant",
    ]
    for i, url in enumerate(hops, 1):
        done = await import_file(url, path, settings=s)
        assert done.complete, (url, done.describe())
        assert done.written["record"] == 30, (url, done.describe())
        path = str(tmp_path / f"hop{i}.jsonl")
        again = await export(url, path, settings=s)
        assert again.counts == first.counts, url
    async with connect("memory://", settings=s) as dst:
        await import_file(dst, path)
        got = await snapshot(ports_of(dst), OWNERS, DOMAINS)
    assert_same_records(got["records"], want["records"])  # type: ignore[arg-type]
    assert got["events"] == want["events"]
    cache = {(c.scope, c.key): c for c in by_type(read_items(path))["cache"]}
    assert isinstance(cache[("ops", "digest")], CacheItem)
    assert cache[("ops", "digest")].value == b"\x00\xffbytes"
    expires = cache[("ops", "digest")].expires_at
    assert expires is not None
    assert abs(expires - (now + timedelta(hours=1))) < timedelta(minutes=1)
    assert cache[(CHECKPOINT_SCOPE, "k/latest")].expires_at is None


async def test_triples_and_checkpoints_round_trip_and_import_is_idempotent(
    tmp_path: Path,
) -> None:
    s = settings(tmp_path)
    now = datetime.now(UTC)
    src = Ports(
        store=(mem := await connect("memory://", settings=s)).store,
        events=mem.events,
        cache=mem.cache,
        leases=mem.leases,
        triples=InMemoryTripleStore(),
        backend="memory",
    )
    try:
        assert src.triples is not None
        await src.triples.add(triples(now))
        await src.store.add(records(6))
        path = str(tmp_path / "t.jsonl")
        await export(src, path)
    finally:
        await mem.close()
    url = f"sqlite:///{tmp_path}/t.db"
    first = await import_file(url, path, settings=s)
    second = await import_file(url, path, settings=s)
    assert first.written["triple"] == 3
    assert first.written["record"] == 6
    assert second.written["triple"] == 0
    assert second.unchanged["triple"] == 3
    assert second.written["record"] == 0
    assert second.unchanged["record"] == 6
    out = str(tmp_path / "t2.jsonl")
    await export(url, out, settings=s)
    got = by_type(read_items(out))
    assert sorted(t.key for t in got["triple"]) == sorted(t.key for t in triples(now))
    assert len(got["record"]) == 6


async def test_migrate_sqlite_to_postgres_verifies(tmp_path: Path, postgres_url: str) -> None:
    s = settings(tmp_path)
    url = f"sqlite:///{tmp_path}/m.db"
    async with connect(url, settings=s) as m:
        await m.store.add(records(12))
        await m.events.append(events(4, datetime.now(UTC)))
    summary = await migrate(url, postgres_url, settings=s, batch_size=5, sample=5)
    assert summary.problems == []
    assert summary.sampled == 5
    assert summary.imported.written["record"] == 12
    assert summary.imported.bulk  # PostgreSQL's bulk-load session
    assert set(summary.seconds) == {"export", "check", "write", "index", "verify"}
    # The verification compares the target with the export's per-owner counts
    # and sampled records: a record gone from the target is reported.
    gone = records(12)[0]
    async with connect(url, settings=s) as m:
        space = m.store.space
    async with (
        open_ports(url, space=space, settings=s) as src,
        open_ports(postgres_url, space=space, settings=s) as dst,
    ):
        assert await dst.store.delete(gone.owner, gone.id)
        owners = {o: sum(r.owner == o for r in records(12)) for o in OWNERS}
        problems = await verify_copy(
            src, dst, counts={"record": 12}, sample=[gone], owner_counts=owners
        )
    assert f"owner {gone.owner!r}: 4 records on the source, 3 on the target" in problems
    assert f"record {gone.owner!r}/{gone.id!r} is missing" in problems


async def test_data_subject_export_holds_exactly_that_users_data(tmp_path: Path) -> None:
    s = settings(tmp_path)
    now = datetime.now(UTC)
    async with connect("memory://", settings=s) as m:
        await m.store.add(records(15))
        await m.events.append(events(9, now))
        await m.cache.put(user_cache_scope("ana"), "profile", b"ana's")
        await m.cache.put(user_cache_scope("bo:{x}"), "profile", b"bo's")
        await m.cache.put(CHECKPOINT_SCOPE, checkpoint_key("ana", "l1") + "/latest", b"cp-ana")
        await m.cache.put(CHECKPOINT_SCOPE, checkpoint_key("bo:{x}", "l1") + "/latest", b"cp-bo")
        path = str(tmp_path / "ana.jsonl")
        await export(m, path, user="ana")
    got = by_type(read_items(path))
    want_records = {(r.owner, r.id) for r in records(15) if r.owner == "ana"}
    assert {(i.record.owner, i.record.id) for i in got["record"]} == want_records
    want_events = {e.id for e in events(9, now) if e.user_id == "ana"}
    assert {e.id for e in got["event"]} == want_events
    assert sorted(c.value for c in got["cache"]) == [b"ana's", b"cp-ana"]


@pytest.mark.parametrize("namespace", ["prefs"])
async def test_namespace_filter(tmp_path: Path, namespace: str) -> None:
    s = settings(tmp_path)
    async with connect("memory://", settings=s) as m:
        await m.store.add(records(10))
        path = str(tmp_path / "ns.jsonl")
        await export(m, path, namespace=namespace)
    got = by_type(read_items(path))["record"]
    assert got
    assert {i.record.namespace for i in got} == {namespace}

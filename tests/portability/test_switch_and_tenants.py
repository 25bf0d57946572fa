"""Portability follows what `connect()` reads and respects the target's tenancy:
exports, imports and migrations after a re-embed move the switched space and the
switch; migrate verifies against what the source holds; a Memory's triples are
exported; import progress belongs to one target; another tenant's records are
not replaced silently; ports can be skipped explicitly."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest

from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.adapters.sqlite.triples import SqliteTripleStore
from agent_memory.bootstrap.connect import connect, redact
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.errors import InvalidInput, UnsupportedBackend
from agent_memory.domain.triples import Triple
from agent_memory.entrypoints.cli import main
from agent_memory.portability import (
    ImportFailed,
    Ports,
    WouldReplace,
    export,
    import_file,
    migrate,
    open_ports,
    ports_of,
    read_header,
    reembed,
)
from agent_memory.services.portability.transfer import SWITCH_SCOPE, verify_copy

from .helpers import by_type, events, read_items, records, settings, snapshot

ROOT = Path(__file__).resolve().parents[2]
OWNERS = ["ana", "bo:{x}", "ç"]
NEW = HashingEmbedder(512).space


def _env(s: Settings) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "AGENT_MEMORY_DEPLOYMENT": s.deployment}


async def _cli(monkeypatch: pytest.MonkeyPatch, s: Settings, *argv: str) -> tuple[int, str, str]:
    """The CLI in this process (its own event loop in a thread): exit code, stdout, stderr."""
    monkeypatch.setenv("AGENT_MEMORY_DEPLOYMENT", s.deployment)
    out, err = io.StringIO(), io.StringIO()

    def run() -> int:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return main(list(argv))

    code = await asyncio.to_thread(run)
    return code, out.getvalue(), err.getvalue()


async def _reembedded(tmp_path: Path, s: Settings, *, drop_old: bool) -> str:
    """A SQLite file of 30 records and 4 events, re-embedded into 512 dimensions."""
    url = f"sqlite:///{tmp_path}/x.db"
    async with connect(url, settings=s) as m:
        await m.store.add(records(30))
        await m.events.append(events(4, datetime.now(UTC)))
    done = await reembed(url, to_model="hashing", dimension=512, drop_old=drop_old, settings=s)
    assert done.complete
    return url


async def _count(url: str, s: Settings) -> tuple[object, int]:
    """The space connect() reads at `url` and how many records it holds there."""
    async with connect(url, settings=s) as m:
        got = await snapshot(ports_of(m), OWNERS, [])
        return m.embedder.space, len(got["records"])  # type: ignore[arg-type]


@pytest.mark.parametrize("drop_old", [True, False])
async def test_export_after_reembed_follows_the_switch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drop_old: bool
) -> None:
    s = settings(tmp_path)
    url = await _reembedded(tmp_path, s, drop_old=drop_old)
    path = str(tmp_path / "all.jsonl")
    code, out, _ = await _cli(monkeypatch, s, "export", "--url", url, "-o", path)
    assert code == 0
    assert "exported 30 records" in out, out
    assert [sp.identity for sp in read_header(path).spaces] == [NEW.identity]
    items = by_type(read_items(path))
    assert len(items["record"]) == 30
    assert [c.scope for c in items["cache"]].count(SWITCH_SCOPE) == 1  # the switch travels

    ana = str(tmp_path / "ana.jsonl")
    code, out, _ = await _cli(monkeypatch, s, "export", "--url", url, "--user", "ana", "-o", ana)
    assert code == 0
    assert "exported 10 records" in out, out
    assert read_header(ana).spaces == (NEW,)

    target = f"sqlite:///{tmp_path}/y.db"  # re-imported into the same space, reads follow it
    done = await import_file(target, path, settings=s)
    assert done.complete
    assert await _count(target, s) == (NEW, 30)


async def test_migrate_after_reembed_moves_every_record_and_verifies(
    tmp_path: Path, postgres_url: str
) -> None:
    """The command line, SQLite -> PostgreSQL, after `reembed --drop-old`."""
    s = settings(tmp_path)
    url = await _reembedded(tmp_path, s, drop_old=True)
    moved = subprocess.run(  # noqa: ASYNC221
        [sys.executable, "-m", "agent_memory.entrypoints.cli", "migrate", "--from", url,
         "--to", postgres_url],
        env=_env(s), capture_output=True, timeout=120, text=True,
    )  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    assert "migrated 30 records" in moved.stdout, moved.stdout
    assert "verified" in moved.stdout
    assert await _count(postgres_url, s) == (NEW, 30)


async def test_verification_counts_the_source_not_the_export(tmp_path: Path) -> None:
    """An export that wrote nothing of a source holding 12 records fails verification."""
    s = settings(tmp_path)
    async with (
        connect("memory://", settings=s) as src,
        connect("memory://", settings=settings(tmp_path)) as dst,
    ):
        await src.store.add(records(12))
        problems = await verify_copy(
            ports_of(src), ports_of(dst), counts={"record": 0}, sample=[], owner_counts={}
        )
    assert any("12 records on the source, 0 exported" in p for p in problems), problems
    assert any("4 records on the source, 0 on the target" in p for p in problems), problems


def _triples(n: int) -> list[Triple]:
    at = datetime.now(UTC).replace(microsecond=0)
    return [
        Triple(owner=OWNERS[i % 2], loop=f"l{i}", subject="svc", predicate="uses",
               object=f"thing {i}", created_at=at)
        for i in range(n)
    ]  # fmt: skip


async def test_exporting_an_open_memory_includes_its_triples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = settings(tmp_path)
    url = f"sqlite:///{tmp_path}/g.db"
    triples = SqliteTripleStore(f"{tmp_path}/g.db")
    try:
        assert await triples.add(_triples(40)) == 40
    finally:
        await triples.close()
    async with connect(url, settings=s) as m:
        await m.store.add(records(3))
        done = await export(m, str(tmp_path / "m.jsonl"))
        assert done.counts["triple"] == 40
        assert done.unexported == {}

        def broken(url: str, settings: Settings) -> None:
            raise UnsupportedBackend("the triple store's extra is missing")

        monkeypatch.setattr("agent_memory.bootstrap.portability.open_triple_store", broken)
        with pytest.warns(UserWarning, match="triples not exported"):
            partial = await export(m, str(tmp_path / "p.jsonl"))
    assert "triples" in partial.unexported
    assert "extra is missing" in partial.unexported["triples"]


async def test_import_progress_belongs_to_one_deployment(tmp_path: Path, postgres_url: str) -> None:
    async with connect("memory://", settings=settings(tmp_path)) as m:
        await m.store.add(records(30))
        path = str(tmp_path / "big.jsonl")
        await export(m, path)
    a, b = settings(tmp_path), settings(tmp_path)

    def die(line: int, summary: object) -> None:
        if summary.written["record"] >= 12:  # type: ignore[attr-defined]
            raise RuntimeError("killed")

    with pytest.raises(ImportFailed):
        await import_file(postgres_url, path, settings=a, batch_size=4, on_batch=die)
    assert Path(path + ".progress").exists()  # noqa: ASYNC240
    other = await import_file(postgres_url, path, settings=b, batch_size=4)
    assert other.resumed_after == 0, other.describe()  # not deployment A's progress
    assert other.written["record"] == 30
    assert (await _count(postgres_url, b))[1] == 30
    again = await import_file(postgres_url, path, settings=a)
    assert again.complete
    assert (await _count(postgres_url, a))[1] == 30


async def test_another_tenants_export_does_not_replace_records_silently(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = settings(tmp_path), settings(tmp_path)
    mine = records(20)
    theirs = [attrs.evolve(r, content=f"{r.content}!") if i % 2 else r for i, r in enumerate(mine)]
    async with connect(postgres_url, settings=a) as m:
        await m.store.add(mine)
        await m.events.append(events(3, datetime.now(UTC)))
    async with connect(postgres_url, settings=b) as m:
        await m.store.add(theirs)
        before = await snapshot(ports_of(m), OWNERS, ["dev", "ops"])
    path = str(tmp_path / "a.jsonl")
    await export(postgres_url, path, settings=a)

    with pytest.raises(WouldReplace) as refused:
        await import_file(postgres_url, path, settings=b)
    assert refused.value.count == 10
    assert a.deployment in str(refused.value)
    code, _, err = await _cli(monkeypatch, b, "import", "--url", postgres_url, path)
    assert code == 1
    assert "would replace 10 stored records" in err, err
    async with connect(postgres_url, settings=b) as m:  # nothing written, events neither
        assert await snapshot(ports_of(m), OWNERS, ["dev", "ops"]) == before

    code, out, err = await _cli(monkeypatch, b, "import", "--url", postgres_url, path, "--replace")
    assert code == 0, err
    assert "10 updated" in out, out
    async with connect(postgres_url, settings=b) as m:
        got = await snapshot(ports_of(m), OWNERS, [])
    assert sorted(r.content for r in got["records"].values()) == sorted(r.content for r in mine)  # type: ignore[attr-defined]
    header = read_header(path)  # the file names its source
    assert (header.deployment, header.url) == (a.deployment, redact(postgres_url))


class _CountingGets:
    """A real store that counts `get` calls (the refusal check must not read per record)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.gets = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def get(self, owner: str, id: str) -> object:
        self.gets += 1
        return await self.inner.get(owner, id)  # type: ignore[attr-defined]


async def test_the_replace_check_reads_by_listing_and_writes_nothing(tmp_path: Path) -> None:
    s = settings(tmp_path)
    async with connect("memory://", settings=s) as m:
        await m.store.add(records(12))
        path = str(tmp_path / "f.jsonl")
        await export(m, path)
    async with connect(f"sqlite:///{tmp_path}/t.db", settings=settings(tmp_path)) as m:
        await m.store.add([attrs.evolve(r, importance=0.99) for r in records(12)[:5]])
        store = _CountingGets(m.store)
        with pytest.raises(WouldReplace) as refused:
            await import_file(Ports(store=store, events=m.events, cache=m.cache), path)  # type: ignore[arg-type]
        assert refused.value.count == 5
        assert store.gets == 0
        assert len((await snapshot(ports_of(m), OWNERS, []))["records"]) == 5  # type: ignore[arg-type]


async def test_migrate_to_redis_with_triples_needs_an_explicit_skip(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = settings(tmp_path)
    url = f"sqlite:///{tmp_path}/g.db"
    async with connect(url, settings=s) as m:
        await m.store.add(records(9))
        await m.events.append(events(2, datetime.now(UTC)))
    triples = SqliteTripleStore(f"{tmp_path}/g.db")
    try:
        await triples.add(_triples(5))
    finally:
        await triples.close()

    code, out, err = await _cli(monkeypatch, s, "migrate", "--from", url, "--to", redis_url)
    assert code == 1
    assert "5 triples" in err
    assert "--skip triples" in err, err
    code, out, err = await _cli(
        monkeypatch, s, "migrate", "--from", url, "--to", redis_url, "--skip", "triples"
    )
    assert code == 0, err
    assert "(skipped: triples)" in out, out
    assert "migrated 9 records" in out
    async with open_ports(redis_url, space=HashingEmbedder(256).space, settings=s) as ports:
        assert len((await snapshot(ports, OWNERS, []))["records"]) == 9  # type: ignore[arg-type]

    # The library spelling of the same, and the other commands' --skip.
    done = await migrate(url, redis_url, settings=s, skip=["triples"], sample=3)
    assert done.skipped == ("triples",)
    path = str(tmp_path / "e.jsonl")
    code, out, _ = await _cli(
        monkeypatch, s, "export", "--url", url, "-o", path, "--skip", "events", "--skip", "cache"
    )
    assert code == 0
    assert "(skipped: events, cache)" in out
    assert read_header(path).skipped == ("events", "cache")
    assert by_type(read_items(path))["event"] == []
    left = await import_file(f"sqlite:///{tmp_path}/n.db", path, settings=s, skip=["triples"])
    assert left.skipped_ports == {"triples": 5}
    assert left.written["triple"] == 0
    assert "skipped triples (5 in the file)" in left.describe()
    with pytest.raises(InvalidInput, match="'graph'"):
        await export(url, path, settings=s, skip=["graph"])


async def test_ports_source_keeps_working_without_a_deployment(tmp_path: Path) -> None:
    """Ports carry no deployment: the header says so (None) and imports are unaffected."""
    async with connect("memory://", settings=settings(tmp_path)) as m:
        await m.store.add(records(4))
        await m.events.append(events(2, datetime.now(UTC) - timedelta(minutes=1)))
        path = str(tmp_path / "p.jsonl")
        await export(Ports(store=m.store, events=m.events, cache=m.cache), path)
    assert read_header(path).deployment is None
    done = await import_file(f"sqlite:///{tmp_path}/p.db", path, settings=settings(tmp_path))
    assert done.written["record"] == 4

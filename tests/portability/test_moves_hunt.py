"""Adversarial hunt on moving memory (export, import, migrate): a migrate's
"verified" compares what the target holds with what the source holds item by
item, not counts that other data can make up for; a corrupt compressed file is
reported as corrupt, not as cut short."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from agent_memory.bootstrap.connect import connect
from agent_memory.contract_tests.strategies import memory_records
from agent_memory.domain.records import EmbeddingSpace, Entity, Event, MemoryRecord
from agent_memory.domain.triples import Triple
from agent_memory.portability import (
    ExportFormatError,
    ExportReader,
    ExportWriter,
    Header,
    ImportFailed,
    TruncatedExport,
    VerificationFailed,
    export,
    import_file,
    migrate,
    open_ports,
    ports_of,
)
from agent_memory.services.portability.format import RecordItem, open_export
from agent_memory.services.portability.transfer import verify_copy

from .helpers import DIM, assert_same_records, records, settings, snapshot

NOW = datetime.now(UTC)


def _event(summary: str, *, user: str | None = "ana") -> Event:
    at = NOW - timedelta(minutes=5)
    return Event(
        id="e-1", domain="ops", agent="agent-1", action="deploy", outcome="ok",
        summary=summary, occurred_at=at, recorded_at=at, entities=(Entity("pod", "web"),),
        user_id=user,
    )  # fmt: skip


# -- migrate's verification -------------------------------------------------------------


async def test_migrate_does_not_verify_an_event_the_target_holds_in_another_version(
    tmp_path: Path, target: str
) -> None:
    """The target already holds an event of the same domain and id with other
    content (ids like `e-1` recur across deployments): the import keeps the
    target's (events are idempotent by identity), so the target does not hold the
    source's event, and the migrate must not say "verified"."""
    s = settings(tmp_path)
    source = f"sqlite:///{tmp_path}/source.db"
    async with connect(source, settings=s) as m:
        await m.store.add(records(6))
        await m.events.append([_event("the source's deploy")])
    async with connect(target, settings=s) as m:
        await m.events.append([_event("another deploy of the target")])
    with pytest.raises(VerificationFailed) as caught:
        await migrate(source, target, settings=s)
    assert any("'ops'/'e-1'" in p and "differs" in p for p in caught.value.problems), (
        caught.value.problems
    )


async def test_migrate_verifies_an_event_the_target_holds_unchanged(
    tmp_path: Path, target: str
) -> None:
    """The counterpart: the same event already on the target is no problem (a
    re-run of a migration verifies), on every backend — its times included."""
    s = settings(tmp_path)
    source = f"sqlite:///{tmp_path}/source.db"
    event = attrs.evolve(_event("same"), occurred_at=NOW - timedelta(seconds=7, microseconds=3))
    async with connect(source, settings=s) as m:
        await m.store.add(records(6))
        await m.events.append([event])
    async with connect(target, settings=s) as m:
        await m.events.append([event])
    summary = await migrate(source, target, settings=s)
    assert summary.problems == []
    assert summary.imported.unchanged["event"] == 1


async def test_verification_compares_records_by_identity_not_count(tmp_path: Path) -> None:
    """A target that lacks a record of the source but holds another one of the same
    owner (its own data) has the same count per owner: the missing record must
    still be reported when the sample does not happen to hold it."""
    async with (
        connect("memory://", settings=settings(tmp_path)) as src,
        connect("memory://", settings=settings(tmp_path)) as dst,
    ):
        mine = records(3, owners=("ana",))
        await src.store.add(mine)
        theirs = attrs.evolve(mine[0], id="the-targets-own")
        await dst.store.add([*mine[1:], theirs])
        problems = await verify_copy(
            ports_of(src), ports_of(dst), counts={"record": 3}, sample=[],
            owner_counts={"ana": 3},
        )  # fmt: skip
    assert any("'ana'/'r-0'" in p and "missing" in p for p in problems), problems


async def test_verification_compares_triples_by_identity_not_count(tmp_path: Path) -> None:
    """Likewise for triples: another triple of the owner does not make up for one
    the target lacks."""
    from agent_memory.adapters.memory import InMemoryTripleStore

    at = NOW.replace(microsecond=0)
    kept = Triple(owner="ana", loop="l", subject="a", predicate="p", object="b", created_at=at)
    lost = attrs.evolve(kept, object="c")
    other = attrs.evolve(kept, object="d")
    src_triples, dst_triples = InMemoryTripleStore(), InMemoryTripleStore()
    await src_triples.add([kept, lost])
    await dst_triples.add([kept, other])
    async with (
        connect("memory://", settings=settings(tmp_path)) as src,
        connect("memory://", settings=settings(tmp_path)) as dst,
    ):
        problems = await verify_copy(
            ports_of(src, src_triples), ports_of(dst, dst_triples), counts={}, sample=[]
        )
    assert any("triple" in p and "'c'" in p for p in problems), problems


# -- adversarial data moved whole ------------------------------------------------------

_STRAND = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"),
    min_size=1, max_size=12,
).filter(str.strip)  # fmt: skip


@st.composite
def _moved(draw: st.DrawFn) -> tuple[list[MemoryRecord], list[Event], list[Triple]]:
    recs = draw(
        st.lists(memory_records(DIM), min_size=1, max_size=5, unique_by=lambda r: (r.owner, r.id))
    )
    # microsecond timestamps (the strategy draws milliseconds): the format keeps them
    micros = draw(st.lists(st.integers(0, 999), min_size=len(recs), max_size=len(recs)))
    recs = [
        attrs.evolve(r, created_at=r.created_at + timedelta(microseconds=u),
                     updated_at=r.updated_at + timedelta(microseconds=u))
        for r, u in zip(recs, micros, strict=True)
    ]  # fmt: skip
    evs = [
        Event(
            id=draw(_STRAND), domain=draw(_STRAND), agent=draw(_STRAND), action=draw(_STRAND),
            outcome="ok", summary=draw(_STRAND),
            occurred_at=NOW - timedelta(minutes=i, microseconds=draw(st.integers(0, 999_999))),
            recorded_at=NOW, entities=((Entity(draw(_STRAND), draw(_STRAND)),)),
            user_id=draw(st.none() | _STRAND), metadata={draw(_STRAND): draw(_STRAND)},
        )
        for i in range(draw(st.integers(0, 3)))
    ]  # fmt: skip
    tri = [
        Triple(owner=r.owner, loop=draw(_STRAND), subject=draw(_STRAND),
               predicate=draw(_STRAND), object=draw(_STRAND),
               created_at=NOW - timedelta(microseconds=draw(st.integers(0, 999_999))))
        for r in recs[:2]
    ]  # fmt: skip
    return recs, evs, tri


@hsettings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=_moved())
async def test_adversarial_data_migrates_whole_and_a_rerun_verifies(
    tmp_path: Path, target: str, data: tuple[list[MemoryRecord], list[Event], list[Triple]]
) -> None:
    """Records with hostile owners and ids, any text and JSON attributes,
    microsecond times; events and triples of odd text: after a migrate the
    target holds every record and event exactly as the source (all of them, not a
    sample), and migrating again verifies with everything already there."""
    recs, evs, tri = data
    s = settings(tmp_path)
    run = uuid.uuid4().hex[:8]
    source = f"sqlite:///{tmp_path}/source-{run}.db"
    if target.startswith("sqlite"):
        target = f"sqlite:///{tmp_path}/target-{run}.db"
    has_triples = not target.startswith("redis")  # Redis serves no triple store
    async with connect(source, settings=s) as m:
        await m.store.add(recs)
        await m.events.append(evs)
        if has_triples:
            async with open_ports(source, space=m.store.space, settings=s) as p:
                assert p.triples is not None
                await p.triples.add(tri)
    skip = () if has_triples else ("triples",)
    first = await migrate(source, target, settings=s, skip=skip)
    assert first.problems == []
    again = await migrate(source, target, settings=s, skip=skip)
    assert again.imported.unchanged["record"] == len(recs)
    assert again.imported.written["record"] == again.imported.updated["record"] == 0
    owners = sorted({r.owner for r in recs})
    domains = sorted({e.domain for e in evs})
    async with connect(source, settings=s) as a, connect(target, settings=s) as b:
        want = await snapshot(ports_of(a), owners, domains)
        got = await snapshot(ports_of(b), owners, domains)
    assert_same_records(got["records"], want["records"])  # type: ignore[arg-type]
    assert got["events"] == want["events"]


# -- corrupt compressed files -----------------------------------------------------------


def _gz_export(path: Path, n: int = 40) -> bytes:
    space = EmbeddingSpace(model="m", dimension=4)
    with open_export(str(path), "w") as stream:
        w = ExportWriter(stream, Header(2, "memory", (space,), NOW))
        for i in range(n):
            w.write(
                RecordItem(
                    space.identity,
                    MemoryRecord(
                        id=f"r{i}", owner="o", namespace="n", kind="k", content="c" * i,
                        vector=np.ones(4, np.float32), created_at=NOW, updated_at=NOW,
                    ),
                )
            )  # fmt: skip
        w.finish()
    return path.read_bytes()


def _verify(path: Path) -> None:
    with open_export(str(path), "r") as stream:
        ExportReader(stream).verify()


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda d: d[:-8] + bytes(8), id="gzip-trailer-crc-zeroed"),
        pytest.param(lambda d: d + b"garbage after the gzip member", id="garbage-appended"),
    ],
)
def test_a_corrupt_gzip_file_is_not_called_truncated(tmp_path: Path, damage: object) -> None:
    """Every line and the footer read back whole, but the gzip stream is corrupt
    (its CRC does not match, or bytes follow it): the error says so — an
    `ExportFormatError` that is not `TruncatedExport`, whose advice (an interrupted
    export or a cut copy) would send the user looking for the wrong cause."""
    good = _gz_export(tmp_path / "good.jsonl.gz")
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(damage(good))  # type: ignore[operator]
    with pytest.raises(ExportFormatError) as caught:
        _verify(bad)
    assert not isinstance(caught.value, TruncatedExport), caught.value
    assert "corrupt" in str(caught.value), caught.value


@hsettings(max_examples=15, deadline=None)
@given(cut=st.integers(1, 400))
def test_a_cut_gzip_file_is_truncated(tmp_path_factory: pytest.TempPathFactory, cut: int) -> None:
    """The counterpart: a gzip file cut anywhere is `TruncatedExport`."""
    tmp = tmp_path_factory.mktemp("cut")
    good = _gz_export(tmp / "good.jsonl.gz")
    bad = tmp / "bad.jsonl.gz"
    bad.write_bytes(good[: max(1, len(good) - cut)])
    with pytest.raises(TruncatedExport):
        _verify(bad)


# -- a forget while an import runs ------------------------------------------------------


class _ForgetAfterFirstBatch:
    """The target's store, with a `users.forget` of `user` completing right after
    the import's first record batch is stored (a data-subject request answered
    while a restore runs)."""

    def __init__(self, memory: object, user: str) -> None:
        self._memory = memory
        self._store = memory.store  # type: ignore[attr-defined]
        self._user = user
        self.forgot = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def add(self, batch: list[MemoryRecord]) -> None:
        await self._store.add(batch)
        if not self.forgot:
            self.forgot = True
            receipt = await self._memory.users.forget(self._user)  # type: ignore[attr-defined]
            assert receipt.complete


class _ForgetWhileSecondBatchIsStored(_ForgetAfterFirstBatch):
    """The forget completes after the import checked the trail for the second
    batch and before that batch is stored: the batch lands after the forget."""

    def __init__(self, memory: object, user: str) -> None:
        super().__init__(memory, user)
        self.calls = 0

    async def add(self, batch: list[MemoryRecord]) -> None:
        self.calls += 1
        if self.calls == 2 and not self.forgot:
            self.forgot = True
            receipt = await self._memory.users.forget(self._user)  # type: ignore[attr-defined]
            assert receipt.complete
        await self._store.add(batch)


@pytest.mark.parametrize("hook", [_ForgetAfterFirstBatch, _ForgetWhileSecondBatchIsStored])
async def test_a_forget_during_an_import_is_not_undone_by_the_rest_of_the_file(
    tmp_path: Path, hook: type[_ForgetAfterFirstBatch]
) -> None:
    """A forget completing between two batches leaves the user's later items
    out; one completing while a batch of theirs is being stored has that batch
    removed at the end. A record of the user written after the forget (not one
    of the file's) stays."""
    s = settings(tmp_path)
    source = f"sqlite:///{tmp_path}/source.db"
    async with connect(source, settings=s) as m:
        await m.store.add(records(8, owners=("ana", "bo")))
    path = str(tmp_path / "backup.jsonl")
    await export(source, path, settings=s)
    target = f"sqlite:///{tmp_path}/target.db"
    async with connect(target, settings=settings(tmp_path)) as m:
        store = hook(m, "ana")
        ports = attrs.evolve(ports_of(m), store=store)
        summary = await import_file(ports, path, batch_size=2)
        assert store.forgot
        assert (await m.store.list("ana")).records == ()
        assert len((await m.store.list("bo")).records) == 4
        assert summary.forgotten_users == 1
        # a record of ana's written after her forget is new data: a re-run keeps it
        fresh = records(1, owners=("ana",))[0]
        fresh = attrs.evolve(fresh, id="written-after-the-forget")
        await m.store.add([fresh])
        await import_file(ports_of(m), path, batch_size=2)
        assert [r.id for r in (await m.store.list("ana")).records] == [fresh.id]


class _FailsAfterTwoUpdates:
    """The target's store; its third `update` fails (the disk went away while a
    replacing import ran)."""

    def __init__(self, store: object) -> None:
        self._store = store
        self.updates = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def update(self, record: MemoryRecord) -> None:
        self.updates += 1
        if self.updates > 2:
            raise RuntimeError("disk gone")
        await self._store.update(record)  # type: ignore[attr-defined]


async def test_a_replacing_import_that_fails_part_way_is_audited(tmp_path: Path) -> None:
    """Records replaced before the failure are on the audit trail: an
    `import_replace` entry with `failed` 1 and the replaced count (none before)."""
    s = settings(tmp_path)
    source = f"sqlite:///{tmp_path}/source.db"
    mine = records(6, owners=("ana",))
    async with connect(source, settings=s) as m:
        await m.store.add(mine)
    path = str(tmp_path / "backup.jsonl")
    await export(source, path, settings=s)
    async with connect(f"sqlite:///{tmp_path}/target.db", settings=settings(tmp_path)) as m:
        await m.store.add([attrs.evolve(r, content=r.content + " (changed)") for r in mine])
        store = _FailsAfterTwoUpdates(m.store)
        with pytest.raises(ImportFailed):
            await import_file(attrs.evolve(ports_of(m), store=store), path, replace=True)
        assert store.updates == 3
        entries = [e async for e in m.audit.entries()]
        [entry] = [e for e in entries if e.operation == "import_replace"]
        assert entry.counts["failed"] == 1
        assert entry.counts["updated"] == 2

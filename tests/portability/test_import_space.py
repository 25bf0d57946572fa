"""An import lands where the target reads, or is refused before writing.

An import writes the file's records in the file's embedding space. When the
target's `connect()` reads another space — it was re-embedded, or the file's
re-embed switch would move its reads — the records (the file's, or the
target's own) end up where reads never look, and a later `reembed --drop-old`
of the target deletes them as "deleted since the switch". These tests hold the
invariant on every backend: after an import returns, `connect()` on the target
reads every record of the file and every record it read before (also after a
`reembed --drop-old`); an import that cannot keep it raises a
`PortabilityError` and writes nothing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.bootstrap.connect import connect
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from agent_memory.portability import (
    PortabilityError,
    export,
    import_file,
    migrate,
    open_ports,
    ports_of,
    reembed,
)

from .helpers import BASE, settings, snapshot

OWNERS = ["target-user", "file-user"]


def _records(owner: str, dimension: int, n: int = 5) -> list[MemoryRecord]:
    rng = np.random.default_rng(len(owner) + dimension)
    return [
        MemoryRecord(
            id=f"{owner}-{i}",
            owner=owner,
            namespace="prefs",
            kind="fact",
            content=f"{owner} fact {i}",
            vector=rng.standard_normal(dimension).astype(np.float32),
            created_at=BASE + timedelta(seconds=i),
            updated_at=BASE + timedelta(seconds=i),
        )
        for i in range(n)
    ]


async def _reads(url: str, s: Settings) -> tuple[str, set[tuple[str, str]]]:
    """The space `connect()` reads at `url` and the records it reads there."""
    async with connect(url, settings=s) as m:
        got = await snapshot(ports_of(m), OWNERS, [])
        return m.embedder.space.identity, set(got["records"])  # type: ignore[call-overload]


async def _held(url: str, s: Settings, space: EmbeddingSpace) -> set[tuple[str, str]]:
    async with open_ports(url, space=space, settings=s) as ports:
        return set((await snapshot(ports, OWNERS, []))["records"])  # type: ignore[call-overload]


def _ids(records: list[MemoryRecord]) -> set[tuple[str, str]]:
    return {(r.owner, r.id) for r in records}


async def _source(tmp_path: Path, s: Settings, *, reembed_to: int | None) -> str:
    """A SQLite source of `file-user`'s records in `s`'s configured space,
    re-embedded to `reembed_to` dimensions when given; its export file."""
    url = f"sqlite:///{tmp_path}/source-{s.deployment}.db"
    async with connect(url, settings=s) as m:
        await m.store.add(_records("file-user", m.embedder.space.dimension))
    if reembed_to is not None:
        assert (await reembed(url, to_model="hashing", dimension=reembed_to, settings=s)).complete
    path = str(tmp_path / f"export-{s.deployment}.jsonl")
    await export(url, path, settings=s)
    return path


async def _target(url: str, s: Settings, *, reembed_to: int | None) -> set[tuple[str, str]]:
    """`target-user`'s records at `url`, re-embedded when asked; what it reads."""
    async with connect(url, settings=s) as m:
        await m.store.add(_records("target-user", m.embedder.space.dimension))
    if reembed_to is not None:
        assert (await reembed(url, to_model="hashing", dimension=reembed_to, settings=s)).complete
    _, before = await _reads(url, s)
    assert before == _ids(_records("target-user", 1))
    return before


async def _import_keeps_everything_read(
    url: str, s: Settings, path: str, before: set[tuple[str, str]]
) -> None:
    """The invariant: the import is read whole and hides nothing, or it is
    refused and writes nothing; a later `reembed --drop-old` loses nothing."""
    space_before, _ = await _reads(url, s)
    try:
        await import_file(url, path, settings=s)
    except PortabilityError:
        assert await _reads(url, s) == (space_before, before), "a refused import wrote"
        return
    want = before | _ids(_records("file-user", 1))
    space, got = await _reads(url, s)
    assert got == want, f"connect() reads {sorted(got)} in {space}, not every record"
    assert (await reembed(url, to_model="hashing", dimension=512, settings=s)).complete
    await reembed(url, to_model="hashing", dimension=512, settings=s, drop_old=True)
    space, got = await _reads(url, s)
    assert got == want, f"after reembed --drop-old connect() reads {sorted(got)} in {space}"


async def test_an_import_into_a_reembedded_target_is_read_or_refused(
    tmp_path: Path, target: str
) -> None:
    """When this fails, an export of a store that was never re-embedded (its
    records in the configured space) was imported into a target whose reads a
    re-embed had switched: the records went into the target's old space, which
    `connect()` no longer reads and `reembed --drop-old` empties."""
    s = settings(tmp_path)
    before = await _target(target, s, reembed_to=512)
    path = await _source(tmp_path, settings(tmp_path), reembed_to=None)
    await _import_keeps_everything_read(target, s, path, before)


async def test_an_import_does_not_hide_the_targets_records(tmp_path: Path, target: str) -> None:
    """When this fails, the re-embed switch a file carries was written over a
    target that holds records in its configured space: its reads moved to the
    file's space and every record it held disappeared from them (and from the
    target altogether after `reembed --drop-old`)."""
    s = settings(tmp_path)
    before = await _target(target, s, reembed_to=None)
    path = await _source(tmp_path, settings(tmp_path), reembed_to=512)
    await _import_keeps_everything_read(target, s, path, before)


async def test_an_import_keeps_the_targets_switch_to_the_files_space(
    tmp_path: Path, target: str
) -> None:
    """When this fails, both stores were re-embedded into the same space from
    different configured ones, and the file's switch (from the source's
    configured space) replaced the target's: `connect()` on the target no longer
    followed it and read the target's old space instead."""
    s = settings(tmp_path)
    before = await _target(target, s, reembed_to=512)
    path = await _source(tmp_path, settings(tmp_path, embedding_dimension=384), reembed_to=512)
    await _import_keeps_everything_read(target, s, path, before)


async def test_migrate_into_a_reembedded_target_is_read_or_refused(tmp_path: Path) -> None:
    """`migrate` says "verified" only when `connect()` on the target reads what
    it moved: into a re-embedded target it moved the records into the target's
    old space and verified them there."""
    s = settings(tmp_path)
    url = f"sqlite:///{tmp_path}/target.db"
    before = await _target(url, s, reembed_to=512)
    source = f"sqlite:///{tmp_path}/source.db"
    async with connect(source, settings=s) as m:
        await m.store.add(_records("file-user", m.embedder.space.dimension))
    try:
        await migrate(source, url, settings=s)
    except PortabilityError:
        assert await _held(url, s, HashingEmbedder(256).space) == before  # nothing written
        return
    _, got = await _reads(url, s)
    assert got == before | _ids(_records("file-user", 1)), "verified, but not read"


async def test_an_interrupted_import_of_a_reembedded_export_resumes(
    tmp_path: Path, target: str
) -> None:
    """The space check runs again when an import resumes: the records the first
    run wrote are in the file's space, not where the empty target's `connect()`
    read, so the resumed run is not refused as one that would hide them."""
    s = settings(tmp_path)
    path = await _source(tmp_path, s, reembed_to=512)

    class Stop(Exception):
        pass

    def stop(line: int, summary: object) -> None:
        raise Stop

    with pytest.raises(PortabilityError):
        await import_file(target, path, settings=s, batch_size=2, on_batch=stop)
    assert Path(path + ".progress").exists()  # noqa: ASYNC240
    await import_file(target, path, settings=s, batch_size=2)
    space, got = await _reads(target, s)
    assert got == _ids(_records("file-user", 1)), f"read {sorted(got)} in {space}"

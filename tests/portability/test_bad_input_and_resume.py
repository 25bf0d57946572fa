"""Bad files give typed errors naming the line and write nothing; an import killed
mid-file resumes to the same final state; the format round-trips any record."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from agent_memory.bootstrap.connect import connect
from agent_memory.contract_tests.strategies import memory_records
from agent_memory.portability import (
    ChecksumMismatch,
    ExportFormatError,
    PortabilityError,
    TruncatedExport,
    UnknownRecordType,
    UnsupportedFormatVersion,
    WrongDimension,
    export,
    import_file,
    ports_of,
)
from agent_memory.services.portability.format import (
    ExportReader,
    ExportWriter,
    Header,
    RecordItem,
)

from .helpers import DIM, events, records, settings, snapshot

ROOT = Path(__file__).resolve().parents[2]


async def _export(tmp_path: Path, n: int = 8) -> list[bytes]:
    async with connect("memory://", settings=settings(tmp_path)) as m:
        await m.store.add(records(n))
        path = str(tmp_path / "good.jsonl")
        await export(m, path)
    return Path(path).read_bytes().splitlines(keepends=True)  # noqa: ASYNC240


def _footer_fixed(lines: list[bytes]) -> list[bytes]:
    """Recompute the footer so only the line under test is wrong."""
    import hashlib

    body = lines[:-1]
    footer = json.loads(lines[-1])
    footer["sha256"] = hashlib.sha256(b"".join(body)).hexdigest()
    footer["lines"] = len(body)
    return [*body, json.dumps(footer).encode() + b"\n"]


def _mutate(line: bytes, **changes: object) -> bytes:
    obj = json.loads(line)
    obj.update(changes)
    return json.dumps(obj).encode() + b"\n"


async def _assert_rejected(tmp_path: Path, data: list[bytes], error: type, line: int) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"".join(data))
    s = settings(tmp_path)
    url = f"sqlite:///{tmp_path}/target.db"
    with pytest.raises(error) as caught:
        await import_file(url, str(bad), settings=s, batch_size=1)
    assert isinstance(caught.value, ExportFormatError)
    assert caught.value.line == line
    assert f"line {line}" in str(caught.value)
    async with connect(url, settings=s) as m:  # nothing half-written
        got = await snapshot(ports_of(m), ["ana", "bo:{x}", "ç"], [])
    assert got["records"] == {}


async def test_truncated_file(tmp_path: Path) -> None:
    lines = await _export(tmp_path)
    await _assert_rejected(tmp_path, lines[:-1], TruncatedExport, len(lines))
    await _assert_rejected(tmp_path, [*lines[:-2], lines[-2][:40]], TruncatedExport, len(lines) - 1)


async def test_corrupted_line_and_checksum(tmp_path: Path) -> None:
    lines = await _export(tmp_path)
    await _assert_rejected(tmp_path, [*lines[:3], b"{not json\n", *lines[4:]], ExportFormatError, 4)
    edited = [*lines[:3], lines[3].replace(b"fact number", b"fact NUMBER"), *lines[4:]]
    # The mismatch names the edited line, not the footer (the footer's line digests).
    await _assert_rejected(tmp_path, edited, ChecksumMismatch, 4)
    # A file written before line digests existed: the footer, saying it cannot localise.
    old_footer = json.loads(lines[-1])
    del old_footer["line_crc32"]
    old = [*edited[:-1], json.dumps(old_footer).encode() + b"\n"]
    await _assert_rejected(tmp_path, old, ChecksumMismatch, len(lines))
    bad = tmp_path / "bad.jsonl"
    with pytest.raises(ChecksumMismatch, match="cannot localise"):
        await import_file(f"sqlite:///{tmp_path}/t2.db", str(bad), settings=settings(tmp_path))
    # Unedited, the older footer still imports.
    fine = tmp_path / "old.jsonl"
    fine.write_bytes(b"".join([*lines[:-1], json.dumps(old_footer).encode() + b"\n"]))
    done = await import_file(f"sqlite:///{tmp_path}/t3.db", str(fine), settings=settings(tmp_path))
    assert done.complete


async def test_wrong_dimension_unknown_type_newer_version(tmp_path: Path) -> None:
    lines = await _export(tmp_path)
    short = base64.b64encode(np.zeros(DIM - 1, dtype="<f4").tobytes()).decode()
    wrong = _footer_fixed([*lines[:2], _mutate(lines[2], vector=short), *lines[3:]])
    await _assert_rejected(tmp_path, wrong, WrongDimension, 3)
    unknown = _footer_fixed([*lines[:5], _mutate(lines[5], type="memo"), *lines[6:]])
    await _assert_rejected(tmp_path, unknown, UnknownRecordType, 6)
    newer = [_mutate(lines[0], version=99), *lines[1:]]
    await _assert_rejected(tmp_path, newer, UnsupportedFormatVersion, 1)


async def test_target_without_a_needed_port_is_refused_before_writing(
    tmp_path: Path, redis_url: str
) -> None:
    """A file with triples cannot go to Redis (no triple store): refused up front."""
    from agent_memory.domain.triples import Triple
    from agent_memory.services.portability.format import FORMAT_VERSION

    path = tmp_path / "t.jsonl"
    from agent_memory.adapters.memory.embedder import HashingEmbedder

    space = HashingEmbedder(DIM).space
    with path.open("wb") as fh:
        w = ExportWriter(fh, Header(FORMAT_VERSION, "memory", (space,), datetime.now(UTC)))
        w.write(RecordItem(space.identity, records(1)[0]))
        w.write(Triple(owner="a", loop="l", subject="s", predicate="p", object="o",
                       created_at=datetime.now(UTC)))  # fmt: skip
        w.finish()
    s = settings(tmp_path)
    with pytest.raises(PortabilityError, match=r"1 triples.*nothing was imported"):
        await import_file(redis_url, str(path), settings=s)


_CHILD = """
import asyncio, os, signal, sys
from agent_memory.portability import import_file
from agent_memory.bootstrap.settings import Settings
import attrs
def kill(line, summary):
    if summary.written["record"] + summary.unchanged["record"] >= 10:
        os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(import_file(sys.argv[1], sys.argv[2], batch_size=4, on_batch=kill))
"""


async def test_import_killed_mid_file_resumes_to_the_same_state(tmp_path: Path) -> None:
    s = settings(tmp_path)
    async with connect("memory://", settings=s) as m:
        await m.store.add(records(30))
        await m.events.append(events(6, datetime.now(UTC)))
        path = str(tmp_path / "big.jsonl.gz")
        await export(m, path)
    killed = f"sqlite:///{tmp_path}/killed.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    child = subprocess.run(  # noqa: ASYNC221
        [sys.executable, "-c", _CHILD, killed, path], env=env, capture_output=True, timeout=120
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    progress = json.loads(Path(path + ".progress").read_text())  # noqa: ASYNC240
    assert 1 < progress["line"] < 31  # stopped mid-records
    resumed = subprocess.run(  # noqa: ASYNC221
        [sys.executable, "-m", "agent_memory.entrypoints.cli", "import", "--url", killed, path],
        env=env, capture_output=True, timeout=120, text=True,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed after line {progress['line']}" in resumed.stdout
    assert "already there" not in resumed.stdout  # the stored batches are skipped, not redone
    assert not Path(path + ".progress").exists()  # noqa: ASYNC240
    clean = f"sqlite:///{tmp_path}/clean.db"
    await import_file(clean, path, settings=s)
    async with connect(killed, settings=s) as a, connect(clean, settings=s) as b:
        owners, domains = ["ana", "bo:{x}", "ç"], ["dev", "ops"]
        got, want = (
            await snapshot(ports_of(a), owners, domains),
            await snapshot(ports_of(b), owners, domains),
        )
    assert len(want["records"]) == 30  # type: ignore[arg-type]
    assert got == want


@hsettings(max_examples=25, deadline=None)
@given(batch=st.lists(memory_records(16), max_size=6, unique_by=lambda r: (r.owner, r.id)))
def test_format_round_trips_any_record_exactly(batch: list) -> None:  # type: ignore[type-arg]
    """Property: write then read gives back every record, vectors bit for bit."""
    import io

    from agent_memory.domain.records import EmbeddingSpace

    space = EmbeddingSpace(model="m", dimension=16)
    buf = io.BytesIO()
    w = ExportWriter(buf, Header(1, "memory", (space,), datetime.now(UTC)))
    for r in batch:
        w.write(RecordItem(space.identity, r))
    footer = w.finish()
    buf.seek(0)
    got = [item for _, item in ExportReader(buf).items()]
    assert footer.counts["record"] == len(batch)
    assert [g.record for g in got] == batch  # type: ignore[union-attr]
    for g, r in zip(got, batch, strict=True):
        assert g.record.vector.tobytes() == r.vector.tobytes()  # type: ignore[union-attr]


@hsettings(max_examples=25, deadline=None)
@given(batch=st.lists(memory_records(16), max_size=6, unique_by=lambda r: (r.owner, r.id)))
def test_checked_lines_are_read_back_equal_without_revalidation(batch: list) -> None:  # type: ignore[type-arg]
    """Property: a reader given the fingerprints of a verified file (the import's
    second pass) builds records equal, field by field, to the validated ones."""
    import io

    from agent_memory.domain.records import EmbeddingSpace
    from agent_memory.services.portability.format import trusted_parsing_applies

    assert trusted_parsing_applies()  # else the fast path is silently off
    space = EmbeddingSpace(model="m", dimension=16)
    buf = io.BytesIO()
    w = ExportWriter(buf, Header(1, "memory", (space,), datetime.now(UTC)))
    for r in batch:
        w.write(RecordItem(space.identity, r))
    w.finish()
    buf.seek(0)
    first = ExportReader(buf)
    first.verify()
    buf.seek(0)
    got = [item for _, item in ExportReader(buf, checked=first.fingerprints).items()]
    assert [g.record for g in got] == batch  # type: ignore[union-attr]
    for g, r in zip(got, batch, strict=True):
        v = g.record.vector  # type: ignore[union-attr]
        assert v.dtype == np.float32
        assert not v.flags.writeable
        assert v.tobytes() == r.vector.tobytes()
        for name in ("created_at", "updated_at", "importance", "attributes"):
            assert type(getattr(g.record, name)) is type(getattr(r, name)), name  # type: ignore[union-attr]
        assert g.record.created_at.tzinfo == UTC  # type: ignore[union-attr]


async def test_a_line_changed_after_the_check_is_refused(tmp_path: Path) -> None:
    """The second pass trusts only the very lines the first one checked."""
    import io

    lines = await _export(tmp_path, n=3)
    first = ExportReader(io.BytesIO(b"".join(lines)))
    first.verify()
    changed = [*lines[:2], lines[2].replace(b'"importance":', b'"importance": '), *lines[3:]]
    reader = ExportReader(io.BytesIO(b"".join(changed)), checked=first.fingerprints)
    with pytest.raises(ExportFormatError) as caught:
        list(reader.items())
    assert caught.value.line == 3

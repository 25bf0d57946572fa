"""The CLI and the export format under adversarial use: output closed early, a
corrupt gzip export, lines whose JSON is valid but whose fields are not, an
export file in a directory the import cannot write its progress to.

Every failure is one typed line naming what is wrong (the line of the file),
never a traceback nor an untyped builtin error; nothing is half-applied."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import uuid
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap.connect import connect
from agent_memory.domain.records import Entity, Event, MemoryRecord
from agent_memory.portability import ExportFormatError, ExportReader, import_file, ports_of
from agent_memory.services.portability.format import ExportWriter, Header, RecordItem

SPACE = HashingEmbedder().space  # what connect() uses in the tests
AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _cli(
    *args: str, stdout: int | None = subprocess.PIPE, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`agent-memory ARGS` as a user runs it: no PYTHONUNBUFFERED (stdout to a
    pipe is block-buffered), no AGENT_MEMORY_* from the test environment."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENT_MEMORY_") and k != "PYTHONUNBUFFERED"
    }
    env["AGENT_MEMORY_EMBEDDER"] = "hashing"
    return subprocess.run(
        [sys.executable, "-m", "agent_memory.entrypoints.cli", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def _event(i: int, **changes: Any) -> Event:
    fields: dict[str, Any] = {
        "id": f"e-{i}",
        "domain": "k8s",
        "agent": "a",
        "action": f"step {i}",
        "outcome": "ok",
        "summary": f"did {i}",
        "occurred_at": AT,
        "recorded_at": AT,
        "entities": (Entity("pod", f"web-{i}"),),
        "importance": 0.5,
        "metadata": {},
        "is_global": False,
    }
    fields.update(changes)
    return Event(**fields)


def _record(i: int) -> RecordItem:
    vector = np.arange(SPACE.dimension, dtype=np.float32) + i
    record = MemoryRecord(
        id=f"r-{i}",
        owner="ana",
        namespace="prefs",
        kind="fact",
        content=f"fact {i} ☃",
        vector=vector,
        created_at=AT,
        updated_at=AT,
        importance=0.5,
        attributes={},
    )
    return RecordItem(space=SPACE.identity, record=record)


def _export_bytes(n_events: int = 3, n_records: int = 2) -> bytes:
    buf = io.BytesIO()
    writer = ExportWriter(buf, Header(version=2, source="memory", spaces=(SPACE,), created_at=AT))
    for i in range(n_records):
        writer.write(_record(i))
    for i in range(n_events):
        writer.write(_event(i))
    writer.finish()
    return buf.getvalue()


def _with_footer(lines: list[bytes]) -> bytes:
    """`lines` (header first, each ending in a newline) with a footer that
    matches them: what a writer with a bug, or an edit that recomputed the
    checksums, would produce. The reader must still check every field."""
    sha = hashlib.sha256()
    crcs = bytearray()
    counts: dict[str, int] = {}
    for raw in lines:
        sha.update(raw)
        crcs += zlib.crc32(raw).to_bytes(4, "big")
    for raw in lines[1:]:
        kind = "event" if raw.startswith(b'{"type":"event"') else json.loads(raw)["type"]
        counts[kind] = counts.get(kind, 0) + 1
    footer = {
        "type": "footer",
        "counts": counts,
        "lines": len(lines),
        "sha256": sha.hexdigest(),
        "line_crc32": base64.b64encode(bytes(crcs)).decode(),
    }
    return b"".join(lines) + json.dumps(footer).encode() + b"\n"


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def _verify(data: bytes) -> None:
    stream: Any = io.BytesIO(data)
    if data[:2] == b"\x1f\x8b":
        stream = gzip.GzipFile(fileobj=stream, mode="rb")
    ExportReader(stream).verify()


# -- stdout closed early ------------------------------------------------------------------


def _closed_stdout(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run with stdout a pipe whose reader is gone before the command writes
    (`agent-memory ... | head -1` once head has exited): deterministic, no sleep."""
    read, write = os.pipe()
    os.close(read)
    try:
        return _cli(*args, stdout=write, cwd=cwd)
    finally:
        os.close(write)


@pytest.mark.parametrize(
    "args",
    [("--version",), ("export", "--help"), ("doctor", "--config")],
    ids=["version", "help", "doctor-config"],
)
def test_stdout_closed_early_is_one_line_not_an_ignored_exception(args: tuple[str, ...]) -> None:
    """With stdout block-buffered (a pipe, no PYTHONUNBUFFERED) the output is
    written at exit: a reader gone by then used to make Python print
    `Exception ignored in: <_io.TextIOWrapper name='<stdout>'...>
    BrokenPipeError` and exit 120."""
    result = _closed_stdout(*args)
    assert "Exception ignored" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1, (result.returncode, result.stderr)
    (line,) = result.stderr.splitlines()
    assert line.startswith("agent-memory"), line
    assert "BrokenPipeError" in line


def test_export_to_a_closed_stdout_is_one_line(tmp_path: Path) -> None:
    """`agent-memory export | head -1`: the export fails (the file is
    incomplete, exit 1) with one line, and nothing more at exit."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    assert _cli("demo", "--url", url).returncode == 0
    result = _closed_stdout("export", "--url", url)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Exception ignored" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("agent-memory export: BrokenPipeError"), line


# -- a corrupt gzip export -----------------------------------------------------------------


def test_a_corrupt_gzip_export_is_a_typed_error_at_every_byte() -> None:
    """A flipped byte in the deflate stream raised `zlib.error` ("Error -3 while
    decompressing data"), neither typed nor naming a line, through the CLI as
    `agent-memory import: error: ...`."""
    data = gzip.compress(_export_bytes(n_events=20), mtime=0)
    untyped = []
    for offset in range(10, len(data)):
        corrupt = bytearray(data)
        corrupt[offset] ^= 0x55
        try:
            _verify(bytes(corrupt))
        except ExportFormatError as exc:
            lines = exc.line
        except Exception as exc:
            untyped.append((offset, type(exc).__name__, str(exc)[:60]))
        else:
            continue
        if not isinstance(lines, int) or lines < 1:
            untyped.append((offset, "no line", str(lines)))
    assert not untyped, untyped[:5]


def _corrupt_deflate(data: bytes) -> bytes:
    """`data` (gzip) with the first byte flip past the header that zlib itself
    refuses (`zlib.error`, rather than the gzip trailer's CRC check)."""
    for offset in range(10, len(data)):
        corrupt = bytearray(data)
        corrupt[offset] ^= 0x55
        try:
            zlib.decompressobj(31).decompress(bytes(corrupt))
        except zlib.error:
            return bytes(corrupt)
    raise AssertionError("no flip corrupts the deflate stream")  # pragma: no cover


def test_the_cli_names_the_line_of_a_corrupt_gzip_export(tmp_path: Path) -> None:
    path = tmp_path / "backup.jsonl.gz"
    path.write_bytes(_corrupt_deflate(gzip.compress(_export_bytes(n_events=20), mtime=0)))
    target = tmp_path / "t.db"
    result = _cli("import", "--url", f"sqlite:///{target}", str(path))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("agent-memory import: ExportFormatError: line "), line
    assert not target.exists(), "refused before the target was opened"


# -- lines whose JSON is valid and whose fields are not ------------------------------------


def _event_line(**changes: Any) -> bytes:
    lines = _export_bytes(n_events=1, n_records=0).splitlines(keepends=True)
    obj = json.loads(lines[1])
    obj.update(changes)
    return _with_footer([lines[0], _line(obj)])


def _header_line(**changes: Any) -> bytes:
    lines = _export_bytes(n_events=1, n_records=0).splitlines(keepends=True)
    obj = json.loads(lines[0])
    obj.update(changes)
    return _with_footer([_line(obj), lines[1]])


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (_event_line(entities=[[]]), 2),
        (_event_line(entities=[{"a": 1}]), 2),
        (_event_line(entities=["ab"]), 2),
        (_event_line(entities=[["pod", "web", "extra"]]), 2),
        (_event_line(entities=[["pod", 5]]), 2),
        (_event_line(entities="pod"), 2),
        (_header_line(filter=["x"]), 1),
        (_header_line(filter={"user": 5, "namespace": None}), 1),
        (_header_line(includes=5), 1),
        (_header_line(includes="record"), 1),
        (_header_line(skipped="events"), 1),
        (_header_line(skipped=[None]), 1),
    ],
    ids=[
        "entity-empty",
        "entity-object",
        "entity-string",
        "entity-three",
        "entity-id-int",
        "entities-string",
        "filter-list",
        "filter-user-int",
        "includes-int",
        "includes-string",
        "skipped-string",
        "skipped-null",
    ],
)
def test_a_malformed_field_is_refused_naming_its_line(data: bytes, line: int) -> None:
    """These raised IndexError, KeyError, AttributeError or TypeError (not
    typed, no line), or were taken apart silently (`["ab"]` became the entity
    `a:b`; `"skipped": "events"` six one-letter ports)."""
    with pytest.raises(ExportFormatError) as caught:
        _verify(data)
    assert caught.value.line == line, caught.value


def test_a_deeply_nested_line_is_refused_naming_its_line() -> None:
    """json.loads raises RecursionError on deep nesting: it escaped untyped."""
    lines = _export_bytes(n_events=1, n_records=0).splitlines(keepends=True)
    deep = b'{"type":"event","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    with pytest.raises(ExportFormatError) as caught:
        _verify(_with_footer([lines[0], lines[1], deep]))
    assert caught.value.line == 3


@hsettings(max_examples=150, deadline=None)
@given(
    value=st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=6,
    ),
    field=st.sampled_from(
        [
            "entities",
            "metadata",
            "importance",
            "summary_source",
            "time_basis",
            "user_id",
            "filter",
            "includes",
            "skipped",
            "spaces",
            "deployment",
            "created_at",
        ]
    ),
)
def test_any_json_in_a_field_is_accepted_or_refused_typed(value: object, field: str) -> None:
    """Whatever JSON value a field holds (with checksums that match), the reader
    accepts the line or refuses it with an `ExportFormatError` naming it: never
    another exception."""
    header_fields = {"filter", "includes", "skipped", "spaces", "deployment", "created_at"}
    data = (
        _header_line(**{field: value}) if field in header_fields else _event_line(**{field: value})
    )
    line = 0
    try:
        _verify(data)
    except ExportFormatError as exc:
        line = exc.line
    else:
        return
    assert line in (1, 2)


# -- the progress file cannot be written, or holds garbage ---------------------------------


def _export_file(tmp_path: Path, n_events: int = 9) -> Path:
    path = tmp_path / "backup.jsonl"
    path.write_bytes(_export_bytes(n_events=n_events, n_records=0))
    return path


async def test_an_import_whose_progress_cannot_be_saved_still_completes(tmp_path: Path) -> None:
    """A backup on a read-only mount (here: the progress file's temporary path
    is a directory, which no user, root included, can open for writing). The
    first stored batch used to fail the import (`ImportFailed`: "Is a
    directory ... stopped after line 4"), every re-run again: the file could
    never be imported. Progress is what makes a re-run cheaper, not what makes
    it correct (the import is idempotent): the import completes, warned."""
    path = _export_file(tmp_path)
    (tmp_path / "backup.jsonl.progress.tmp").mkdir()
    async with connect(f"memory://hunt-{uuid.uuid4().hex}") as memory:
        with pytest.warns(UserWarning, match=r"backup\.jsonl\.progress"):
            summary = await import_file(memory, str(path), batch_size=3)
        assert summary.complete
        assert summary.written["event"] == 9
        assert len(await memory.events.domains()) == 1


@pytest.mark.parametrize(
    "saved",
    ["[]", '"x"', "7", '{"key": null, "line": "nine"}', "{not json"],
    ids=["list", "string", "number", "bad-line", "not-json"],
)
async def test_a_garbled_progress_file_starts_the_import_over(tmp_path: Path, saved: str) -> None:
    """A progress file that is JSON but no object raised AttributeError
    ('list' object has no attribute 'get') before anything was imported."""
    path = _export_file(tmp_path)
    progress = Path(f"{path}.progress")
    progress.write_text(saved)  # noqa: ASYNC240 - a small file, before the loop works
    async with connect(f"memory://hunt-{uuid.uuid4().hex}") as memory:
        summary = await import_file(ports_of(memory), str(path), batch_size=4)
        assert summary.complete
        assert summary.resumed_after == 0
        assert summary.written["event"] == 9
    assert not progress.exists()  # noqa: ASYNC240

"""The audit trail end to end: real forgets, deletes, imports with replace,
re-embeds and migrations through the services write one entry each, naming the
caller set by `acting_as`, holding counts and no content; a failing audit write
is reported after the operation happened; no audit storage holds forgotten text."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.bootstrap.connect import connect
from agent_memory.bootstrap.memory import Memory
from agent_memory.domain.audit import AuditEntry, decode_audit_cursor, encode_audit_cursor
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import Event, MemoryRecord
from agent_memory.portability import export, import_file, migrate, reembed
from agent_memory.services.audit import (
    AuditNotRecorded,
    acting_as,
    current_caller,
    current_tenant,
)
from portability.helpers import settings as isolated

SECRET = "Xylophone-7f3e-aubergine"


async def _seed(memory: Memory, user: str, secret: str = SECRET) -> None:
    """Facts and events of `user`, every one quoting `secret`."""
    now = datetime.now(UTC)
    (vector,) = await memory.embedder.embed([secret])
    await memory.store.add(
        [
            MemoryRecord(
                id=f"f{i}",
                owner=user,
                namespace="profile" if i < 2 else "work",
                kind="preference",
                content=f"{secret} fact {i}",
                vector=vector,
                created_at=now,
                updated_at=now,
                attributes={"note": secret},
            )
            for i in range(3)
        ]
    )
    await memory.events.append(
        [
            Event(
                id=f"e{i}",
                domain="support",
                agent="agent",
                action=f"answered {secret}",
                outcome="ok",
                summary=f"{secret} event {i}",
                occurred_at=now,
                recorded_at=now,
                user_id=user,
            )
            for i in range(2)
        ]
    )


async def _entries(memory: Memory, **filters: object) -> list[AuditEntry]:
    return [e async for e in memory.audit.entries(**filters)]  # type: ignore[arg-type]


async def test_forgets_write_entries_with_receipt_counts(tmp_path: Path) -> None:
    async with connect(f"sqlite:///{tmp_path}/a.db") as memory:
        await _seed(memory, "ana")
        await _seed(memory, "bo")
        ns = await memory.users.forget("ana", "work")
        fact = await memory.users.forget_fact("ana", "f0")
        receipt = await memory.users.forget("ana")
        removed = await memory.users.delete_scope("bo", namespace="profile")
        got = await _entries(memory)
    assert [e.operation for e in got] == [
        "delete_scope", "forget_user", "forget_fact", "forget_namespace"
    ]  # fmt: skip
    by_op = {e.operation: e for e in got}
    assert by_op["forget_namespace"].counts["facts"] == ns.facts == 1
    assert by_op["forget_fact"].counts["facts"] == fact.facts == 1
    assert by_op["forget_user"].counts["facts"] == receipt.facts == 1
    assert by_op["forget_user"].counts["events"] == receipt.events == 2
    assert by_op["delete_scope"].counts == {"records": removed}
    assert removed == 2
    assert {e.subject for e in got} == {"ana", "bo"}
    assert {(e.caller, e.tenant) for e in got} == {("library", "")}
    for item in got:
        assert SECRET not in repr(item.as_json())


async def test_acting_as_names_caller_and_unprefixed_subject() -> None:
    assert (current_caller(), current_tenant()) == ("library", "")
    async with connect(f"memory://audit-{uuid.uuid4().hex}") as memory:
        with acting_as("key-42", "acme"):
            assert (current_caller(), current_tenant()) == ("key-42", "acme")
            with acting_as("inner"):
                assert (current_caller(), current_tenant()) == ("inner", "")
            await memory.users.forget("t/acme/u/ana")
        assert current_caller() == "library"
        (got,) = await _entries(memory)
        assert (got.caller, got.tenant, got.subject) == ("key-42", "acme", "ana")
        assert await _entries(memory, tenant="acme") == [got]
        assert await _entries(memory, tenant="") == []
    with pytest.raises(InvalidInput) as info, acting_as(" "):
        pass
    assert info.value.field == "caller"


async def test_acting_as_is_per_task() -> None:
    """Concurrent requests each keep their own caller (a context variable)."""

    async def one(name: str) -> str:
        with acting_as(name):
            await asyncio.sleep(0.01)
            return current_caller()

    assert await asyncio.gather(*(one(f"k{i}") for i in range(20))) == [f"k{i}" for i in range(20)]


async def test_failed_audit_write_is_raised_after_the_forget(tmp_path: Path) -> None:
    """A forget whose entry cannot be written has still forgotten: the error says
    so and carries the receipt and the entry to append again."""
    async with connect(f"sqlite:///{tmp_path}/a.db") as memory:
        await _seed(memory, "ana")
        await memory.audit_log.close()  # the audit backend is gone
        with pytest.raises(AuditNotRecorded) as info:
            await memory.users.forget("ana")
        assert info.value.result.facts == 3
        assert info.value.entry.operation == "forget_user"
        assert (await memory.store.list("ana")).records == ()
        assert await memory.events.user_events("ana") == []
    async with connect(f"sqlite:///{tmp_path}/a.db") as memory:
        assert await _entries(memory) == []
        assert await memory.audit_log.append(info.value.entry) is True  # the retry
        assert [e.id for e in await _entries(memory)] == [info.value.entry.id]


async def test_raw_audit_storage_holds_no_forgotten_text(tmp_path: Path) -> None:
    """After forgetting users with distinctive text, no row of the SQLite audit
    table, nor any entry of the in-process audit backend, contains it."""
    path = tmp_path / "raw.db"
    async with connect(f"sqlite:///{path}") as memory:
        await _seed(memory, "ana")
        await memory.users.forget("ana")
        await _seed(memory, "bo", secret=SECRET + "-bo")
        await memory.users.forget("bo", "profile")
        await memory.users.forget_fact("bo", "f2")
        assert len(await _entries(memory)) == 3
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT * FROM audit_log").fetchall()
    assert len(rows) == 3
    dump = repr(rows)
    assert "Xylophone" not in dump
    assert "aubergine" not in dump
    assert "ana" in dump  # the subject id is there (the scan can see it)
    async with connect(f"memory://raw-{uuid.uuid4().hex}") as memory:
        await _seed(memory, "ana")
        await memory.users.forget("ana")
        backend = memory.audit_log.backend  # type: ignore[attr-defined]
        assert len(backend.entries) == 1
        assert "Xylophone" not in repr(vars(backend))


async def test_import_replace_migrate_and_reembed_are_audited(tmp_path: Path) -> None:
    s = isolated(tmp_path)
    src = f"sqlite:///{tmp_path}/src.db"
    dst = f"sqlite:///{tmp_path}/dst.db"
    async with connect(src, settings=s) as memory:
        await _seed(memory, "ana")
    out = str(tmp_path / "export.jsonl")
    await export(src, out, settings=s)
    await import_file(dst, out, settings=s)  # no replace: no entry
    with acting_as("ops-key"):
        summary = await import_file(dst, out, settings=s, replace=True)
    await migrate(src, f"sqlite:///{tmp_path}/third.db", settings=s, sample=2)
    done = await reembed(src, to_model="hashing", dimension=32, settings=s)
    async with connect(dst, settings=s) as memory:
        (imported,) = await _entries(memory)
    assert (imported.operation, imported.caller, imported.subject) == (
        "import_replace", "ops-key", None
    )  # fmt: skip
    assert imported.counts == summary.audit_counts()
    assert imported.counts["unchanged"] == 5  # 3 records, 2 events already there
    async with connect(f"sqlite:///{tmp_path}/third.db", settings=s) as memory:
        (migrated,) = await _entries(memory)
    assert migrated.operation == "migrate"
    assert migrated.counts["written"] == 5
    assert migrated.counts["problems"] == 0
    async with connect(src, settings=s) as memory:
        (switched,) = await _entries(memory)
    assert switched.operation == "reembed_switch"
    assert switched.counts["embedded"] == done.embedded == 3


def _entry(at: datetime, id_: str) -> AuditEntry:
    return AuditEntry(
        id=id_, at=at, operation="migrate", tenant="", subject=None, counts={}, caller="library"
    )


@settings(max_examples=200, deadline=None)
@given(
    at=st.datetimes(
        min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)
    ),
    id_=st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
        min_size=1,
        max_size=40,
    ).filter(str.strip),
)
def test_cursor_round_trips(at: datetime, id_: str) -> None:
    """Property: a cursor names exactly the (at, id) of the entry it follows."""
    cursor = encode_audit_cursor(_entry(at, id_))
    assert cursor.replace("-", "").replace("_", "").isalnum()  # URL-safe
    assert decode_audit_cursor(cursor) == (at, id_)


@given(garbage=st.text(max_size=60))
def test_garbage_cursor_is_invalid_input(garbage: str) -> None:
    """Property: any string that is not a cursor raises InvalidInput naming it."""
    named = "cursor"  # a string that happens to be a valid cursor decodes
    try:
        decode_audit_cursor(garbage)
    except InvalidInput as exc:
        named = exc.field
    assert named == "cursor"


def test_counts_hold_no_text() -> None:
    """A count name is a fixed-form word: free text cannot be smuggled in."""
    for name in ["user said hi", "Name", "x" * 65, "1abc", "a-b"]:
        with pytest.raises(InvalidInput):
            AuditEntry(
                id="i", at=datetime.now(UTC), operation="migrate", tenant="", subject=None,
                counts={name: 1}, caller="library",
            )  # fmt: skip


async def test_a_forget_whose_caller_is_cancelled_runs_to_its_audit_entry(
    tmp_path: Path,
) -> None:
    """A caller's timeout cut `forget` between its deletes and its audit entry:
    the facts were gone and the trail never showed the erasure. The forget now
    runs to its end in its own task: the caller gets its cancellation at once,
    `drain()` (and `Memory.close`) waits for the forget, and the entry names
    the caller the forget ran for."""
    async with connect(f"sqlite:///{tmp_path}/a.db") as memory:
        await _seed(memory, "ana")
        held = len(await memory.users.facts(user_id="ana"))
        store = memory.users.store
        entered, release = asyncio.Event(), asyncio.Event()
        delete_scope = store.delete_scope

        async def slow_delete_scope(*args: Any, **kwargs: Any) -> int:
            entered.set()
            await release.wait()
            return await delete_scope(*args, **kwargs)

        store.delete_scope = slow_delete_scope  # type: ignore[method-assign]
        with acting_as("key-7"):
            call = asyncio.ensure_future(memory.users.forget("ana"))
            await entered.wait()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
        assert await _entries(memory) == [], "nothing audited before the forget ends"
        release.set()
        await memory.users.drain()
        store.delete_scope = delete_scope  # type: ignore[method-assign]
        (entry,) = await _entries(memory)
        assert (entry.operation, entry.subject, entry.caller) == ("forget_user", "ana", "key-7")
        assert entry.counts["facts"] == held > 0
        assert entry.counts["events"] == 2
        assert await memory.users.facts(user_id="ana") == []

"""Adversarial hunt on the audit trail (docs/audit.md): every audited operation
leaves exactly one entry with the documented operation, subject, caller,
tenant and counts and none of the operation's content, on memory, SQLite,
Redis and PostgreSQL; pages never repeat or skip under concurrent appends;
adversarial subjects round-trip exactly."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_memory.bootstrap.connect import connect
from agent_memory.bootstrap.memory import Memory
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.audit import AuditEntry
from agent_memory.domain.records import Event, MemoryRecord
from agent_memory.services.audit import acting_as, stored_subject

SECRET = "Quokka-9b1d-marzipan"
BACKENDS = ["memory", "sqlite", "redis", "postgres"]


@pytest.fixture(params=BACKENDS)
async def memory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Memory]:
    deployment = "ah" + uuid.uuid4().hex[:10]
    base = attrs.evolve(Settings.from_env(), deployment=deployment)
    if request.param == "memory":
        url = f"memory://audit-{uuid.uuid4().hex}"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'a.db'}"
    elif request.param == "redis":
        url = str(request.getfixturevalue("redis_url"))
    else:
        url = str(request.getfixturevalue("postgres_url"))
    async with connect(url, settings=base) as mem:
        yield mem


async def raw_audit(memory: Memory) -> str:
    """Every byte the audit log's storage holds, as text."""
    log: Any = memory.audit_log
    name = type(log).__name__
    if name == "InMemoryAuditLog":
        return repr(list(log.backend.entries.values()))
    if name == "SqliteAuditLog":
        path = memory.url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            return repr(conn.execute("SELECT * FROM audit_log").fetchall())
    if name == "RedisAuditLog":
        out = []
        async for key in log._r.scan_iter(match=log.key_prefix + "*"):
            kind = await log._r.type(key)
            if kind in (b"hash", "hash"):
                out.append(repr(await log._r.hgetall(key)))
            else:
                out.append(repr(await log._r.zrange(key, 0, -1)))
        return "\n".join(out)
    rows = await log._db.fetch_all(
        __import__("psycopg")
        .sql.SQL("SELECT id, at::text, tenant, entry::text FROM {}")
        .format(log._table),
        (),
    )
    return repr(rows)


async def seed(memory: Memory, owner: str, secret: str = SECRET) -> None:
    now = datetime.now(UTC)
    (vector,) = await memory.embedder.embed([secret])
    await memory.store.add(
        [
            MemoryRecord(
                id=f"f{i}",
                owner=owner,
                namespace="profile" if i < 2 else "work",
                kind="preference",
                content=f"{secret} fact {i}",
                vector=vector,
                created_at=now,
                updated_at=now,
                attributes={"note": secret},
            )
            for i in range(4)
        ]
    )
    await memory.events.append(
        [
            Event(
                id=f"e{i}-{uuid.uuid4().hex[:6]}",
                domain="support",
                agent="agent",
                action=f"answered {secret}",
                outcome="ok",
                summary=f"{secret} event {i}",
                occurred_at=now,
                recorded_at=now,
                user_id=owner,
            )
            for i in range(2)
        ]
    )


async def all_entries(memory: Memory, **kw: Any) -> list[AuditEntry]:
    return [e async for e in memory.audit.entries(**kw)]


async def test_every_audited_operation_writes_one_entry_without_content(memory: Memory) -> None:
    owner = "t/acme/u/ana"
    await seed(memory, owner)
    await seed(memory, "bare-bo")
    with acting_as("key-1", "acme"):
        await memory.users.forget_fact(owner, "f0")
        await memory.users.forget(owner, "work")
        await memory.users.forget(owner)
        removed = await memory.users.delete_scope("bare-bo", namespace="profile")
    got = list(reversed(await all_entries(memory)))
    assert [e.operation for e in got] == [
        "forget_fact",
        "forget_namespace",
        "forget_user",
        "delete_scope",
    ]
    assert [e.caller for e in got] == ["key-1"] * 4
    assert [(e.tenant, e.subject) for e in got] == [("acme", "ana")] * 3 + [("", "bare-bo")]
    assert [stored_subject(e) for e in got] == [owner] * 3 + ["bare-bo"]
    assert got[0].counts["facts"] == 1
    assert got[0].counts["failures"] == 0
    assert got[1].counts["facts"] == 2
    assert got[2].counts["facts"] == 1
    assert got[2].counts["events"] == 2
    assert dict(got[3].counts) == {"records": removed}
    assert removed == 2
    raw = await raw_audit(memory)
    assert got[0].id in raw  # the scan reads the real storage
    for word in (SECRET, "Quokka", "marzipan", "answered", "profile", "work"):
        assert word not in raw
    # a tenant filter shows only the tenant's own entries
    assert {e.subject for e in await all_entries(memory, tenant="acme")} == {"ana"}


def entry(id_: str, at: datetime, *, tenant: str = "", subject: str | None = "s") -> AuditEntry:
    return AuditEntry(
        id=id_,
        at=at,
        operation="forget_user",
        tenant=tenant,
        subject=subject,
        counts={"facts": 1},
        caller="library",
    )


async def test_pages_under_concurrent_appends_never_repeat_or_skip(memory: Memory) -> None:
    log = memory.audit_log
    base = datetime(2026, 1, 1, tzinfo=UTC)
    # ties on `at`, ids that sort by code point (not by UTF-16 or locale)
    ids = ["a", "b", "Z", "é", "\uffff", "\U0001f600", "a/b", "a:{x}", "ß", "x" * 200]
    initial = [entry(f"{i}-{k}", base + timedelta(microseconds=k % 3)) for k, i in enumerate(ids)]
    for e in initial:
        await log.append(e)

    async def writer() -> None:
        for k in range(30):
            at = base + timedelta(microseconds=(k * 7) % 5 - 1)
            await log.append(entry(f"w{k}-\U0001f600", at))
            await asyncio.sleep(0)

    async def reader(since: datetime | None) -> list[AuditEntry]:
        seen: list[AuditEntry] = []
        cursor = None
        while True:
            page = await log.list(limit=2, cursor=cursor, since=since)
            seen += page.entries
            await asyncio.sleep(0)
            if page.next_cursor is None:
                return seen
            cursor = page.next_cursor

    for since in (None, base + timedelta(microseconds=1)):
        task = asyncio.create_task(writer())
        seen = await reader(since)
        await task
        keys = [(e.at, e.id) for e in seen]
        assert len(keys) == len(set(keys))
        assert keys == sorted(keys, key=lambda k: (k[0], k[1]), reverse=True)
        want = {e.id for e in initial if since is None or e.at >= since}
        assert want <= {e.id for e in seen}
        if since is not None:
            assert all(e.at >= since for e in seen)
        # a fresh read after the writes returns every entry once, in order
        final = await reader(since)
        full = [e async for e in memory.audit.entries(since=since)]
        assert [e.id for e in final] == [e.id for e in full]
        assert len({e.id for e in full}) == len(full)


ID_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1
).filter(lambda s: s.strip() and len(s.encode()) <= 480)
SUBJECTS = st.one_of(
    ID_TEXT,
    st.sampled_from(
        [
            "x" * 512,
            "é" * 256,
            "\U0001f600" * 128,
            "t/acme/u/",
            "t/acme/u/ ",
            "t/other/u/ana",
            "a\x00"[:1] + "\n\t:{}|*@/\\",
        ]
    ),
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(subject=SUBJECTS, id_=ID_TEXT)
async def test_adversarial_subjects_and_ids_round_trip(
    memory: Memory, subject: str, id_: str
) -> None:
    at = datetime(2026, 5, 1, tzinfo=UTC) + timedelta(microseconds=len(id_))
    made = entry(id_ + uuid.uuid4().hex, at, tenant="acme", subject=subject[:128])
    id_ = uuid.uuid4().hex + id_  # unique per example (the fixture is shared)
    e = AuditEntry(
        id=id_,
        at=at,
        operation="delete_scope",
        tenant="",
        subject=subject,
        counts={"records": 3},
        caller=id_,
    )
    log = memory.audit_log
    assert await log.append(e) is True
    assert await log.append(e) is False
    await log.append(made)
    found = [x async for x in memory.audit.entries() if x.id in (e.id, made.id)]
    assert e in found
    assert made in found
    assert {x.id: x for x in found}[e.id].subject == subject
    assert {x.id: x for x in found}[e.id].caller == id_
    assert json.loads(json.dumps(e.as_json())) == e.as_json()
    assert AuditEntry.from_json(e.as_json()) == e


def test_cli_table_keeps_one_line_per_entry_for_adversarial_subjects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subject is a tenant's user id: a newline or a terminal escape in it must
    not forge a row of `agent-memory audit`'s table."""
    from agent_memory.entrypoints.cli import main

    monkeypatch.delenv("AGENT_MEMORY_URL", raising=False)
    url = f"sqlite:///{tmp_path}/cli.db"
    forged = "ana\n2026-01-01T00:00:00Z  forget_user      mallory\x1b[2K\r\u2028x"

    async def write() -> None:
        async with connect(url) as mem:
            with acting_as("key-1", "acme"):
                await mem.users.forget(f"t/acme/u/{forged}")

    asyncio.run(write())
    assert main(["audit", "--url", url]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1, out
    assert "\x1b" not in out
    assert "\r" not in out
    assert main(["audit", "--url", url, "--json"]) == 0
    (line,) = capsys.readouterr().out.split("\n")[:-1]
    assert json.loads(line)["subject"] == forged


async def test_a_forget_failing_part_way_is_audited_with_its_failures(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = "t/acme/u/" + "é/:{x}" * 20
    await seed(memory, owner)
    events: Any = memory.users.events

    async def broken(_user: str) -> int:
        raise ConnectionError(SECRET)

    monkeypatch.setattr(events, "erase_user", broken)
    with acting_as("key-2", "acme"):
        receipt = await memory.users.forget(owner)
    assert len(receipt.failures) == 1
    (got,) = await all_entries(memory)
    assert (got.operation, got.tenant, got.subject, got.caller) == (
        "forget_user",
        "acme",
        owner.removeprefix("t/acme/u/"),
        "key-2",
    )
    assert got.counts["facts"] == 4
    assert got.counts["events"] == 0
    assert got.counts["failures"] == 1
    assert SECRET not in await raw_audit(memory)

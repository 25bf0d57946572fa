"""Where tenancy meets portability: the audit trail names a forgotten user as
its tenant sees it (`t/<tenant>/u/<user>` is recorded as `<user>`), and an
import (which leaves out users forgotten since the file was written) and a
data-subject export (which carries the subject's entries) read the stored
owner back with `stored_subject`. That inverse must name exactly the owner the
operation removed: a tenant's user and a same-named user of another tenant, or
of the library, are different data subjects."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import pytest

from agent_memory.bootstrap.connect import connect
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.audit import AuditEntry
from agent_memory.domain.records import MemoryRecord
from agent_memory.portability import export, import_file
from agent_memory.services.audit import AuditTrail, acting_as, stored_subject
from server.live import LiveServer, unique

from .helpers import read_items, settings

ACME = "t/acme/u/bob"
GLOBEX = "t/globex/u/bob"
BARE = "bob"  # a library user (no tenancy) with the same id
NESTED = "t/acme/u/t/globex/u/bob"  # acme's user whose id is "t/globex/u/bob"
OWNERS = (ACME, GLOBEX, BARE, NESTED)


class _Clock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def _fact(owner: str, id: str, dimension: int) -> MemoryRecord:
    at = datetime(2026, 1, 2, tzinfo=UTC)
    return MemoryRecord(
        id=id,
        owner=owner,
        namespace="assistant",
        kind="fact",
        content=f"{owner} keeps an iguana ({id})",
        vector=np.ones(dimension, dtype=np.float32),
        created_at=at,
        updated_at=at,
    )


async def _held(url: str, s: Settings) -> set[str]:
    async with connect(url, settings=s) as m:
        return {o for o in OWNERS if (await m.store.list(o)).records}


@pytest.mark.parametrize(
    "owner",
    [
        ACME,
        BARE,
        GLOBEX,
        NESTED,
        "t/acme/u/ ",  # the rest after the prefix is blank: no tenant user id
        "t/acme/d/ops",  # one of acme's domains, not a user
        "t/acme/u/",
    ],
)
def test_an_entry_names_the_owner_it_was_written_for(owner: str) -> None:
    """When this fails, an entry written under `acting_as(caller, "acme")`
    for `owner` reads back (`stored_subject`) as another owner (or could not be
    written at all): an import would leave the wrong user out and bring the
    forgotten one back, a `--user` export would carry another's entry."""
    trail = AuditTrail(None, _Clock())
    with acting_as("key-1", "acme"):
        entry = trail.entry("forget_user", subject=owner, counts={"facts": 1})
    assert stored_subject(entry) == owner
    assert entry.caller == "key-1"
    if owner.startswith("t/acme/u/") and owner[len("t/acme/u/") :].strip():
        # a tenant's user: the tenant and the user id as the tenant sends it
        assert (entry.tenant, entry.subject) == ("acme", owner[len("t/acme/u/") :])
    # the wire form reads back as the same owner
    assert stored_subject(AuditEntry.from_json(entry.as_json())) == owner


async def test_a_forget_under_a_tenant_of_an_owner_outside_it_stays_forgotten(
    tmp_path: Path,
) -> None:
    """When this fails, forgetting an owner without the tenant's prefix inside
    `acting_as(caller, tenant)` (the library user `bob`; another tenant's
    `t/globex/u/bob`) recorded an entry that reads back as the tenant's user
    `t/acme/u/bob`: restoring a backup brought the forgotten owners back and
    left acme's bob, never forgotten, out."""
    s = settings(tmp_path)
    url = f"sqlite:///{tmp_path}/m.db"
    async with connect(url, settings=s) as m:
        dim = m.embedder.space.dimension
        await m.store.add([_fact(o, f"f-{i}", dim) for i, o in enumerate(OWNERS)])
    backup = str(tmp_path / "backup.jsonl")
    await export(url, backup, settings=s)
    async with connect(url, settings=s) as m:
        with acting_as("key-1", "acme"):
            assert (await m.users.forget(BARE)).complete
            assert (await m.users.forget(GLOBEX)).complete
        # acme's bob loses his data (a disaster the backup is for)
        await m.store.delete_scope(ACME)
    assert await _held(url, s) == {NESTED}
    summary = await import_file(url, backup, settings=s)
    assert summary.complete
    # the forgotten owners stay forgotten, acme's bob comes back whole
    assert await _held(url, s) == {ACME, NESTED}
    assert summary.forgotten["record"] == 2
    assert summary.forgotten_users == 2


async def test_a_user_export_carries_the_entries_of_that_owner_only(tmp_path: Path) -> None:
    """When this fails, a data-subject export (`--user`) missed the entry of a
    forget of that owner made under a tenant's `acting_as`, or carried one of
    another owner (another tenant's, or the library's same-named user)."""
    s = settings(tmp_path)
    url = f"sqlite:///{tmp_path}/m.db"
    async with connect(url, settings=s) as m:
        dim = m.embedder.space.dimension
        await m.store.add([_fact(o, f"f-{i}", dim) for i, o in enumerate(OWNERS)])
        with acting_as("key-1", "acme"):
            await m.users.forget(BARE, "assistant")
            await m.users.forget(ACME, "assistant")
        with acting_as("key-2", "globex"):
            await m.users.forget(GLOBEX, "assistant")
    expected = {BARE: [BARE], ACME: [ACME], GLOBEX: [GLOBEX], NESTED: []}
    for n, (owner, subjects) in enumerate(expected.items()):
        path = str(tmp_path / f"user-{n}.jsonl")
        await export(url, path, user=owner, settings=s)
        entries = [i for i in read_items(path) if isinstance(i, AuditEntry)]
        assert [stored_subject(e) for e in entries] == subjects, owner


# -- through the HTTP service ------------------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[LiveServer, str, str]]:
    """A real server on a SQLite file, keys of two tenants: (server, acme, globex)."""
    acme, globex = unique("acme-"), unique("globex-")
    live = LiveServer(
        f"sqlite:///{tmp_path}/m.db",
        {"acme-app": {"tenant": acme}, "globex-app": {"tenant": globex}},
        extra_args=("--rate", "2000", "--burst", "2000"),
    ).start()
    try:
        yield live, acme, globex
    finally:
        live.close()


async def test_a_tenant_user_forgotten_over_http_stays_forgotten_alone(
    tmp_path: Path, served: tuple[LiveServer, str, str]
) -> None:
    """When this fails, restoring a backup written before `POST /v1/users/forget`
    (a tenant's key) brought that tenant's user back, or left out a same-named
    user of another tenant or of the library."""
    live, acme, globex = served
    url = f"sqlite:///{tmp_path}/m.db"
    s = Settings.from_env()
    facts = [{"content": "keeps an iguana named Quintelle", "category": "preference"}]
    for key in ("acme-app", "globex-app"):
        async with httpx.AsyncClient(
            base_url=live.base, headers=live.headers(key), timeout=30
        ) as c:
            body = {"user_id": "bob", "namespace": "n", "facts": facts}
            (await c.post("/v1/users/remember", json=body)).raise_for_status()
    owners = {f"t/{acme}/u/bob", f"t/{globex}/u/bob", "bob"}
    async with connect(url, settings=s) as m:
        await m.store.add([_fact("bob", "f-bare", m.embedder.space.dimension)])
    backup = str(tmp_path / "backup.jsonl")
    await export(url, backup, settings=s)
    async with httpx.AsyncClient(
        base_url=live.base, headers=live.headers("acme-app"), timeout=30
    ) as c:
        (await c.post("/v1/users/forget", json={"user_id": "bob"})).raise_for_status()
    live.stop()
    summary = await import_file(url, backup, settings=s)
    assert summary.complete
    assert summary.forgotten_users == 1
    async with connect(url, settings=s) as m:
        held = {o for o in owners if (await m.store.list(o)).records}
        trail = [e async for e in m.audit.entries()]
    assert held == {f"t/{globex}/u/bob", "bob"}
    forgets = [e for e in trail if e.operation == "forget_user"]
    assert [(e.tenant, e.subject, e.caller) for e in forgets] == [(acme, "bob", "acme-app")]

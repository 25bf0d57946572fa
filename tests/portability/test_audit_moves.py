"""The audit trail moves with the data: export writes its entries, import
stores them (idempotent by id), migrate verifies them. A migrated deployment
keeps the record of its forgets, so an older backup imported into it still
leaves the forgotten users out; files written before the trail was exported
(format version 1) still import."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import numpy as np
import pytest

from agent_memory.adapters.memory.audit import InMemoryAuditLog
from agent_memory.bootstrap.connect import connect, reading_space
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.audit import AuditEntry
from agent_memory.domain.records import MemoryRecord
from agent_memory.portability import (
    ExportFormatError,
    ExportReader,
    PortabilityError,
    Ports,
    export,
    import_file,
    migrate,
    open_ports,
)
from agent_memory.services.audit import acting_as
from agent_memory.services.portability.format import FORMAT_VERSION, ExportWriter, open_export
from agent_memory.services.portability.transfer import audit_entries, verify_copy

from .helpers import settings


def _fact(owner: str, id: str, dimension: int) -> MemoryRecord:
    at = datetime(2026, 1, 2, tzinfo=UTC)
    return MemoryRecord(
        id=id,
        owner=owner,
        namespace="assistant",
        kind="fact",
        content=f"{owner} likes tea ({id})",
        vector=np.ones(dimension, dtype=np.float32),
        created_at=at,
        updated_at=at,
    )


async def _trail(url: str, s: Settings) -> list[dict[str, object]]:
    async with open_ports(url, space=await reading_space(url, s), settings=s) as ports:
        assert ports.audit is not None
        return [e.as_json() for e in await audit_entries(ports.audit)]


async def _source_with_a_trail(url: str, s: Settings) -> list[dict[str, object]]:
    """A deployment with facts of three users, two of them forgotten (one by a
    tenant's key) and one scope deleted: its trail."""
    async with connect(url, settings=s) as m:
        dim = m.embedder.space.dimension
        await m.store.add([_fact(u, f"{u}-1", dim) for u in ("ann", "t/acme/u/cy", "dee")])
        await m.users.forget("ann")
        with acting_as("key-7", "acme"):
            await m.users.forget("t/acme/u/cy")
        await m.users.delete_scope("dee", namespace="nothing-here")
    trail = await _trail(url, s)
    assert {e["operation"] for e in trail} == {"forget_user", "delete_scope"}
    return trail


async def test_export_and_import_carry_the_trail_exactly(tmp_path: Path, target: str) -> None:
    """When this fails, the audit trail stayed behind (or changed) when the
    deployment's data moved to another backend."""
    s = settings(tmp_path)
    source = f"sqlite:///{tmp_path}/source.db"
    trail = await _source_with_a_trail(source, s)
    path = str(tmp_path / "all.jsonl")
    exported = await export(source, path, settings=s)
    assert exported.counts["audit"] == len(trail)
    t = settings(tmp_path)
    first = await import_file(target, path, settings=t)
    assert first.written["audit"] == len(trail)
    again = await import_file(target, path, settings=t)
    assert (again.written["audit"], again.unchanged["audit"]) == (0, len(trail))
    assert await _trail(target, t) == trail


async def test_a_migrated_deployment_still_keeps_forgotten_users_out_of_old_backups(
    tmp_path: Path, target: str
) -> None:
    """When this fails, a migration dropped the record of a forget, and a backup
    written before the forget, imported into the migrated deployment, brought
    the forgotten user back."""
    s = settings(tmp_path)
    source = f"sqlite:///{tmp_path}/source.db"
    async with connect(source, settings=s) as m:
        await m.store.add([_fact(u, f"{u}-1", m.embedder.space.dimension) for u in ("ann", "bo")])
    backup = str(tmp_path / "backup.jsonl")
    await export(source, backup, settings=s)
    async with connect(source, settings=s) as m:
        await m.users.forget("ann")
    t = settings(tmp_path)
    done = await migrate(source, target, settings=t)
    assert tuple(done.problems) == ()
    restored = await import_file(target, backup, settings=t)
    assert restored.forgotten["record"] == 1
    async with connect(target, settings=t) as m:
        assert (await m.store.list("ann")).records == ()
        assert [r.id for r in (await m.store.list("bo")).records] == ["bo-1"]


async def test_a_file_of_format_version_1_still_imports(tmp_path: Path) -> None:
    """Files written before the trail was exported have no audit lines."""
    s = settings(tmp_path)
    source = f"sqlite:///{tmp_path}/source.db"
    await _source_with_a_trail(source, s)
    async with connect(source, settings=s) as m:
        await m.store.add([_fact("eve", "eve-1", m.embedder.space.dimension)])
    path = str(tmp_path / "new.jsonl")
    await export(source, path, settings=s)
    old = str(tmp_path / "old.jsonl")
    with open_export(path, "r") as stream:
        reader = ExportReader(stream)
        items = [item for _, item in reader.items() if not isinstance(item, AuditEntry)]
    assert reader.header is not None
    header = reader.header
    with open_export(old, "w") as out:
        writer = ExportWriter(out, attrs.evolve(header, version=1))
        for item in items:
            writer.write(item)
        writer.finish()
    assert FORMAT_VERSION == 2
    target = f"sqlite:///{tmp_path}/target.db"
    summary = await import_file(target, old, settings=settings(tmp_path))
    assert summary.complete
    assert summary.written["record"] == 2  # dee's and eve's
    assert summary.written["audit"] == 0


async def test_a_target_without_an_audit_trail_is_refused_unless_skipped(
    tmp_path: Path,
) -> None:
    s = settings(tmp_path)
    source = f"sqlite:///{tmp_path}/source.db"
    trail = await _source_with_a_trail(source, s)
    path = str(tmp_path / "all.jsonl")
    await export(source, path, settings=s)
    async with connect("memory://", settings=s) as m:
        bare = Ports(store=m.store, events=m.events, cache=m.cache, leases=m.leases)
        with pytest.raises(PortabilityError, match=r"audits.*--skip audit"):
            await import_file(bare, path)
        summary = await import_file(bare, path, skip=["audit"])
    assert summary.complete
    assert summary.skipped_ports == {"audit": len(trail)}


def test_a_bad_audit_line_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    header = {
        "type": "header",
        "format": "agent-memory-export",
        "version": FORMAT_VERSION,
        "created_at": "2026-01-01T00:00:00+00:00",
        "source": "sqlite",
        "spaces": [],
    }
    entry = {
        "type": "audit",
        "id": "a1",
        "at": "2026-01-01T00:00:00Z",
        "operation": "forget_user",
        "tenant": "",
        "subject": "ann",
        "counts": {"Not A Name": 1},
        "caller": "library",
    }
    import json

    path.write_text("\n".join(json.dumps(o) for o in (header, entry)) + "\n")
    with open(path, "rb") as stream, pytest.raises(ExportFormatError, match=r"line 2.*counts"):
        ExportReader(stream).verify()


async def test_migrate_reports_audit_entries_the_target_lacks() -> None:
    """`verify_copy` compares the trails: an entry of the source missing on the
    target is a problem (a migration that lost it cannot say "verified")."""
    async with connect("memory://") as m:
        entry = AuditEntry(
            id="e1",
            at=datetime.now(UTC) - timedelta(days=1),
            operation="forget_user",
            tenant="",
            subject="ann",
            counts={"facts": 1},
            caller="library",
        )
        held = InMemoryAuditLog()
        await held.append(entry)
        source = Ports(store=m.store, audit=held)
        target = Ports(store=m.store, audit=InMemoryAuditLog())
        problems = await verify_copy(source, target, counts={}, sample=[])
        assert problems == ["1 audit entries of the source are not on the target"]
        await target.audit.append(entry)  # type: ignore[union-attr]
        assert await verify_copy(source, target, counts={}, sample=[]) == []

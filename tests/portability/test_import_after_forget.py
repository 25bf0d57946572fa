"""Restoring an export written before a forget does not undo the forget.

An export taken at T0 holds a user's facts, events, derived knowledge, cache
entries and triples; the user is forgotten at T1; importing the T0 file back
(a restore from backup) must leave out what the forget removed — by the
target's audit trail, which records the forget — while the same user's data
written after the forget, and every other user's data, comes back whole."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from agent_memory.bootstrap.connect import connect, reading_space
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.records import Entity, Event, MemoryRecord
from agent_memory.domain.triples import Triple
from agent_memory.portability import Ports, export, import_file, open_ports
from agent_memory.services.audit import acting_as
from agent_memory.services.compaction import CACHE_KEY as DIGEST_KEY
from agent_memory.services.graph_memory import CHECKPOINT_SCOPE, checkpoint_key
from agent_memory.services.knowledge import KNOWLEDGE_NAMESPACE
from agent_memory.services.user_memory import user_cache_scope

from .helpers import settings, sqlite_rows_with

ALICE = "alice"
CAROL = "t/acme/u/carol"  # a tenant's user, forgotten through the tenant's key
BOB = "bob"
SECRETS = {ALICE: "Zorblax", CAROL: "Quintelle", BOB: "Marrowby"}


def _fact(owner: str, id: str, text: str, dimension: int, at: datetime) -> MemoryRecord:
    return MemoryRecord(
        id=id,
        owner=owner,
        namespace="assistant",
        kind="fact",
        content=text,
        vector=np.ones(dimension, dtype=np.float32),
        created_at=at,
        updated_at=at,
    )


@contextlib.asynccontextmanager
async def _ports(url: str, s: Settings) -> AsyncIterator[Ports]:
    """Every port of the deployment (triples included), in the space `connect()` reads."""
    async with open_ports(url, space=await reading_space(url, s), settings=s) as ports:
        yield ports


async def _populate(url: str, s: Settings) -> None:
    """Each user's facts, events (domain per user), a knowledge fragment derived
    from their events, a cache entry of theirs, their domain's digest, their
    triples and a checkpoint of their loop; every one names the user's secret."""
    now = datetime.now(UTC).replace(microsecond=0)
    async with _ports(url, s) as ports:
        assert ports.events is not None
        assert ports.cache is not None
        dim = ports.store.space.dimension
        for n, (user, secret) in enumerate(SECRETS.items()):
            domain = f"ops-{n}"
            await ports.store.add(
                [
                    _fact(user, f"f-{n}", f"{user} keeps an iguana named {secret}", dim, now),
                    MemoryRecord(
                        id=f"k-{n}",
                        owner=domain,
                        namespace=KNOWLEDGE_NAMESPACE,
                        kind="reflection",
                        content=f"lesson learnt from {secret}",
                        vector=np.ones(dim, dtype=np.float32),
                        created_at=now,
                        updated_at=now,
                        attributes={"entity": ["pod", f"web-{n}"]},
                    ),
                ]
            )
            await ports.events.append(
                [
                    Event(
                        id=f"e-{n}",
                        domain=domain,
                        agent="agent-1",
                        action=f"restart for {secret}",
                        outcome="ok",
                        summary=f"asked by {secret}",
                        occurred_at=now - timedelta(minutes=1),
                        recorded_at=now,
                        entities=(Entity("pod", f"web-{n}"),),
                        user_id=user,
                    )
                ]
            )
            await ports.cache.put(user_cache_scope(user), "profile", secret.encode())
            await ports.cache.put(domain, DIGEST_KEY, f"digest quoting {secret}".encode())
            await ports.cache.put(
                CHECKPOINT_SCOPE, checkpoint_key(user, "loop") + "/1", secret.encode()
            )
            if ports.triples is not None:  # Redis keeps no triples
                await ports.triples.add(
                    [Triple(user, "loop", user, "named", f"iguana {secret}", created_at=now)]
                )


async def _held(url: str, s: Settings, secret: str) -> list[str]:
    """Where the target still holds `secret`: each port that returns it."""
    found = []
    async with _ports(url, s) as ports:
        assert ports.events is not None
        assert ports.cache is not None
        owners = [ALICE, CAROL, BOB]
        domains = [f"ops-{n}" for n in range(3)]
        for owner in [*owners, *domains]:
            for r in (await ports.store.list(owner, limit=100)).records:
                if secret in r.content:
                    found.append(f"record {owner}/{r.id}")
        since = datetime.now(UTC) - timedelta(days=1)
        for domain in domains:
            for e in (await ports.events.window(domain, since=since, limit=100)).events:
                if secret in e.summary:
                    found.append(f"event {e.id}")
            digest = await ports.cache.get(domain, DIGEST_KEY)
            if digest is not None and secret.encode() in digest:
                found.append(f"digest {domain}")
        for owner in owners:
            value = await ports.cache.get(user_cache_scope(owner), "profile")
            if value is not None and secret.encode() in value:
                found.append(f"cache {owner}")
            checkpoint = await ports.cache.get(
                CHECKPOINT_SCOPE, checkpoint_key(owner, "loop") + "/1"
            )
            if checkpoint is not None and secret.encode() in checkpoint:
                found.append(f"checkpoint {owner}")
            if ports.triples is not None:
                for t in await ports.triples.query(owner, limit=100):
                    if secret in t.object:
                        found.append(f"triple {owner}")
    return found


async def _backup_then_forget(tmp_path: Path, url: str, s: Settings) -> str:
    await _populate(url, s)
    path = str(tmp_path / "backup.jsonl")
    await export(url, path, settings=s)
    async with connect(url, settings=s) as m:
        assert (await m.users.forget(ALICE)).complete
        with acting_as("key-1", "acme"):
            assert (await m.users.forget(CAROL)).complete
        # alice comes back after the forget: what she tells now is hers to keep
        now = datetime.now(UTC)
        await m.store.add(
            [_fact(ALICE, "f-new", "alice now keeps a cat", m.embedder.space.dimension, now)]
        )
    assert await _held(url, s, SECRETS[ALICE]) == []
    return path


async def test_restoring_an_export_from_before_a_forget_keeps_the_user_forgotten(
    tmp_path: Path, backend: str
) -> None:
    """When this fails, importing a file written before `users.forget` brought
    the forgotten user's facts, events, derived knowledge, cache entries, digest,
    triples or checkpoints back."""
    s = settings(tmp_path)
    path = await _backup_then_forget(tmp_path, backend, s)
    summary = await import_file(backend, path, settings=s)
    assert summary.complete
    assert await _held(backend, s, SECRETS[ALICE]) == []
    assert await _held(backend, s, SECRETS[CAROL]) == []
    # bob's every item is back, and so is what alice told after the forget
    triples = 0 if backend.startswith("redis") else 1  # Redis keeps no triples
    assert len(await _held(backend, s, SECRETS[BOB])) == 6 + triples
    async with connect(backend, settings=s) as m:
        assert [r.id for r in (await m.store.list(ALICE)).records] == ["f-new"]
    # per type: 1 fact + 1 fragment, 1 event, 1 triple, profile + digest + checkpoint
    # for each of the two forgotten users
    assert summary.forgotten == {
        "record": 4,
        "event": 2,
        "triple": 2 * triples,
        "cache": 6,
        "lease": 0,
        "audit": 0,
    }
    assert f"left out {12 + 2 * triples} items" in summary.describe()
    if backend.startswith("sqlite"):
        assert sqlite_rows_with(tmp_path / "m.db", SECRETS[ALICE]) == []


async def test_restore_forgotten_brings_them_back(tmp_path: Path) -> None:
    """The opt-in undoes a mistaken forget, and shows the default is what left
    the forgotten users' items out."""
    s = settings(tmp_path)
    url = f"sqlite:///{tmp_path}/m.db"
    path = await _backup_then_forget(tmp_path, url, s)
    summary = await import_file(url, path, settings=s, restore_forgotten=True)
    assert sum(summary.forgotten.values()) == 0
    assert len(await _held(url, s, SECRETS[ALICE])) == 7


async def test_a_forget_through_connect_reaches_the_deployments_triples(
    tmp_path: Path, backend: str
) -> None:
    """When this fails, `connect(url).users.forget(user)` left the user's triples
    in the deployment's triple store (the one `graph_memory` writes): the
    service was built without it, so its forget never saw them."""
    s = settings(tmp_path)
    await _populate(backend, s)
    async with connect(backend, settings=s) as m:
        receipt = await m.users.forget(ALICE)
    kinds = {d.kind for d in receipt.derived}
    held = await _held(backend, s, SECRETS[ALICE])
    assert held == []
    if not backend.startswith("redis"):  # Redis keeps no triples
        assert "triples" in kinds

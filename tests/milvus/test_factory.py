"""URL forms, the bootstrap hook and `connect()` wiring for Milvus."""

from __future__ import annotations

import uuid

import attrs
import pytest
from pymilvus import MilvusClient

import agent_memory
from agent_memory.adapters.milvus import open_milvus_store, open_stores, parse_milvus_url
from agent_memory.adapters.milvus.factory import deployment_prefix
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.errors import ConfigurationError
from milvus.conftest import lite_path
from milvus.support import SPACE, rec


def test_url_forms() -> None:
    lite = parse_milvus_url("milvus+lite:///var/lib/am/milvus.db?prefix=p_&index=flat")
    assert (lite.kind, lite.kwargs, lite.prefix, lite.index) == (
        "lite",
        {"uri": "/var/lib/am/milvus.db"},
        "p_",
        "FLAT",
    )
    server = parse_milvus_url("milvus://root:s%40cret@db.example:19999?tls=true&db=mem")
    assert server.kind == "server"
    assert server.kwargs == {
        "uri": "https://db.example:19999",
        "token": "root:s@cret",
        "db_name": "mem",
    }
    assert parse_milvus_url("milvus://h").kwargs == {"uri": "http://h:19530"}
    assert parse_milvus_url("milvus://h?token=abc").kwargs["token"] == "abc"
    assert parse_milvus_url("milvus://h?index=HNSW").index == "HNSW"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("milvus://", "needs a host"),
        ("milvus+lite://", "absolute path"),
        ("milvus+lite:///tmp/dir", "ending in .db"),
        ("milvus+lite://host/x.db", "absolute path"),
        ("milvus://h?tls=maybe", "tls"),
        ("milvus://h?colour=red", "unknown milvus URL option"),
        ("milvus://h?prefix=bad-name", "prefix"),
        ("milvus://h?index=H N", "index"),
        ("milvus://h:99999", "port"),
        ("redis://h", "not a milvus URL"),
    ],
)
def test_bad_urls_are_configuration_errors(url: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        parse_milvus_url(url)


def test_a_url_that_is_not_a_string_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="URL string"):
        parse_milvus_url(b"milvus://h")  # type: ignore[arg-type]


def test_deployment_prefix_is_a_valid_distinct_collection_prefix() -> None:
    a, b = deployment_prefix("team a"), deployment_prefix("team-a")
    assert a != b
    assert a.startswith("agent_memory_team_a_")


async def _drop(prefix: str) -> None:
    client = MilvusClient(uri=str(lite_path[0]))
    for name in client.list_collections():
        if name.startswith(prefix):
            client.drop_collection(name)


async def test_store_from_url_persists_across_reopen(milvus_clients: object) -> None:
    prefix = f"f{uuid.uuid4().hex[:10]}_"
    url = f"milvus+lite://{lite_path[0]}?prefix={prefix}"
    store = open_milvus_store(url, SPACE)
    try:
        await store.add([rec("kept")])
    finally:
        await store.close()
    again = open_milvus_store(url, SPACE)
    try:
        got = await again.get("alice", "kept")
        assert got is not None
        assert got.id == "kept"
    finally:
        await again.close()
        await _drop(prefix)


async def test_bootstrap_hook_returns_the_memory_store_only(milvus_clients: object) -> None:
    url = f"milvus+lite://{lite_path[0]}"
    parts = await open_stores(url, space=SPACE, deployment=f"d{uuid.uuid4().hex[:8]}")
    prefix = parts["details"]["prefix"]
    try:
        assert set(parts) == {"store", "details"}
        assert parts["details"]["milvus"] == "lite"
        assert prefix != "agent_memory_"  # a named deployment gets its own collections
        await parts["store"].add([rec("a")])
        assert await parts["store"].get("alice", "a") is not None
    finally:
        await parts["store"].close()
        await _drop(prefix)


async def test_connect_wires_coordination_from_its_own_url(milvus_clients: object) -> None:
    deployment = f"c{uuid.uuid4().hex[:8]}"
    settings = attrs.evolve(
        Settings.from_env(), deployment=deployment, coordination_url="memory://"
    )
    memory = await agent_memory.connect(f"milvus+lite://{lite_path[0]}", settings=settings)
    try:
        assert memory.stores.backend == "milvus"
        assert memory.stores.events is None
        assert memory.events is memory.coordination.events  # type: ignore[union-attr]
        await memory.store.ping()
    finally:
        await memory.close()
        await _drop(deployment_prefix(deployment))


async def test_connect_refuses_a_store_only_coordination_url(milvus_clients: object) -> None:
    settings = attrs.evolve(
        Settings.from_env(),
        deployment=f"c{uuid.uuid4().hex[:8]}",
        coordination_url="qdrant+memory://",
    )
    with pytest.raises(ConfigurationError, match="serves only the memory store"):
        await agent_memory.connect(f"milvus+lite://{lite_path[0]}", settings=settings)


async def test_a_server_that_is_not_there_is_backend_unavailable() -> None:
    """`milvus://` to a closed port: `BackendUnavailable` naming milvus (the
    client connects in its constructor; it raised pymilvus's MilvusException)."""
    import socket

    import agent_memory
    from agent_memory.adapters.memory import HashingEmbedder
    from agent_memory.domain.errors import BackendUnavailable

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(BackendUnavailable) as caught:
        async with agent_memory.connect(f"milvus://127.0.0.1:{port}", embedder=HashingEmbedder(8)):
            pass
    assert caught.value.backend == "milvus"

"""`redis+cluster://` URLs and the lease wait settings: every bad value is a typed
error naming what was wrong (no server needed), and a good URL opens the four
ports on one cluster client."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agent_memory.adapters.redis import RedisLeaseStore, open_stores
from agent_memory.adapters.redis._client import connect, is_cluster
from agent_memory.bootstrap import scheme_of
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import EmbeddingSpace

SPACE = EmbeddingSpace(model="test-model", dimension=8)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+cluster://127.0.0.1/", "host:port"),
        ("redis+cluster://127.0.0.1:0/", "host:port"),
        ("redis+cluster://127.0.0.1:7000,:7001/", "host:port"),
        ("redis+cluster://127.0.0.1:7000,127.0.0.1:x/", "host:port"),
        ("redis+cluster://127.0.0.1:7000/3", "database 0"),
        ("redis+cluster://127.0.0.1:7000/?decode_responses=1", "decode_responses"),
    ],
)
def test_bad_cluster_urls_are_rejected(url: str, problem: str) -> None:
    with pytest.raises(InvalidInput, match=problem):
        connect(url)


@pytest.mark.parametrize(
    ("query", "problem"),
    [
        ("lease_wait_replicas=-1", "lease_wait_replicas"),
        ("lease_wait_replicas=one", "lease_wait_replicas"),
        ("lease_wait_timeout_ms=0", "lease_wait_timeout_ms"),
        ("lease_wait_timeout_ms=1.5", "lease_wait_timeout_ms"),
    ],
)
async def test_bad_lease_wait_parameters_are_rejected(query: str, problem: str) -> None:
    with pytest.raises(InvalidInput, match=problem):
        await open_stores(
            f"redis+cluster://127.0.0.1:7000/?{query}", space=SPACE, retention=timedelta(days=1)
        )


@pytest.mark.parametrize("value", [-1, True, 1.5, "1"])
def test_bad_wait_replicas_is_rejected(value: object) -> None:
    client = connect("redis+cluster://127.0.0.1:7000/")
    with pytest.raises(InvalidInput, match="wait_replicas"):
        RedisLeaseStore(client, wait_replicas=value)  # type: ignore[arg-type]


def test_bad_wait_timeout_is_rejected() -> None:
    client = connect("redis+cluster://127.0.0.1:7000/")
    with pytest.raises(InvalidInput, match="wait_timeout"):
        RedisLeaseStore(client, wait_timeout=timedelta(0))


def test_cluster_scheme_is_the_redis_family() -> None:
    assert scheme_of("redis+cluster://h:1,h:2/") == "redis"
    assert scheme_of("rediss+cluster://h:1/") == "redis"


async def test_open_stores_on_the_cluster(redis_cluster_url: str, deployment: str) -> None:
    parts = await open_stores(
        redis_cluster_url + "?lease_wait_replicas=1&lease_wait_timeout_ms=2000&hnsw_m=8",
        space=SPACE,
        retention=timedelta(days=1),
        deployment=deployment,
    )
    try:
        assert is_cluster(parts["store"]._r)
        assert parts["store"]._r is parts["leases"]._r  # one client for the four ports
        assert parts["leases"].wait_replicas == 1
        assert parts["store"].index_options.m == 8
        lease = await parts["leases"].acquire("s", "k", "me", timedelta(seconds=5))
        assert lease is not None
        assert parts["details"]["cluster"].startswith("3 primaries")
    finally:
        await parts["store"].drop_index()
        for name in ("store", "events", "leases", "cache"):
            await parts[name].close()

"""Fixtures for the Redis Cluster tests: the session cluster (3 primaries + 3
replicas, tests/servers/redis_cluster_server.py, or `REDIS_CLUSTER_URL`) and a
unique deployment per test (isolation without FLUSHALL)."""

from __future__ import annotations

import uuid

import pytest

from servers.redis_cluster_server import redis_cluster_url

__all__ = ["deployment", "redis_cluster_url"]


@pytest.fixture
def deployment() -> str:
    return "c" + uuid.uuid4().hex[:12]

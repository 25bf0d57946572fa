"""Fixtures for the Redis Cluster tests: a unique deployment per test (isolation
without FLUSHALL). The session cluster (`redis_cluster_url`: 3 primaries + 3
replicas, tests/servers/redis_cluster_server.py, or `REDIS_CLUSTER_URL`) is a
plugin of tests/conftest.py, so every test of the session shares one cluster."""

from __future__ import annotations

import uuid

import pytest

__all__ = ["deployment"]


@pytest.fixture
def deployment() -> str:
    return "c" + uuid.uuid4().hex[:12]

"""The shipped AuditLog contract on one Redis server."""

from __future__ import annotations

import pytest

from redis_audit_contract import AuditLogSuite


@pytest.fixture
def redis_contract_url(redis_url: str) -> str:
    return redis_url


class TestRedisAuditLog(AuditLogSuite):
    pass

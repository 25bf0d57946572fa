"""The shipped AuditLog contract on a Redis Cluster: the audit keys share one
hash tag per deployment, so each append is one atomic script in one slot."""

from __future__ import annotations

import pytest

from redis_audit_contract import AuditLogSuite


@pytest.fixture
def redis_contract_url(redis_cluster_url: str) -> str:
    return redis_cluster_url


class TestClusterAuditLog(AuditLogSuite):
    pass

"""The shipped AuditLog contract on one Redis server."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_memory.adapters.redis import RedisAuditLog
from agent_memory.adapters.redis._client import connect as connect_client
from agent_memory.bootstrap.connect import connect
from portability.helpers import settings as isolated
from redis_audit_contract import AuditLogSuite
from services.test_audit_trail import SECRET
from services.test_audit_trail import _seed as seed


@pytest.fixture
def redis_contract_url(redis_url: str) -> str:
    return redis_url


class TestRedisAuditLog(AuditLogSuite):
    pass


async def test_raw_audit_keys_hold_no_forgotten_text(redis_url: str, tmp_path: Path) -> None:
    """After forgetting a user with distinctive text through the services, no
    audit key (hash fields and values, index members) contains that text."""
    settings = isolated(tmp_path)
    async with connect(redis_url, settings=settings) as memory:
        await seed(memory, "ana")
        receipt = await memory.users.forget("ana")
        assert receipt.facts == 3
        log = memory.audit_log
        assert isinstance(log, RedisAuditLog)
        client = connect_client(redis_url)
        try:
            keys = [
                k
                async for k in client.scan_iter(
                    match=log.key_prefix.replace("{", "\\{").replace("}", "\\}") + "*"
                )
            ]
            dump: list[object] = []
            for key in keys:
                kind = (await client.type(key)).decode()
                if kind == "hash":
                    dump.append(await client.hgetall(key))
                elif kind == "zset":
                    dump.append(await client.zrange(key, 0, -1))
            everything = [k async for k in client.scan_iter(match=f"*{settings.deployment}*")]
        finally:
            await client.aclose()
    assert len(keys) == 3, keys  # entries hash, index, the tenant's index
    text = repr(dump) + repr(keys)
    assert SECRET.encode() not in text.encode()
    assert SECRET not in text
    assert b"forget_user" in repr(dump).encode()  # the scan sees the entry
    assert everything, "the deployment's keys were found"

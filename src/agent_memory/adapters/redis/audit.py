"""`AuditLog` on Redis: keys of their own under `<prefix>:v1:<deployment>:au:`.

One hash tag per deployment (the digest of the deployment's key base), so the
entry hash, the listing index and the per-tenant indexes share one slot on a
cluster and one script appends atomically on either topology:

- `...:au:{tag}:e` hash: entry id -> the entry's JSON;
- `...:au:{tag}:z` sorted set (score 0): `<at as 18 digits of micros>\\0<id>`,
  so ZREVRANGEBYLEX lists newest first, ties by id descending (bytes of UTF-8
  sort as code points) and a cursor is an exclusive lex bound;
- `...:au:{tag}:t:<digest(tenant)>` the same, for one tenant.

No erase (events, records, cache) reads or deletes these keys, and they have no
expiry.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from agent_memory.adapters.redis._client import Client, connect
from agent_memory.adapters.redis._errors import translate
from agent_memory.adapters.redis._handle import RedisHandle, SharedClient
from agent_memory.adapters.redis._keys import digest
from agent_memory.domain.audit import (
    AuditEntry,
    AuditPage,
    check_audit_entry,
    check_audit_list_args,
    encode_audit_cursor,
    micros_key,
)

__all__ = ["RedisAuditLog"]

# KEYS: entries hash, index, tenant index. ARGV: id, JSON, member. -> 1 when new
_APPEND = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], 0, ARGV[3])
redis.call('ZADD', KEYS[3], 0, ARGV[3])
return 1
"""


def _member(at: datetime, id_: str) -> bytes:
    return micros_key(at).encode() + b"\x00" + id_.encode("utf-8")


class RedisAuditLog(RedisHandle):
    """`AuditLog` over redis.asyncio (no module needed), single server or cluster."""

    def __init__(
        self,
        client: Client | SharedClient,
        *,
        prefix: str = "agent_memory",
        deployment: str = "default",
        owns_client: bool = False,
    ) -> None:
        super().__init__(
            client, "redis audit log", prefix=prefix, deployment=deployment, owns_client=owns_client
        )
        self._base = f"{self._keys.base}:au:{{{digest('audit', self._keys.base)}}}"
        self._append = self._r.register_script(_APPEND)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisAuditLog:
        options = kwargs.pop("client_options", {})
        return cls(connect(url, **options), owns_client=True, **kwargs)

    @property
    def key_prefix(self) -> str:
        """Every key of this audit log starts with this."""
        return self._base

    def _index(self, tenant: str | None) -> str:
        if tenant is None:
            return f"{self._base}:z"
        return f"{self._base}:t:{digest(tenant)}"

    async def append(self, entry: AuditEntry) -> bool:
        async with self._life.op():
            entry = check_audit_entry(entry)
            body = json.dumps(entry.as_json(), ensure_ascii=False, sort_keys=True)
            keys = [f"{self._base}:e", self._index(None), self._index(entry.tenant)]
            args = [entry.id.encode("utf-8"), body.encode("utf-8"), _member(entry.at, entry.id)]
            with translate("audit append"):
                return bool(await self._append(keys=keys, args=args))

    async def list(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        async with self._life.op():
            tenant, since, limit, after = check_audit_list_args(tenant, since, limit, cursor)
            high = b"+" if after is None else b"(" + _member(*after)
            low = b"-" if since is None else b"[" + micros_key(since).encode()
            with translate("audit list"):
                members: list[Any] = await self._r.zrevrangebylex(
                    self._index(tenant), high, low, start=0, num=limit + 1
                )
                ids = [m.split(b"\x00", 1)[1] for m in members[:limit]]
                bodies: list[Any] = await self._r.hmget(f"{self._base}:e", ids) if ids else []
            entries = tuple(
                AuditEntry.from_json(json.loads(bytes(b).decode("utf-8")))
                for b in bodies
                if b is not None
            )
            more = len(members) > limit
            return AuditPage(
                entries, encode_audit_cursor(entries[-1]) if more and entries else None
            )

"""`Cache` on Redis: a string per entry with PX expiry, and a per-scope key index.

Per scope (hash tag = digest of the scope): value strings and a sorted set of
raw keys (score 0), so `delete_prefix` finds its keys by ZRANGEBYLEX (no SCAN,
no glob pattern, so no escaping of user prefixes is needed) and deletes them in
one slot.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from agent_memory.adapters._common.validation import (
    check_cache_ttl,
    check_cache_value,
    check_prefix,
)
from agent_memory.adapters.redis._client import Client, connect, is_cluster
from agent_memory.adapters.redis._errors import translate
from agent_memory.adapters.redis._handle import RedisHandle, SharedClient
from agent_memory.adapters.redis._keys import lex_prefix_range
from agent_memory.domain.validation import require_id, require_scope
from agent_memory.ports.storage import CacheEntry

__all__ = ["RedisCache"]

# KEYS: index, value keys...; ARGV: raw keys (members). -> number of live entries deleted
_DELETE_MANY = """
local n = 0
for i = 2, #KEYS do n = n + redis.call('DEL', KEYS[i]) end
redis.call('ZREM', KEYS[1], unpack(ARGV))
return n
"""
_BATCH = 500

# On a cluster (whose async client's MULTI does not serve us), put and delete are
# these scripts: the same two commands, atomic, in the scope's one slot.
# KEYS: value, index. ARGV: value, PX milliseconds ("" for none), raw key.
_PUT = """
if ARGV[2] == '' then
  redis.call('SET', KEYS[1], ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
redis.call('ZADD', KEYS[2], 0, ARGV[3])
return 1
"""
# KEYS: value, index. ARGV: raw key. -> whether a live entry was deleted
_DEL = """
local n = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return n
"""


class RedisCache(RedisHandle):
    """`Cache` over redis.asyncio (no module needed)."""

    def __init__(
        self,
        client: Client | SharedClient,
        *,
        prefix: str = "agent_memory",
        deployment: str = "default",
        owns_client: bool = False,
    ) -> None:
        super().__init__(
            client, "redis cache", prefix=prefix, deployment=deployment, owns_client=owns_client
        )
        self._delete_many = self._r.register_script(_DELETE_MANY)
        self._cluster = is_cluster(self._r)
        if self._cluster:
            self._put = self._r.register_script(_PUT)
            self._del = self._r.register_script(_DEL)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisCache:
        options = kwargs.pop("client_options", {})
        return cls(connect(url, **options), owns_client=True, **kwargs)

    async def get(self, scope: str, key: str) -> bytes | None:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            with translate("cache get"):
                value: Any = await self._r.get(self._keys.cache_value(scope, key))
            return None if value is None else bytes(value)

    async def put(self, scope: str, key: str, value: bytes, ttl: timedelta | None = None) -> None:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            data = check_cache_value(value)
            check_cache_ttl(ttl)
            ms = None if ttl is None else max(1, ttl // timedelta(milliseconds=1))
            with translate("cache put"):
                if self._cluster:
                    keys = [self._keys.cache_value(scope, key), self._keys.cache_index(scope)]
                    raw = key.encode("utf-8", "surrogatepass")
                    await self._put(keys=keys, args=[data, "" if ms is None else ms, raw])
                    return
                pipe = self._r.pipeline(transaction=True)
                pipe.set(self._keys.cache_value(scope, key), data, px=ms)
                pipe.zadd(self._keys.cache_index(scope), {key.encode("utf-8", "surrogatepass"): 0})
                await pipe.execute()

    async def delete(self, scope: str, key: str) -> bool:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            with translate("cache delete"):
                if self._cluster:
                    keys = [self._keys.cache_value(scope, key), self._keys.cache_index(scope)]
                    return bool(
                        await self._del(keys=keys, args=[key.encode("utf-8", "surrogatepass")])
                    )
                pipe = self._r.pipeline(transaction=True)
                pipe.delete(self._keys.cache_value(scope, key))
                pipe.zrem(self._keys.cache_index(scope), key.encode("utf-8", "surrogatepass"))
                deleted, _ = await pipe.execute()
            return bool(deleted)

    async def entries(self, scope: str, prefix: str = "") -> list[CacheEntry]:
        """Live entries of the scope whose key starts with `prefix`, by key
        (`CacheListing`): the key index by ZRANGEBYLEX, then GET + PTTL per key
        (one slot per scope); `expires_at` is this machine's clock plus the PTTL."""
        async with self._life.op():
            require_scope(scope, "scope")
            prefix = check_prefix(prefix)
            lo, hi = lex_prefix_range(prefix)
            index = self._keys.cache_index(scope)
            out: list[CacheEntry] = []
            with translate("cache entries"):
                while True:
                    # Each batch starts after the last member read (by key, never at
                    # an offset: a key put or deleted before the offset meanwhile
                    # would shift it, skipping or repeating an entry).
                    members: Any = await self._r.zrangebylex(index, lo, hi, start=0, num=_BATCH)
                    if not members:
                        return out
                    lo = b"(" + members[-1]
                    now = datetime.now(UTC)
                    pipe = self._r.pipeline(transaction=False)
                    keys = [m.decode("utf-8", "surrogatepass") for m in members]
                    for key in keys:
                        pipe.get(self._keys.cache_value(scope, key))
                        pipe.pttl(self._keys.cache_value(scope, key))
                    replies: list[Any] = await pipe.execute()
                    for i, key in enumerate(keys):
                        value, pttl = replies[2 * i], replies[2 * i + 1]
                        if value is None:
                            continue  # expired; its index member is cleaned lazily
                        expires = None if int(pttl) < 0 else now + timedelta(milliseconds=int(pttl))
                        out.append(CacheEntry(key=key, value=bytes(value), expires_at=expires))

    async def delete_prefix(self, scope: str, prefix: str) -> int:
        async with self._life.op():
            require_scope(scope, "scope")
            prefix = check_prefix(prefix)
            lo, hi = lex_prefix_range(prefix)
            index = self._keys.cache_index(scope)
            total = 0
            with translate("cache delete_prefix"):
                while True:
                    members: Any = await self._r.zrangebylex(index, lo, hi, start=0, num=_BATCH)
                    if not members:
                        return total
                    keys = [
                        self._keys.cache_value(scope, m.decode("utf-8", "surrogatepass"))
                        for m in members
                    ]
                    total += int(await self._delete_many(keys=[index, *keys], args=members))

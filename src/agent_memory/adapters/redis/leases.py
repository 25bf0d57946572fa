"""`LeaseStore` on Redis: one Lua script per operation, server time, PX expiry
(the scripts also compare the stored expiry with the server's time, so a lease
ends at its `expires_at` exactly, not a millisecond later as PX would have it).

Per scope (hash tag = digest of the scope): a hash per lease (owner, token,
expiry, payload, raw key) with PX expiry, a fencing counter per key that has no
expiry (tokens only grow, across release and expiry), and a sorted set of raw
keys (score 0) for ordered prefix scans by ZRANGEBYLEX.

Replication is asynchronous: a lease or a fencing-counter increment that a
primary granted can be lost when it dies before a replica has it. With
`wait_replicas=N` (the default on a cluster: 1) an acquire or renew returns only
after `WAIT N` says N replicas have it; otherwise it raises `BackendUnavailable`
and the lease is not issued (docs/redis.md, "Cluster").
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from redis.exceptions import NoScriptError

from agent_memory.adapters._common.validation import (
    check_lease_args,
    check_lease_payload,
    check_prefix,
)
from agent_memory.adapters.redis._client import Client, connect, is_cluster
from agent_memory.adapters.redis._cluster import primary_for
from agent_memory.adapters.redis._errors import BACKEND, translate
from agent_memory.adapters.redis._handle import RedisHandle, SharedClient
from agent_memory.adapters.redis._keys import lex_prefix_range
from agent_memory.domain.errors import BackendUnavailable, InvalidInput, LeaseNotHeld
from agent_memory.domain.records import Lease
from agent_memory.domain.validation import require_id, require_scope

__all__ = ["DEFAULT_WAIT_TIMEOUT", "RedisLeaseStore"]

DEFAULT_WAIT_TIMEOUT = timedelta(seconds=1)

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: lease, counter, index. ARGV: owner, ttl_ms, payload, raw key.
_ACQUIRE = (
    _NOW
    + """
local holder = redis.call('HGET', KEYS[1], 'owner')
if holder and tonumber(redis.call('HGET', KEYS[1], 'exp')) <= now then holder = false end
local token
if holder then
  if holder ~= ARGV[1] then return false end
  token = tonumber(redis.call('HGET', KEYS[1], 'token'))
else
  token = redis.call('INCR', KEYS[2])
end
local exp = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'exp', exp, 'payload', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[3], 0, ARGV[4])
return {token, exp}
"""
)

# KEYS: lease. ARGV: owner, ttl_ms, has_payload, payload. -> {token, exp, payload} or {holder}
_RENEW = (
    _NOW
    + """
local holder = redis.call('HGET', KEYS[1], 'owner')
if holder and tonumber(redis.call('HGET', KEYS[1], 'exp')) <= now then holder = false end
if not holder then return {} end
if holder ~= ARGV[1] then return {holder} end
local exp = now + tonumber(ARGV[2])
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'payload', ARGV[4]) end
redis.call('HSET', KEYS[1], 'exp', exp)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {redis.call('HGET', KEYS[1], 'token'), exp, redis.call('HGET', KEYS[1], 'payload')}
"""
)

# KEYS: lease, index. ARGV: owner, raw key.
_RELEASE = (
    _NOW
    + """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'exp')) <= now then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
"""
)

# KEYS: leases (one scope's slot). -> per lease its HGETALL while it is live,
# else an empty reply. A lease expires at its `exp` (ms, server time) exactly:
# the key's own PX expiry lets it be read for the millisecond it ends in.
_READ = (
    _NOW
    + """
local out = {}
for i = 1, #KEYS do
  local exp = redis.call('HGET', KEYS[i], 'exp')
  if exp and tonumber(exp) > now then
    out[i] = redis.call('HGETALL', KEYS[i])
  else
    out[i] = {}
  end
end
return out
"""
)

# KEYS: index, then the lease of each member. ARGV: the members (raw keys) whose
# lease scan found expired. Each leaves the index only if its lease still does not
# exist: one acquired since (its ZADD a no-op, the member being there) stays
# listed. -> the number removed
_FORGET_EXPIRED = """
local n = 0
for i = 1, #ARGV do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return n
"""
_BATCH = 500


def _ttl_ms(ttl: timedelta) -> int:
    """A checked (`check_lease_args`) ttl in whole milliseconds, at least 1."""
    return max(1, ttl // timedelta(milliseconds=1))


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


class RedisLeaseStore(RedisHandle):
    """`LeaseStore` over redis.asyncio; expiry by the server's clock (PX).

    `wait_replicas`: replicas that must acknowledge an acquire or renew before it
    returns (None: 1 on a cluster, 0 on a single server); `wait_timeout` bounds
    the wait."""

    def __init__(
        self,
        client: Client | SharedClient,
        *,
        prefix: str = "agent_memory",
        deployment: str = "default",
        owns_client: bool = False,
        wait_replicas: int | None = None,
        wait_timeout: timedelta = DEFAULT_WAIT_TIMEOUT,
    ) -> None:
        super().__init__(
            client,
            "redis lease store",
            prefix=prefix,
            deployment=deployment,
            owns_client=owns_client,
        )
        self._cluster = is_cluster(self._r)
        if wait_replicas is None:
            wait_replicas = 1 if self._cluster else 0
        if isinstance(wait_replicas, bool) or not isinstance(wait_replicas, int):
            raise InvalidInput("wait_replicas", f"an int >= 0 is required, got {wait_replicas!r}")
        if wait_replicas < 0:
            raise InvalidInput("wait_replicas", f"an int >= 0 is required, got {wait_replicas}")
        if not isinstance(wait_timeout, timedelta) or wait_timeout < timedelta(milliseconds=1):
            raise InvalidInput("wait_timeout", f"at least 1 ms is required, got {wait_timeout!r}")
        self._wait = wait_replicas
        self._wait_ms = wait_timeout // timedelta(milliseconds=1)
        self._acquire = self._r.register_script(_ACQUIRE)
        self._renew = self._r.register_script(_RENEW)
        self._release = self._r.register_script(_RELEASE)
        self._forget_expired = self._r.register_script(_FORGET_EXPIRED)
        self._read = self._r.register_script(_READ)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisLeaseStore:
        options = kwargs.pop("client_options", {})
        return cls(connect(url, **options), owns_client=True, **kwargs)

    async def acquire(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes = b""
    ) -> Lease | None:
        async with self._life.op():
            check_lease_args(scope, key, owner, ttl)
            ms = _ttl_ms(ttl)
            data = check_lease_payload(payload)
            k = self._keys
            keys = [k.lease(scope, key), k.lease_counter(scope, key), k.lease_index(scope)]
            with translate("acquire"):
                if self._wait:
                    res = await self._acknowledged(self._acquire, keys, [owner, ms, data, key])
                else:
                    res = await self._acquire(keys=keys, args=[owner, ms, data, key])
            if not res:
                return None
            token, exp = int(res[0]), int(res[1])
            return Lease(scope=scope, key=key, owner=owner, token=token,
                         expires_at=_at(exp), payload=data)  # fmt: skip

    async def renew(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes | None = None
    ) -> Lease:
        async with self._life.op():
            check_lease_args(scope, key, owner, ttl)
            ms = _ttl_ms(ttl)
            data = None if payload is None else check_lease_payload(payload)
            keys = [self._keys.lease(scope, key)]
            args: list[Any] = [owner, ms, "0" if data is None else "1", data or b""]
            with translate("renew"):
                if self._wait:
                    res = await self._acknowledged(self._renew, keys, args)
                else:
                    res = await self._renew(keys=keys, args=args)
            if len(res) < 3:
                holder = res[0].decode("utf-8", "surrogatepass") if res else None
                raise LeaseNotHeld(key, owner, holder)
            return Lease(scope=scope, key=key, owner=owner, token=int(res[0]),
                         expires_at=_at(int(res[1])), payload=res[2])  # fmt: skip

    @property
    def wait_replicas(self) -> int:
        return self._wait

    async def _acknowledged(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """Run `script`, then `WAIT` on the same connection of the same primary (one
        round trip, a pipeline). A granted lease (a reply with a token) counts only
        when `wait_replicas` replicas acknowledged it; else `BackendUnavailable`.
        The script is idempotent for its owner (acquire of one's own lease keeps its
        token), so after a slot moved mid-way it runs again on the new primary."""
        for _ in range(3):
            node = await primary_for(self._r, keys[0]) if self._cluster else None  # type: ignore[arg-type]
            pipe = self._r.pipeline(transaction=False)
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            where = {} if node is None else {"target_nodes": node}
            pipe.execute_command("WAIT", self._wait, self._wait_ms, **where)
            res, acked = await pipe.execute(raise_on_error=False)
            if isinstance(res, NoScriptError):
                await self._r.script_load(script.script)
                continue
            for reply in (res, acked):
                if isinstance(reply, Exception):
                    raise reply
            if node is not None and (await primary_for(self._r, keys[0])).name != node.name:  # type: ignore[arg-type]
                continue
            if res and len(res) >= 2 and int(acked) < self._wait:
                raise BackendUnavailable(
                    BACKEND,
                    f"{int(acked)} of {self._wait} replica(s) acknowledged the lease within "
                    f"{self._wait_ms} ms; it is not issued (retry, or lower wait_replicas)",
                )
            return res
        raise BackendUnavailable(BACKEND, "the lease's slot kept moving; try again")

    async def release(self, scope: str, key: str, owner: str) -> bool:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            require_id(owner, "owner")
            k = self._keys
            with translate("release"):
                done = await self._release(
                    keys=[k.lease(scope, key), k.lease_index(scope)], args=[owner, key]
                )
            return bool(done)

    async def _read_live(self, scope: str, keys: list[str]) -> list[dict[bytes, bytes]]:
        """The live leases' fields (empty when expired or missing), per key."""
        out: list[dict[bytes, bytes]] = []
        for start in range(0, len(keys), _BATCH):
            batch = [self._keys.lease(scope, key) for key in keys[start : start + _BATCH]]
            replies: Any = await self._read(keys=batch)
            out += [dict(zip(r[0::2], r[1::2], strict=True)) for r in replies]
        return out

    @staticmethod
    def _decode(scope: str, key: str, raw: dict[bytes, bytes]) -> Lease | None:
        if not raw:
            return None
        return Lease(
            scope=scope,
            key=key,
            owner=raw[b"owner"].decode("utf-8", "surrogatepass"),
            token=int(raw[b"token"]),
            expires_at=_at(int(raw[b"exp"])),
            payload=raw.get(b"payload", b""),
        )

    async def get(self, scope: str, key: str) -> Lease | None:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            with translate("get"):
                (raw,) = await self._read_live(scope, [key])
            return self._decode(scope, key, raw)

    async def scan(self, scope: str, prefix: str = "") -> list[Lease]:
        async with self._life.op():
            require_scope(scope, "scope")
            prefix = check_prefix(prefix)
            lo, hi = lex_prefix_range(prefix)
            index = self._keys.lease_index(scope)
            with translate("scan"):
                members: Any = await self._r.zrangebylex(index, lo, hi)
                keys = [m.decode("utf-8", "surrogatepass") for m in members]
                raws = await self._read_live(scope, keys)
                gone = [
                    (m, key) for m, key, raw in zip(members, keys, raws, strict=True) if not raw
                ]
                if gone:  # expired leases: drop them from the index, unless re-acquired
                    # since (a check and ZREM in one script; all keys in the scope's slot)
                    for start in range(0, len(gone), _BATCH):
                        batch = gone[start : start + _BATCH]
                        await self._forget_expired(
                            keys=[index, *(self._keys.lease(scope, key) for _, key in batch)],
                            args=[m for m, _ in batch],
                        )
            out = [self._decode(scope, key, raw) for key, raw in zip(keys, raws, strict=True)]
            leases = [lease for lease in out if lease is not None]
            leases.sort(key=lambda lease: lease.key)
            return leases

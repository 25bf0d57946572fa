"""`EventLog` on Redis: sorted sets scored by event time, payloads in hashes.

Per domain (hash tag = digest of the domain, so one append script touches one
slot): a payload hash (event id -> JSON), a time-ordered set of the domain's
own events, and one set per entity. Global events live in the global sets
(tag `{g}`) so every domain's window merges them in one ordering. A per-user
set of references serves `erase_user`; a set of known domains serves
`purge_expired`. Retention is applied on read (the score floor) and purged.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from redis.exceptions import NoScriptError

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters._common.validation import (
    check_events,
    check_retention,
    check_window_args,
)
from agent_memory.adapters.redis._client import Client, connect
from agent_memory.adapters.redis._codec import decode_event, encode_event, to_micros
from agent_memory.adapters.redis._errors import translate
from agent_memory.adapters.redis._handle import RedisHandle, SharedClient
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import Entity, Event, EventWindow
from agent_memory.domain.validation import require_id
from agent_memory.ports.models import Clock

__all__ = ["DEFAULT_RETENTION", "RedisEventLog"]

DEFAULT_RETENTION = timedelta(days=60)

# KEYS[1] payload hash, KEYS[2] domain set, KEYS[3..] entity sets (same slot).
# ARGV per event: id, payload, score, global flag, n, n indices into KEYS.
_APPEND = """
local out = {}
local pos = 1
while pos <= #ARGV do
  local id, payload, score, glob = ARGV[pos], ARGV[pos + 1], ARGV[pos + 2], ARGV[pos + 3]
  local n = tonumber(ARGV[pos + 4])
  local new = redis.call('HSETNX', KEYS[1], id, payload)
  if new == 1 and glob == '0' then
    redis.call('ZADD', KEYS[2], score, id)
    for j = 1, n do
      redis.call('ZADD', KEYS[tonumber(ARGV[pos + 4 + j])], score, id)
    end
  end
  out[#out + 1] = new
  pos = pos + 5 + n
end
return out
"""

_Ref = tuple[str, str]  # (domain, event id)
_RawRef = tuple[str, bytes]  # (domain, event id as stored)


def _domain_hex(domain: str) -> bytes:
    return domain.encode("utf-8").hex().encode()


def _gmember(domain: str, id: str) -> bytes:
    """Member of the global/user sets: id first (ties order by id), then the domain."""
    return id.encode("utf-8", "surrogatepass") + b"\x00" + _domain_hex(domain)


def _parse_gmember(raw: bytes) -> _Ref:
    id_raw, _, dom_hex = raw.rpartition(b"\x00")
    return bytes.fromhex(dom_hex.decode()).decode("utf-8"), id_raw.decode("utf-8", "surrogatepass")


class RedisEventLog(RedisHandle):
    """`EventLog` over redis.asyncio (no module needed)."""

    def __init__(
        self,
        client: Client | SharedClient,
        *,
        prefix: str = "agent_memory",
        deployment: str = "default",
        retention: timedelta = DEFAULT_RETENTION,
        clock: Clock | None = None,
        owns_client: bool = False,
    ) -> None:
        self._retention = check_retention(retention)
        super().__init__(
            client, "redis event log", prefix=prefix, deployment=deployment, owns_client=owns_client
        )
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._append = self._r.register_script(_APPEND)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisEventLog:
        options = kwargs.pop("client_options", {})
        return cls(connect(url, **options), owns_client=True, **kwargs)

    @property
    def retention(self) -> timedelta:
        return self._retention

    def _cutoff(self) -> datetime:
        return self._clock.now() - self._retention

    async def append(self, events: Sequence[Event]) -> int:
        async with self._life.op():
            if isinstance(events, Event):
                raise InvalidInput("events", "a sequence of Event is required")
            batch = check_events(events)
            if not batch:
                return 0
            k = self._keys
            by_domain: dict[str, list[Event]] = {}
            for e in batch:
                by_domain.setdefault(e.domain, []).append(e)
            # Per domain: the script's keys and args (one slot each).
            calls: list[tuple[list[str], list[Any]]] = []
            for domain, evs in by_domain.items():
                keys = [k.ev_payloads(domain), k.ev_domain(domain)]
                slot: dict[str, int] = {}
                args: list[Any] = []
                for e in evs:
                    idx: list[int] = []
                    if not e.is_global:
                        for ent in e.entities:
                            key = k.ev_domain_entity(domain, ent.type, ent.id)
                            if key not in slot:
                                keys.append(key)
                                slot[key] = len(keys)
                            idx.append(slot[key])
                    args += [e.id, encode_event(e), to_micros(e.occurred_at)]
                    args += ["1" if e.is_global else "0", len(idx), *idx]
                calls.append((keys, args))
            # Other slots: idempotent single-key writes (NX keeps the first time).
            zadds: list[tuple[str, dict[bytes, int]]] = []
            sadds: list[tuple[str, list[Any]]] = [(k.ev_domains(), list(by_domain))]
            for e in batch:
                if e.is_global or e.user_id is not None:
                    member = _gmember(e.domain, e.id)
                    score = to_micros(e.occurred_at)
                if e.is_global:
                    zadds.append((k.ev_global(), {member: score}))
                    for ent in e.entities:
                        zadds.append((k.ev_global_entity(ent.type, ent.id), {member: score}))
                if e.user_id is not None:
                    sadds.append((k.ev_user(e.user_id), [member]))
            with translate("append"):
                results = await self._append_round_trip(calls, zadds, sadds)
            return sum(sum(int(x) for x in r) for r in results[: len(calls)])

    async def _append_round_trip(
        self,
        calls: list[tuple[list[str], list[Any]]],
        zadds: list[tuple[str, dict[bytes, int]]],
        sadds: list[tuple[str, list[Any]]],
    ) -> list[Any]:
        """One pipeline: EVALSHA per domain plus the other slots' writes. Every command
        is idempotent, so after NOSCRIPT (a restarted server) load and send it again."""
        for attempt in (1, 2):
            pipe = self._r.pipeline(transaction=False)
            for keys, args in calls:
                pipe.evalsha(self._append.sha, len(keys), *keys, *args)
            for key, mapping in zadds:
                pipe.zadd(key, mapping, nx=True)
            for key, members in sadds:
                pipe.sadd(key, *members)
            try:
                return list(await pipe.execute())
            except NoScriptError:
                if attempt == 2:
                    raise
                await self._r.script_load(_APPEND)
        raise AssertionError("unreachable")

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
    ) -> EventWindow:
        async with self._life.op():
            since = check_window_args(domain, since, limit, entity)
            floor = to_micros(max(since, self._cutoff()))
            k = self._keys
            if entity is None:
                own, glob = k.ev_domain(domain), k.ev_global()
            else:
                own = k.ev_domain_entity(domain, entity.type, entity.id)
                glob = k.ev_global_entity(entity.type, entity.id)
            n = limit + 1
            with translate("window"):
                pipe = self._r.pipeline(transaction=False)
                # Plain commands: flat [member, score, ...] replies, not paired by the client.
                pipe.execute_command(
                    "ZREVRANGEBYSCORE", own, "+inf", floor, "WITHSCORES", "LIMIT", 0, n
                )
                pipe.execute_command(
                    "ZREVRANGEBYSCORE", glob, "+inf", floor, "WITHSCORES", "LIMIT", 0, n
                )
                own_rows, glob_rows = await pipe.execute()
                # Merge by (time, id, domain) desc before fetching: only the page's payloads
                # travel. Raw UTF-8 ids and hex domains sort as their strings do (code
                # point order), so only the page's references are decoded.
                own_hex = _domain_hex(domain)
                merged: list[tuple[float, bytes, bytes]] = [
                    (float(score), i, own_hex)
                    for i, score in zip(own_rows[0::2], own_rows[1::2], strict=True)
                ]
                for member, score in zip(glob_rows[0::2], glob_rows[1::2], strict=True):
                    id_raw, _, dom_hex = member.rpartition(b"\x00")
                    merged.append((float(score), id_raw, dom_hex))
                merged.sort(reverse=True)
                names = {own_hex: domain}
                refs: list[_RawRef] = []
                for _, i, h in merged[:limit]:
                    d = names.get(h)
                    if d is None:
                        d = names[h] = bytes.fromhex(h.decode()).decode("utf-8")
                    refs.append((d, i))
                found = await self._payloads(refs)
            rows = [
                e
                for (d, _), e in zip(refs, found, strict=True)
                if e is not None and (e.is_global or (d == domain and not e.is_global))
            ]
            return EventWindow(events=tuple(rows), limited=len(merged) > limit)

    async def _payloads(self, refs: Sequence[_Ref | _RawRef]) -> list[Event | None]:
        """Fetch payloads with one HMGET per domain, in one round trip."""
        if not refs:
            return []
        by_domain: dict[str, list[int]] = {}
        for pos, (d, _) in enumerate(refs):
            by_domain.setdefault(d, []).append(pos)
        pipe = self._r.pipeline(transaction=False)
        for d, positions in by_domain.items():
            pipe.execute_command(
                "HMGET", self._keys.ev_payloads(d), *[refs[p][1] for p in positions]
            )
        out: list[Event | None] = [None] * len(refs)
        for positions, raws in zip(by_domain.values(), await pipe.execute(), strict=True):
            for p, raw in zip(positions, raws, strict=True):
                out[p] = None if raw is None else decode_event(raw)
        return out

    async def _remove(self, events: Sequence[Event]) -> int:
        """Delete events and every reference to them; the number of payloads deleted."""
        if not events:
            return 0
        k = self._keys
        pipe = self._r.pipeline(transaction=False)
        for e in events:
            pipe.hdel(k.ev_payloads(e.domain), e.id)
            member = _gmember(e.domain, e.id)
            if e.is_global:
                pipe.zrem(k.ev_global(), member)
                for ent in e.entities:
                    pipe.zrem(k.ev_global_entity(ent.type, ent.id), member)
            else:
                pipe.zrem(k.ev_domain(e.domain), e.id)
                for ent in e.entities:
                    pipe.zrem(k.ev_domain_entity(e.domain, ent.type, ent.id), e.id)
            if e.user_id is not None:
                pipe.srem(k.ev_user(e.user_id), member)
        results = await pipe.execute()
        per = [1 + (1 + len(e.entities)) + (1 if e.user_id is not None else 0) for e in events]
        count, pos = 0, 0
        for n in per:
            count += int(results[pos])
            pos += n
        return count

    async def erase_user(self, user_id: str) -> int:
        async with self._life.op():
            require_id(user_id, "user_id")
            key = self._keys.ev_user(user_id)
            with translate("erase_user"):
                members: Any = await self._r.smembers(key)
                refs = [_parse_gmember(m) for m in members]
                found = await self._payloads(refs)
                doomed = [e for e in found if e is not None and e.user_id == user_id]
                count = await self._remove(doomed)
                await self._r.delete(key)
            return count

    async def user_events(self, user_id: str) -> list[Event]:
        async with self._life.op():
            require_id(user_id, "user_id")
            with translate("user_events"):
                members: Any = await self._r.smembers(self._keys.ev_user(user_id))
                found = await self._payloads([_parse_gmember(m) for m in members])
            rows = [e for e in found if e is not None and e.user_id == user_id]
            rows.sort(key=lambda e: (e.occurred_at, e.domain, e.id), reverse=True)
            return rows

    async def domains(self) -> list[str]:
        async with self._life.op():
            with translate("domains"):
                known: Any = await self._r.smembers(self._keys.ev_domains())
            return sorted(d.decode("utf-8") for d in known)

    async def purge_expired(self) -> int:
        async with self._life.op():
            cutoff = f"({to_micros(self._cutoff())}"
            k = self._keys
            with translate("purge_expired"):
                known: Any = await self._r.smembers(k.ev_domains())
                domains = [d.decode("utf-8") for d in known]
                pipe = self._r.pipeline(transaction=False)
                for d in domains:
                    pipe.zrangebyscore(k.ev_domain(d), "-inf", cutoff)
                pipe.zrangebyscore(k.ev_global(), "-inf", cutoff)
                results = await pipe.execute()
                refs: list[_Ref] = []
                for d, ids in zip(domains, results[:-1], strict=True):
                    refs += [(d, i.decode("utf-8", "surrogatepass")) for i in ids]
                refs += [_parse_gmember(m) for m in results[-1]]
                found = await self._payloads(refs)
                doomed = [e for e in found if e is not None]
                # Stale references (payload already gone) are dropped too.
                stale = [r for r, e in zip(refs, found, strict=True) if e is None]
                count = await self._remove(doomed)
                if stale:
                    pipe = self._r.pipeline(transaction=False)
                    for d, i in stale:
                        pipe.zrem(k.ev_domain(d), i)
                        pipe.zrem(k.ev_global(), _gmember(d, i))
                    await pipe.execute()
            return count

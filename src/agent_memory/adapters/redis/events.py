"""`EventLog` on Redis: sorted sets scored by event time, payloads in hashes.

Per domain (hash tag = digest of the domain, so one append script touches one
slot): a payload hash (event id -> JSON), a time-ordered set of the domain's
own events, a set of the same members scored by ingestion time (`recorded_at`),
and one set per entity, and one set per user of the domain's events carrying
that user id (global ones included). Global events live in the global sets (tag
`{g}`, a time-ordered and a recorded-time set) so every domain's window merges
them in one ordering. A set of known domains serves `purge_expired`,
`user_events` and `erase_user`.

A user's index entry is written by the same script, in the same slot, as the
event's payload, and `erase_user` deletes a domain's payloads of that user and
the user's set there in one script: no append, whenever it lands, leaves a
payload whose index entry is gone, so a forget racing appends misses at most
events that a later forget finds. (Releases before this one kept one user set
in its own slot; erasure still reads and empties it, member by member.)

A window reads, in one script per slot, the time-ordered set's score range
`[since, until)` newest first, skipping members whose recorded time is past
retention (an event expires at `recorded_at + retention`, whatever its event
time), until `limit + 1` are found. Events stored before the recorded-time sets
existed have no recorded score there; they expire by event time, as they did
then. `purge_expired` deletes expired events and their references, and only
the events it judged expired: one stored under the same id after it read them
(another purge or a forget freed the id) is left whole, index entries included.
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
from agent_memory.domain.validation import require_id, require_utc
from agent_memory.ports.models import Clock

__all__ = ["DEFAULT_RETENTION", "RedisEventLog"]

DEFAULT_RETENTION = timedelta(days=60)

# KEYS[1] payload hash, KEYS[2] domain set, KEYS[3] domain recorded-time set,
# KEYS[4..] entity sets and per-user sets (same slot).
# ARGV per event: id, payload, score, recorded score, global flag, index of the
# user set in KEYS (0: no user), n, n indices into KEYS.
# Returns per event 1 (stored), 2 (already stored with this very payload: a
# retry) or 0 (another event holds the id).
_APPEND = """
local out = {}
local pos = 1
while pos <= #ARGV do
  local id, payload, score, recorded = ARGV[pos], ARGV[pos + 1], ARGV[pos + 2], ARGV[pos + 3]
  local glob = ARGV[pos + 4]
  local user = tonumber(ARGV[pos + 5])
  local n = tonumber(ARGV[pos + 6])
  local new = redis.call('HSETNX', KEYS[1], id, payload)
  if new == 0 and redis.call('HGET', KEYS[1], id) == payload then
    new = 2
  end
  if new == 1 then
    if user > 0 then
      redis.call('SADD', KEYS[user], id)
    end
    if glob == '0' then
      redis.call('ZADD', KEYS[2], score, id)
      redis.call('ZADD', KEYS[3], recorded, id)
      for j = 1, n do
        redis.call('ZADD', KEYS[tonumber(ARGV[pos + 6 + j])], score, id)
      end
    end
  end
  out[#out + 1] = new
  pos = pos + 7 + n
end
return out
"""

# One domain's part of a forget, atomic with that domain's appends: KEYS[1]
# payload hash, KEYS[2] domain set, KEYS[3] domain recorded-time set, KEYS[4]
# the user's set in the domain. Deletes the user's payloads there, their
# time/recorded entries and the user's set; returns the deleted payloads (their
# entity and global references are removed after, by the caller).
_ERASE = """
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  local payload = redis.call('HGET', KEYS[1], id)
  if payload then
    redis.call('HDEL', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    out[#out + 1] = payload
  end
end
redis.call('DEL', KEYS[4])
return out
"""

# One slot's part of a window: KEYS[1] a time-ordered set, KEYS[2] the
# recorded-time set of the same slot. ARGV: max score (`+inf` or exclusive
# `(until`), min score (since), retention cutoff, n. Returns up to n
# [member, score] pairs, newest first, of members recorded at or after the
# cutoff (a member without a recorded score is judged by its event time).
_WINDOW = """
local n = tonumber(ARGV[4])
local cutoff = tonumber(ARGV[3])
local out = {}
local offset = 0
while true do
  local rows = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[2],
    'WITHSCORES', 'LIMIT', offset, n)
  for i = 1, #rows, 2 do
    local recorded = redis.call('ZSCORE', KEYS[2], rows[i]) or rows[i + 1]
    if tonumber(recorded) >= cutoff then
      out[#out + 1] = rows[i]
      out[#out + 1] = rows[i + 1]
      if #out >= 2 * n then
        return out
      end
    end
  end
  if #rows < 2 * n then
    return out
  end
  offset = offset + n
end
"""

# One slot's expired members: KEYS[1] a time-ordered set, KEYS[2] the
# recorded-time set of the same slot, ARGV[1] the exclusive cutoff `(micros`.
# Returns [member, kind, score, ...]: kind 'r' with its recorded time, or 't'
# with its event time for a member without one (stored by an earlier release),
# so the purge can tell the event it judged from one stored under the same id
# after it read them.
_EXPIRED = """
local out = {}
local rows = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'WITHSCORES')
for i = 1, #rows, 2 do
  out[#out + 1] = rows[i]
  out[#out + 1] = 'r'
  out[#out + 1] = rows[i + 1]
end
rows = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES')
for i = 1, #rows, 2 do
  if not redis.call('ZSCORE', KEYS[2], rows[i]) then
    out[#out + 1] = rows[i]
    out[#out + 1] = 't'
    out[#out + 1] = rows[i + 1]
  end
end
return out
"""

# One domain's part of a purge, atomic with that domain's appends: KEYS[1]
# payload hash, KEYS[2] domain set, KEYS[3] domain recorded-time set, KEYS[4..]
# the events' entity and per-domain user sets (same slot). ARGV per event: id,
# the payload the purger read (empty: a stale reference, no payload was read),
# global flag, index of the user set in KEYS (0: none), n, n indices into KEYS.
# An event is deleted, with its references in this slot, only while its payload
# is still the one read: one appended since under the same id (after another
# purge or a forget deleted the old one) stays, index entries and all. A stale
# reference is dropped only while there is still no payload. Returns 1 per
# event whose payload it deleted (or whose stale references it dropped), else 0.
_PURGE = """
local out = {}
local pos = 1
while pos <= #ARGV do
  local id, expected, glob = ARGV[pos], ARGV[pos + 1], ARGV[pos + 2]
  local user = tonumber(ARGV[pos + 3])
  local n = tonumber(ARGV[pos + 4])
  local current = redis.call('HGET', KEYS[1], id)
  local gone = 0
  if expected == '' then
    if not current then
      gone = 1
    end
  elseif current == expected then
    redis.call('HDEL', KEYS[1], id)
    gone = 1
  end
  if gone == 1 then
    if glob == '0' then
      redis.call('ZREM', KEYS[2], id)
      redis.call('ZREM', KEYS[3], id)
      for j = 1, n do
        redis.call('ZREM', KEYS[tonumber(ARGV[pos + 4 + j])], id)
      end
    end
    if user > 0 then
      redis.call('SREM', KEYS[user], id)
    end
  end
  out[#out + 1] = gone
  pos = pos + 5 + n
end
return out
"""

#: events per purge script call (a script blocks its server while it runs)
_PURGE_BATCH = 500

#: event-time scores (µs) are exact doubles strictly within +-2**53 of the epoch
_EXACT = 2**53
#: "no limit" for the window script reading a band beyond _EXACT whole
_ALL = 2**31

_Ref = tuple[str, str]  # (domain, event id)
_RawRef = tuple[str, bytes]  # (domain, event id as stored)


def _recorded_key(time_key: str) -> str:
    """The recorded-time set next to a time-ordered set (`...:t` -> `...:r`),
    in the same slot (same hash tag)."""
    assert time_key.endswith(":t"), time_key
    return time_key[:-1] + "r"


def _is_judged(e: Event, judged: tuple[bytes, float]) -> bool:
    """Whether `e` is the event whose score the purge read: its recorded time
    (kind b"r") or, for an event without one, its event time (b"t")."""
    kind, score = judged
    # the score as stored: a double (inexact beyond +-2**53 µs of the epoch)
    return float(to_micros(e.recorded_at if kind == b"r" else e.occurred_at)) == score


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
        self._window = self._r.register_script(_WINDOW)
        self._expired = self._r.register_script(_EXPIRED)
        self._erase = self._r.register_script(_ERASE)
        self._purge = self._r.register_script(_PURGE)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisEventLog:
        options = kwargs.pop("client_options", {})
        return cls(connect(url, **options), owns_client=True, **kwargs)

    @property
    def retention(self) -> timedelta:
        return self._retention

    def _cutoff(self) -> datetime:
        """Events recorded before this instant are past retention."""
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
                keys = [
                    k.ev_payloads(domain),
                    k.ev_domain(domain),
                    _recorded_key(k.ev_domain(domain)),
                ]
                slot: dict[str, int] = {}
                args: list[Any] = []
                for e in evs:
                    user = 0
                    if e.user_id is not None:
                        key = k.ev_domain_user(domain, e.user_id)
                        if key not in slot:
                            keys.append(key)
                            slot[key] = len(keys)
                        user = slot[key]
                    idx: list[int] = []
                    if not e.is_global:
                        for ent in e.entities:
                            key = k.ev_domain_entity(domain, ent.type, ent.id)
                            if key not in slot:
                                keys.append(key)
                                slot[key] = len(keys)
                            idx.append(slot[key])
                    args += [e.id, encode_event(e), to_micros(e.occurred_at)]
                    args.append(to_micros(e.recorded_at))
                    args += ["1" if e.is_global else "0", user, len(idx), *idx]
                calls.append((keys, args))
            sadds: list[tuple[str, list[Any]]] = [(k.ev_domains(), list(by_domain))]
            with translate("append"):
                results = await self._append_round_trip(calls, [], sadds)
                # The global slots' entries (idempotent single-key writes, NX keeps
                # the first time), only for the events the scripts stored or had
                # already stored as they are (a retry completes what an append cut
                # short did not write): a different event holding the id must not
                # lend it this one's entities, time or globality.
                zadds: list[tuple[str, dict[bytes, int]]] = []
                for evs, replies in zip(by_domain.values(), results, strict=False):
                    for e, reply in zip(evs, replies, strict=True):
                        if e.is_global and int(reply):
                            zadds += self._global_refs(e)
                if zadds:
                    await self._eval(self._append, [], zadds)
            return sum(sum(int(x) == 1 for x in r) for r in results[: len(calls)])

    def _global_refs(self, e: Event) -> list[tuple[str, dict[bytes, int]]]:
        """The global event's entries in the global slots (time, recorded time,
        entity sets), as (key, {member: score}) for ZADD NX."""
        k = self._keys
        member = _gmember(e.domain, e.id)
        score = to_micros(e.occurred_at)
        refs = [
            (k.ev_global(), {member: score}),
            (_recorded_key(k.ev_global()), {member: to_micros(e.recorded_at)}),
        ]
        refs += [(k.ev_global_entity(ent.type, ent.id), {member: score}) for ent in e.entities]
        return refs

    async def _append_round_trip(
        self,
        calls: list[tuple[list[str], list[Any]]],
        zadds: list[tuple[str, dict[bytes, int]]],
        sadds: list[tuple[str, list[Any]]],
    ) -> list[Any]:
        """One pipeline: EVALSHA per domain plus the other slots' writes. Every command
        is idempotent, so after NOSCRIPT (a restarted server) load and send it again."""
        return await self._eval(self._append, calls, zadds, sadds)

    async def _eval(
        self,
        script: Any,
        calls: list[tuple[list[str], list[Any]]],
        zadds: Sequence[tuple[str, dict[bytes, int]]] = (),
        sadds: Sequence[tuple[str, list[Any]]] = (),
    ) -> list[Any]:
        """One pipeline: EVALSHA of `script` per call, then the ZADD NX and SADD
        writes; the replies in order. Every command is idempotent or a read, so
        after NOSCRIPT (a restarted server) load the script and send it again."""
        for attempt in (1, 2):
            pipe = self._r.pipeline(transaction=False)
            for keys, args in calls:
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            for key, mapping in zadds:
                pipe.zadd(key, mapping, nx=True)
            for key, members in sadds:
                pipe.sadd(key, *members)
            try:
                return list(await pipe.execute())
            except NoScriptError:
                if attempt == 2:
                    raise
                await self._r.script_load(script.script)
        raise AssertionError("unreachable")

    async def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        async with self._life.op():
            since = check_window_args(domain, since, limit, entity)
            until = None if until is None else require_utc(until, "until")
            k = self._keys
            if entity is None:
                own, glob = k.ev_domain(domain), k.ev_global()
            else:
                own = k.ev_domain_entity(domain, entity.type, entity.id)
                glob = k.ev_global_entity(entity.type, entity.id)
            n = limit + 1
            lo, hi = to_micros(since), None if until is None else to_micros(until)
            cutoff = to_micros(self._cutoff())
            # Scores are doubles: exact only within (-_EXACT, _EXACT) µs of the
            # epoch (1684-2255). The exact band is read in score order, limited;
            # the bands beyond (rare) are read whole and ordered by the payloads'
            # own times, newer band first.
            top = "+inf" if hi is None else f"({hi}"
            if hi is None or hi > _EXACT:
                top = f"({_EXACT}"
            bottom = str(lo) if lo > -_EXACT else f"({-_EXACT}"
            args = [top, bottom, cutoff, n]
            sets = [
                [own, _recorded_key(k.ev_domain(domain))],
                [glob, _recorded_key(k.ev_global())],
            ]
            calls = [(keys, args) for keys in sets]
            later = hi is None or hi > _EXACT
            earlier = lo <= -_EXACT
            if later:
                calls += [(keys, ["+inf", _EXACT, cutoff, _ALL]) for keys in sets]
            if earlier:
                calls += [(keys, [-_EXACT, "-inf", cutoff, _ALL]) for keys in sets]
            with translate("window"):
                # Flat [member, score, ...] replies, each slot's range read in its script.
                own_rows, glob_rows, *far = await self._eval(self._window, calls)
                inexact = [
                    await self._inexact(domain, far[i], far[i + 1], since, until)
                    for i in range(0, len(far), 2)
                ]
                newer = inexact[0] if later else []
                older = inexact[-1] if earlier else []
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
                for _, i, h in merged[: max(limit - len(newer), 0)]:
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
            rows = [*newer, *rows, *older][:limit]
            matched = len(newer) + len(merged) + len(older)
            return EventWindow(events=tuple(rows), limited=matched > limit)

    async def _inexact(
        self,
        domain: str,
        own_rows: Sequence[bytes],
        glob_rows: Sequence[bytes],
        since: datetime,
        until: datetime | None,
    ) -> list[Event]:
        """The live events of a band whose scores are inexact (beyond
        +-`_EXACT` µs), read whole: filtered and ordered by their own times."""
        refs: list[_RawRef] = [(domain, i) for i in own_rows[0::2]]
        for member in glob_rows[0::2]:
            id_raw, _, dom_hex = member.rpartition(b"\x00")
            refs.append((bytes.fromhex(dom_hex.decode()).decode("utf-8"), id_raw))
        rows = [
            e
            for (d, _), e in zip(refs, await self._payloads(refs), strict=True)
            if e is not None
            and (e.is_global or d == domain)
            and since <= e.occurred_at
            and (until is None or e.occurred_at < until)
        ]
        rows.sort(key=lambda e: (e.occurred_at, e.id, e.domain.encode().hex()), reverse=True)
        return rows

    async def _payloads(self, refs: Sequence[_Ref | _RawRef]) -> list[Event | None]:
        """Fetch payloads with one HMGET per domain, in one round trip."""
        return [None if raw is None else decode_event(raw) for raw in await self._raw(refs)]

    async def _raw(self, refs: Sequence[_Ref | _RawRef]) -> list[bytes | None]:
        """The stored payloads, as stored, with one HMGET per domain, in one round trip."""
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
        out: list[bytes | None] = [None] * len(refs)
        for positions, raws in zip(by_domain.values(), await pipe.execute(), strict=True):
            for p, raw in zip(positions, raws, strict=True):
                out[p] = raw
        return out

    async def _remove(self, events: Sequence[Event]) -> int:
        """Delete events and every reference to them; the number of payloads deleted."""
        if not events:
            return 0
        pipe = self._r.pipeline(transaction=False)
        deletes: list[int] = []  # positions of the HDEL replies
        for e in events:
            deletes.append(len(pipe))
            pipe.hdel(self._keys.ev_payloads(e.domain), e.id)
            self._unlink(pipe, e)
        results = await pipe.execute()
        return sum(int(results[pos]) for pos in deletes)

    def _unlink(self, pipe: Any, e: Event, *, users: bool = True) -> None:
        """Queue the removal of the references to `e` (its payload aside); the
        user index entries too unless `users` is False."""
        k = self._keys
        member = _gmember(e.domain, e.id)
        if e.is_global:
            for key, _ in self._global_refs(e):
                pipe.zrem(key, member)
        else:
            pipe.zrem(k.ev_domain(e.domain), e.id)
            pipe.zrem(_recorded_key(k.ev_domain(e.domain)), e.id)
            for ent in e.entities:
                pipe.zrem(k.ev_domain_entity(e.domain, ent.type, ent.id), e.id)
        if users and e.user_id is not None:
            pipe.srem(k.ev_domain_user(e.domain, e.user_id), e.id)
            pipe.srem(k.ev_user(e.user_id), member)

    async def erase_user(self, user_id: str) -> int:
        async with self._life.op():
            require_id(user_id, "user_id")
            k = self._keys
            with translate("erase_user"):
                known: Any = await self._r.smembers(k.ev_domains())
                domains = [d.decode("utf-8") for d in known]
                calls: list[tuple[list[str], list[Any]]] = [
                    (
                        [
                            k.ev_payloads(d),
                            k.ev_domain(d),
                            _recorded_key(k.ev_domain(d)),
                            k.ev_domain_user(d, user_id),
                        ],
                        [],
                    )
                    for d in domains
                ]
                erased = [decode_event(p) for r in await self._eval(self._erase, calls) for p in r]
                if erased:
                    pipe = self._r.pipeline(transaction=False)
                    for e in erased:
                        # The script emptied the user's sets: a same-id append since
                        # then has its own entry, which must stay.
                        self._unlink(pipe, e, users=False)
                    await pipe.execute()
                # Earlier releases' user set: only the members read are removed.
                legacy = k.ev_user(user_id)
                members: Any = await self._r.smembers(legacy)
                count = len(erased)
                if members:
                    found = await self._payloads([_parse_gmember(m) for m in members])
                    count += await self._remove(
                        [e for e in found if e is not None and e.user_id == user_id]
                    )
                    await self._r.srem(legacy, *members)
            return count

    async def user_events(self, user_id: str) -> list[Event]:
        async with self._life.op():
            require_id(user_id, "user_id")
            k = self._keys
            with translate("user_events"):
                known: Any = await self._r.smembers(k.ev_domains())
                domains = [d.decode("utf-8") for d in known]
                pipe = self._r.pipeline(transaction=False)
                for d in domains:
                    pipe.smembers(k.ev_domain_user(d, user_id))
                pipe.smembers(k.ev_user(user_id))
                *per_domain, legacy = await pipe.execute()
                refs: set[_RawRef] = {
                    (d, i) for d, ids in zip(domains, per_domain, strict=True) for i in ids
                }
                for m in legacy:
                    d, i = _parse_gmember(m)
                    refs.add((d, i.encode("utf-8", "surrogatepass")))
                found = await self._payloads(sorted(refs))
            rows = [e for e in found if e is not None and e.user_id == user_id]
            rows.sort(key=lambda e: (e.occurred_at, e.domain, e.id), reverse=True)
            return rows

    async def domains(self) -> list[str]:
        async with self._life.op():
            with translate("domains"):
                known: Any = await self._r.smembers(self._keys.ev_domains())
                names = [d.decode("utf-8") for d in known]
                # The set of known domains is never pruned (a prune racing an
                # append could drop a domain that has events, hiding them from
                # user_events and erase_user): a domain is listed while it still
                # holds a payload (its hash, which Redis removes once empty).
                pipe = self._r.pipeline(transaction=False)
                for d in names:
                    pipe.exists(self._keys.ev_payloads(d))
                held = await pipe.execute() if names else []
            return sorted(d for d, n in zip(names, held, strict=True) if int(n))

    async def purge_expired(self) -> int:
        async with self._life.op():
            cutoff = f"({to_micros(self._cutoff())}"
            k = self._keys
            with translate("purge_expired"):
                known: Any = await self._r.smembers(k.ev_domains())
                domains = [d.decode("utf-8") for d in known]
                sets = [k.ev_domain(d) for d in domains] + [k.ev_global()]
                results = await self._eval(
                    self._expired, [([key, _recorded_key(key)], [cutoff]) for key in sets]
                )
                # (domain, id) -> the score it was judged by: (b"r", recorded) or (b"t", time)
                judged: dict[_Ref, tuple[bytes, float]] = {}
                for d, rows in zip([*domains, None], results, strict=True):
                    for member, kind, score in zip(rows[0::3], rows[1::3], rows[2::3], strict=True):
                        ref = (
                            _parse_gmember(member)
                            if d is None
                            else (d, member.decode("utf-8", "surrogatepass"))
                        )
                        judged.setdefault(ref, (kind, float(score)))
                refs = list(judged)
                read: list[tuple[_Ref, bytes | None, Event | None]] = []
                for ref, raw in zip(refs, await self._raw(refs), strict=True):
                    e = None if raw is None else decode_event(raw)
                    # only the events judged: a payload stored under the same id
                    # since (after another purge or a forget freed it) is not one
                    if e is None or _is_judged(e, judged[ref]):
                        read.append((ref, raw, e))
                return await self._purge_read(read)

    async def _purge_read(self, read: Sequence[tuple[_Ref, bytes | None, Event | None]]) -> int:
        """Delete the expired events read (reference, payload as stored and decoded;
        None for a stale reference) and their references; the number of payloads
        deleted.

        Each domain's payloads and same-slot references go in one script that
        deletes a payload only while it is still the one read: an event appended
        under the same id in between (after another purge or a forget) is kept
        whole. The global references (other slots) are removed after; an event
        re-appended under a global member meanwhile gets them back from its own
        payload, read after the removal."""
        k = self._keys
        # per domain, batches of at most _PURGE_BATCH events: one script call each
        calls: dict[tuple[str, int], tuple[list[str], list[Any], list[tuple[_Ref, Event | None]]]]
        calls = {}
        counts: dict[str, int] = {}
        for ref, raw, e in read:
            d, i = ref
            n = counts[d] = counts.get(d, 0) + 1
            keys, args, order = calls.setdefault(
                (d, (n - 1) // _PURGE_BATCH),
                ([k.ev_payloads(d), k.ev_domain(d), _recorded_key(k.ev_domain(d))], [], []),
            )
            user, idx = 0, []
            if e is not None:
                if e.user_id is not None:
                    keys.append(k.ev_domain_user(d, e.user_id))
                    user = len(keys)
                if not e.is_global:
                    for ent in e.entities:
                        keys.append(k.ev_domain_entity(d, ent.type, ent.id))
                        idx.append(len(keys))
            glob = "1" if e is not None and e.is_global else "0"
            args += [i, raw if raw is not None else b"", glob, user, len(idx), *idx]
            order.append((ref, e))
        if not calls:
            return 0
        replies = await self._eval(self._purge, [(keys, args) for keys, args, _ in calls.values()])
        deleted = 0
        unlinked: list[_Ref] = []  # global members removed: re-checked below
        pipe = self._r.pipeline(transaction=False)
        for (_, _, order), reply in zip(calls.values(), replies, strict=True):
            for ((d, i), e), gone in zip(order, reply, strict=True):
                if not int(gone):
                    continue
                member = _gmember(d, i)
                if e is None:
                    # a stale reference: whichever set named it
                    pipe.zrem(k.ev_global(), member)
                    pipe.zrem(_recorded_key(k.ev_global()), member)
                    unlinked.append((d, i))
                    continue
                deleted += 1
                if e.is_global:
                    for key, _ in self._global_refs(e):
                        pipe.zrem(key, member)
                    unlinked.append((d, i))
                if e.user_id is not None:
                    pipe.srem(k.ev_user(e.user_id), member)  # earlier releases' user set
        if len(pipe):
            await pipe.execute()
        if unlinked:
            await self._relink(unlinked)
        return deleted

    async def _relink(self, refs: Sequence[_Ref]) -> None:
        """Give the global events stored now under `refs` (appended after the
        purge read the old ones) the global references the purge just removed.

        A forget (or purge) deleting such an event between the read and the
        writes has already removed its references, and these would bring them
        back for an event that is gone: the payloads are read again after the
        writes, and a reference no event stored now warrants is taken out again
        (one deleted later still removes its own)."""
        zadds = self._warranted(await self._payloads(refs))
        if not zadds:
            return
        pipe = self._r.pipeline(transaction=False)
        for key, mapping in zadds:
            pipe.zadd(key, mapping, nx=True)
        await pipe.execute()
        now = {
            (key, m)
            for key, mapping in self._warranted(await self._payloads(refs))
            for m in mapping
        }
        stale = [(key, m) for key, mapping in zadds for m in mapping if (key, m) not in now]
        if stale:
            pipe = self._r.pipeline(transaction=False)
            for key, member in stale:
                pipe.zrem(key, member)
            await pipe.execute()

    def _warranted(self, events: Sequence[Event | None]) -> list[tuple[str, dict[bytes, int]]]:
        """The global references the global events among `events` have."""
        return [
            ref for e in events if e is not None and e.is_global for ref in self._global_refs(e)
        ]

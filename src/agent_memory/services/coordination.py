"""Activity signals and advisory investigation claims, on the `LeaseStore` port.

Both are leases in the domain's scope:
- a signal `signal:["<agent>","<request>"]` says "this request is running" and
  carries a JSON payload (agent, request, what it is doing, status, start time);
  the request renews it, with its latest status, every TTL/3;
- a claim `claim:["<type>","<id>"]` says "this request investigates that entity";
  it is advisory: a second request is told who holds it, and goes on. Claims
  are not renewed: they expire at their TTL unless renewal is asked for.
Keys embed JSON-encoded parts, so no agent, request or entity id can forge or
collide with another key, and a prefix scan finds exactly one kind. A key (or
owner) whose JSON would pass the 512-byte bound of lease keys holds its SHA-256
instead (`claim:#<hex>`): long ids are coordinated too; a claim's payload names
its entity.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from attrs import frozen

from agent_memory.domain.bounded_names import fit_or_digest
from agent_memory.domain.records import Entity, Lease
from agent_memory.ports.storage import LeaseStore

__all__ = [
    "CLAIM_PREFIX",
    "SIGNAL_PREFIX",
    "ClaimResult",
    "Coordinator",
    "SignalInfo",
    "claim_key",
    "signal_key",
]

SIGNAL_PREFIX = "signal:"
CLAIM_PREFIX = "claim:"
#: Tries to claim an entity whose holder keeps letting go between our acquire
#: and our read of the holder (each round: the claim was held, then free).
_CLAIM_ATTEMPTS = 3


def _bounded(prefix: str, parts: Sequence[str]) -> str:
    """`prefix` + the JSON of `parts`, or, when that is over MAX_ID_BYTES (the
    bound of a lease key or owner; every part may be that long itself),
    `prefix` + "#" + its SHA-256: JSON starts with "[", so the two never collide."""
    text = json.dumps(list(parts), ensure_ascii=False)
    return fit_or_digest(prefix + text, prefix + "#", text)


def signal_key(agent: str, request_id: str) -> str:
    return _bounded(SIGNAL_PREFIX, [agent, request_id])


def claim_key(entity: Entity) -> str:
    return _bounded(CLAIM_PREFIX, [entity.type, entity.id])


def request_owner(agent: str, request_id: str) -> str:
    """The lease owner string of one request (unique per agent + request)."""
    return _bounded("", [agent, request_id])


@frozen
class SignalInfo:
    """An active request as others see it."""

    agent: str
    request_id: str
    doing: str
    status: str
    started_at: datetime | None
    entities: tuple[Entity, ...] = ()


@frozen
class ClaimResult:
    """Outcome of claiming one entity: ours, or who else holds it."""

    entity: Entity
    acquired: bool
    holder_agent: str | None = None
    holder_request_id: str | None = None
    since: datetime | None = None


def _decode(payload: bytes) -> dict[str, Any]:
    try:
        data = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _time(raw: object) -> datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        return None


def _signal_info(lease: Lease) -> SignalInfo | None:
    data = _decode(lease.payload)
    agent, request_id = data.get("agent"), data.get("request_id")
    if not isinstance(agent, str) or not isinstance(request_id, str):
        return None
    entities = []
    for item in data.get("entities") or []:
        if isinstance(item, list) and len(item) == 2:
            try:
                entities.append(Entity(type=item[0], id=item[1]))
            except ValueError:
                continue
    return SignalInfo(
        agent=agent,
        request_id=request_id,
        doing=str(data.get("doing", "")),
        status=str(data.get("status", "active")),
        started_at=_time(data.get("started_at")),
        entities=tuple(entities),
    )


class Coordinator:
    """Announce, renew and withdraw a request's signal and claims in one domain."""

    def __init__(
        self,
        leases: LeaseStore,
        domain: str,
        ttl: timedelta,
        *,
        claim_ttl: timedelta | None = None,
    ) -> None:
        self._leases = leases
        self._domain = domain
        self._ttl = ttl
        self._claim_ttl = ttl if claim_ttl is None else claim_ttl

    def _signal_payload(
        self,
        agent: str,
        request_id: str,
        doing: str,
        status: str,
        started_at: datetime,
        entities: Sequence[Entity],
    ) -> bytes:
        return json.dumps(
            {
                "agent": agent,
                "request_id": request_id,
                "doing": doing,
                "status": status,
                "started_at": started_at.isoformat(),
                "entities": [[e.type, e.id] for e in entities],
            },
            ensure_ascii=False,
        ).encode("utf-8")

    async def announce(
        self,
        agent: str,
        request_id: str,
        *,
        doing: str,
        started_at: datetime,
        entities: Sequence[Entity] = (),
        status: str = "active",
    ) -> Lease | None:
        payload = self._signal_payload(agent, request_id, doing, status, started_at, entities)
        return await self._leases.acquire(
            self._domain,
            signal_key(agent, request_id),
            request_owner(agent, request_id),
            self._ttl,
            payload,
        )

    async def claim(
        self, agent: str, request_id: str, entity: Entity, started_at: datetime
    ) -> ClaimResult:
        """Claim `entity` for the request, or say who holds it. A holder that lets
        go between the acquire and the read of the holder leaves the claim free:
        it is acquired again (a few times), so the result never says "held"
        with no holder when nobody holds it (unless that keeps happening)."""
        payload = json.dumps(
            {
                "agent": agent,
                "request_id": request_id,
                "since": started_at.isoformat(),
                "entity": [entity.type, entity.id],  # a hashed key does not say
            },
            ensure_ascii=False,
        ).encode("utf-8")
        key = claim_key(entity)
        owner = request_owner(agent, request_id)
        holder = None
        for _ in range(_CLAIM_ATTEMPTS):
            lease = await self._leases.acquire(self._domain, key, owner, self._claim_ttl, payload)
            if lease is not None:
                return ClaimResult(entity=entity, acquired=True)
            # Held when we tried; gone by now (released or expired in between):
            # the claim is free, so try again rather than report no holder.
            holder = await self._leases.get(self._domain, key)
            if holder is not None:
                break
        data = _decode(holder.payload) if holder is not None else {}
        return ClaimResult(
            entity=entity,
            acquired=False,
            holder_agent=data.get("agent") if isinstance(data.get("agent"), str) else None,
            holder_request_id=(
                data.get("request_id") if isinstance(data.get("request_id"), str) else None
            ),
            since=_time(data.get("since")),
        )

    async def renew_signal(
        self,
        agent: str,
        request_id: str,
        *,
        doing: str,
        started_at: datetime,
        entities: Sequence[Entity] = (),
        status: str = "active",
    ) -> Lease:
        """Extend the request's signal, carrying its latest status (`LeaseNotHeld`
        when it expired or was taken over)."""
        payload = self._signal_payload(agent, request_id, doing, status, started_at, entities)
        return await self._leases.renew(
            self._domain,
            signal_key(agent, request_id),
            request_owner(agent, request_id),
            self._ttl,
            payload,
        )

    async def renew(self, agent: str, request_id: str, keys: Sequence[str]) -> None:
        """Extend claims (only when renewal of claims was asked for: they are
        advisory and expire at their TTL by default)."""
        owner = request_owner(agent, request_id)
        for key in keys:
            await self._leases.renew(self._domain, key, owner, self._claim_ttl)

    async def release(self, agent: str, request_id: str, keys: Sequence[str]) -> int:
        owner = request_owner(agent, request_id)
        released = 0
        for key in keys:
            if await self._leases.release(self._domain, key, owner):
                released += 1
        return released

    async def active_signals(self) -> list[SignalInfo]:
        leases = await self._leases.scan(self._domain, SIGNAL_PREFIX)
        return [info for info in map(_signal_info, leases) if info is not None]

    async def active_claims(self) -> list[tuple[Entity, str, str, datetime | None]]:
        """(entity, holder agent, holder request, since) for every live claim."""
        out = []
        for lease in await self._leases.scan(self._domain, CLAIM_PREFIX):
            data = _decode(lease.payload)
            named = lease.key[len(CLAIM_PREFIX) :]
            try:
                # the key names the entity, unless it is hashed (a long one)
                parts: Any = data.get("entity") if named.startswith("#") else json.loads(named)
                etype, eid = parts
                entity = Entity(type=etype, id=eid)
                if named.startswith("#") and claim_key(entity) != lease.key:
                    continue  # a payload naming another entity than the key's
            except (ValueError, TypeError):
                continue
            agent, request_id = data.get("agent"), data.get("request_id")
            if isinstance(agent, str) and isinstance(request_id, str):
                out.append((entity, agent, request_id, _time(data.get("since"))))
        return out

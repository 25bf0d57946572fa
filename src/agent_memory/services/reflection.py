"""The reflection job: every interval (default 24 h), distil aged events into
knowledge fragments that outlive the event log.

A pass looks, per domain, at the events that crossed the age threshold
(default 7 days) since the last completed pass: those with an event time in
`[watermark, now - age_threshold)`. It pages back through that slice by event
time (`EventLog.window(..., until=...)`), so however many newer events a busy
domain holds, the aged ones are reached. Each entity found there is distilled
from its eligible events (at most `max_events_per_entity`, newest first) when it
has at least `min_events` of them (default 5): the model proposes 1-3 fragments,
which are embedded and stored under content-addressed ids, so repeating a pass
over the same data refreshes fragments instead of copying them. Without a model
a deterministic summary per entity is stored. Events are never deleted.

Fragments record the span of event times they were distilled from
(`first_event_at`, `last_event_at`). When an entity is distilled again (it
gained newly aged events), the new fragments replace the entity's earlier ones
whose events they cover, i.e. whose `first_event_at` is not older than the new
one's; a fragment from before these attributes is replaced when the new
distillation read at least as many events. An earlier fragment that covers
events the new window no longer reaches (they left the event log, or fell
beyond `max_events_per_entity`) is kept: it is the only record of them.

The watermark (the cutoff of the domain's last completed pass) is a long-lived
lease in the deployment's scope; it advances only when the domain's pass had no
failure. A deployment-scoped lock lease makes sure one replica runs a pass; the
others log that the lock is held and skip. Everything is fail-open: a pass
reports what failed and returns, and `run_forever` keeps going with backoff.
An event recorded after a pass with an event time older than that pass's
cutoff is not picked up later (the slice is by event time, not arrival).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from attrs import define, field

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import Entity, Event, EventWindow, MemoryRecord
from agent_memory.domain.time import MICROSECOND
from agent_memory.domain.views import estimate_tokens
from agent_memory.ports.models import Clock, LanguageModel
from agent_memory.ports.storage import EventLog, LeaseStore
from agent_memory.services.event_scopes import scoped_events
from agent_memory.services.knowledge import (
    KNOWLEDGE_NAMESPACE,
    KnowledgeService,
    fragment_id,
    parse_fragments,
)
from agent_memory.services.observability import Observability
from agent_memory.services.reports import StageReport

__all__ = [
    "REFLECTION_LOCK",
    "WATERMARK_PREFIX",
    "ReflectionJob",
    "ReflectionOptions",
    "ReflectionReport",
]

_log = logging.getLogger(__name__)
REFLECTION_LOCK = "job:reflection"
WATERMARK_PREFIX = "job:reflection:watermark:"
_WATERMARK_OWNER = "agent-memory-reflection"
DISTIL_SYSTEM_PROMPT = (
    "These are past events about one entity. Distil 1 to 3 reusable lessons another "
    "agent should know when it meets this entity again. Answer with ONLY a JSON array: "
    '[{"content": "<one self-contained sentence>", "importance": 0.0-1.0}].'
)


def _positive(_instance: object, attribute: object, value: object) -> None:
    name = getattr(attribute, "name", "option")
    if isinstance(value, timedelta):
        if value <= timedelta(0):
            raise InvalidInput(name, "must be positive")
    elif not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
        raise InvalidInput(name, "must be positive")


@define
class ReflectionOptions:
    """Numbers of the reflection job (defaults from the design; env via Settings)."""

    interval: timedelta = field(default=timedelta(hours=24), validator=_positive)
    age_threshold: timedelta = field(default=timedelta(days=7), validator=_positive)
    min_events: int = field(default=5, validator=_positive)
    max_events_per_entity: int = field(default=50, validator=_positive)
    max_fragments_per_entity: int = field(default=3, validator=_positive)
    """Most fragments kept from one entity's distillation (the model is asked for 1-3)."""
    page_size: int = field(default=1000, validator=_positive)
    lock_ttl: timedelta = field(default=timedelta(minutes=30), validator=_positive)
    deployment: str = "default"
    model_timeout: float = field(default=120.0, validator=_positive)
    retry_backoff: timedelta = field(default=timedelta(minutes=1), validator=_positive)
    """First delay after a pass that reported failures; doubles up to `interval`."""
    legacy_scan_limit: int = field(default=10_000, validator=_positive)
    """Events read per domain from an event log whose `window` has no `until`."""


@define
class ReflectionReport:
    ran: bool = False
    lock_held_by: str | None = None
    entities_discovered: int = 0
    entities_processed: int = 0
    fragments_stored: int = 0
    embedding_tokens: int = 0
    report: StageReport = field(factory=lambda: StageReport("reflection"))


def _fallback_fragment(entity: Entity, events: Sequence[Event]) -> tuple[str, float]:
    outcomes: dict[str, int] = defaultdict(int)
    for e in events:
        outcomes[e.outcome] += 1
    summary = ", ".join(f"{k} x{v}" for k, v in sorted(outcomes.items(), key=lambda kv: -kv[1]))
    latest = max(events, key=lambda e: (e.occurred_at, e.id))
    return (
        f"{entity.type} {entity.id}: {len(events)} past events ({summary}); "
        f"latest: {latest.summary}",
        0.5,
    )


_KIND = "reflection"
_LIST_PAGE = 500


def _attributes(entity: Entity, events: Sequence[Event]) -> dict[str, object]:
    """What a reflected fragment was derived from: the entity, how many events and
    the span of their event times (superseding compares it), their users (so
    forgetting a user finds it)."""
    out: dict[str, object] = {
        "entity": [entity.type, entity.id],
        "events": len(events),
        "first_event_at": min(e.occurred_at for e in events).isoformat(),
        "last_event_at": max(e.occurred_at for e in events).isoformat(),
    }
    users = sorted({e.user_id for e in events if e.user_id is not None})
    if users:
        out["users"] = users
    return out


def _entity_key(entity: Entity) -> str:
    return json.dumps([entity.type, entity.id], ensure_ascii=False)


def _superseded(old: MemoryRecord, new: dict[str, object]) -> bool:
    """Whether fragment `old` of an entity is covered by a new distillation with
    attributes `new` (see module doc)."""
    first = old.attributes.get("first_event_at")
    if isinstance(first, str):
        try:
            return datetime.fromisoformat(str(new["first_event_at"])) <= datetime.fromisoformat(
                first
            )
        except ValueError:
            return False
    events = old.attributes.get("events")
    new_events = new["events"]
    return isinstance(events, int) and isinstance(new_events, int) and new_events >= events


def watermark_key(domain: str) -> str:
    return WATERMARK_PREFIX + json.dumps(domain, ensure_ascii=False)


class ReflectionJob:
    """One replica's reflection job; `run_once` is one pass."""

    def __init__(
        self,
        *,
        events: EventLog,
        leases: LeaseStore,
        knowledge: KnowledgeService,
        clock: Clock,
        llm: LanguageModel | None = None,
        options: ReflectionOptions | None = None,
        replica: str | None = None,
        observability: Observability | None = None,
    ) -> None:
        self.observability = observability or Observability()
        # windows show the global events of the domain's family only
        self.events = scoped_events(events)
        self.leases = leases
        self.knowledge = knowledge
        self.clock = clock
        self.llm = llm
        self.options = options or ReflectionOptions()
        self.replica = replica or f"replica-{uuid.uuid4().hex[:8]}"
        self._scope = f"deployment:{self.options.deployment}"

    # -- one pass --------------------------------------------------------------
    async def run_once(
        self,
        domains: Sequence[str],
        *,
        progress: Callable[[int, int, str], None] | None = None,
    ) -> ReflectionReport:
        """One pass over `domains`, if this replica gets the lock. Never raises
        (except cancellation): what failed is in the report."""
        out = ReflectionReport()
        _log.info("reflection pass starting: replica=%s domains=%d", self.replica, len(domains))
        with self.observability.span(
            "reflection.pass", replica=self.replica, domains=len(domains)
        ) as span:
            try:
                await self._locked_pass(domains, out, progress)
            except Exception as exc:  # a bug or an unexpected port error: still fail open
                out.report.fail("pass", exc)
            outcome = (
                "skipped"
                if not out.ran and out.report.ok
                else ("completed" if out.report.ok else "failed")
            )
            span.set(
                outcome=outcome,
                lock_held=out.lock_held_by is not None,
                entities_discovered=out.entities_discovered,
                entities_processed=out.entities_processed,
                fragments_stored=out.fragments_stored,
                embedding_tokens=out.embedding_tokens,
                failures=len(out.report.failures),
            )
            self.observability.reflection_pass(outcome, out.fragments_stored)
        if out.ran or not out.report.ok:
            _log.info(
                "reflection pass completed: ran=%s entities_discovered=%d entities_processed=%d "
                "fragments_stored=%d embedding_tokens=%d failures=%d",
                out.ran,
                out.entities_discovered,
                out.entities_processed,
                out.fragments_stored,
                out.embedding_tokens,
                len(out.report.failures),
            )
        return out

    async def _locked_pass(
        self,
        domains: Sequence[str],
        out: ReflectionReport,
        progress: Callable[[int, int, str], None] | None,
    ) -> None:
        try:
            lease = await self.leases.acquire(
                self._scope, REFLECTION_LOCK, self.replica, self.options.lock_ttl
            )
        except Exception as exc:
            out.report.fail("acquire-lock", exc)
            return
        if lease is None:
            try:
                holder = await self.leases.get(self._scope, REFLECTION_LOCK)
            except Exception as exc:
                out.report.fail("lock-holder", exc)
                holder = None
            out.lock_held_by = holder.owner if holder is not None else "unknown"
            _log.info("reflection lock held by %s; skipping this pass", out.lock_held_by)
            return
        out.ran = True
        try:
            work: list[tuple[str, Entity, list[Event]]] = []
            cutoffs: dict[str, datetime] = {}
            failed_domains: set[str] = set()
            earlier: dict[str, dict[str, list[MemoryRecord]]] = {}
            for domain in domains:
                before = len(out.report.failures)
                found, cutoff = await self._domain_work(domain, out)
                work.extend((domain, entity, evs) for entity, evs in found)
                if cutoff is not None:
                    cutoffs[domain] = cutoff
                if len(out.report.failures) > before:
                    failed_domains.add(domain)
            for n, (domain, entity, events) in enumerate(work, start=1):
                if progress is not None:
                    progress(n, len(work), f"{domain}: {entity.type}/{entity.id}")
                try:
                    fragments = await self._distil(entity, events, out.report)
                    out.embedding_tokens += sum(estimate_tokens(c) for c, _ in fragments)
                    attributes = _attributes(entity, events)
                    key = _entity_key(entity)
                    out.fragments_stored += await self.knowledge.store_fragments(
                        domain, fragments, kind=_KIND, attributes=attributes, key=key
                    )
                    out.entities_processed += 1
                except Exception as exc:
                    out.report.fail(f"distil {entity.type}/{entity.id}", exc)
                    failed_domains.add(domain)
                    continue
                kept = {fragment_id(domain, _KIND, c, key) for c, _ in fragments}
                if await self._withdraw_if_gone(domain, entity, events, kept, out.report):
                    failed_domains.add(domain)  # the next pass distils it again
                    continue
                try:
                    if domain not in earlier:
                        earlier[domain] = await self._reflections(domain)
                    superseded = await self._supersede(
                        domain, earlier[domain].pop(key, []), kept, attributes
                    )
                except Exception as exc:
                    out.report.fail(f"supersede {entity.type}/{entity.id}", exc)
                    failed_domains.add(domain)
                    continue
                if superseded:
                    details = out.report.details
                    details["fragments_superseded"] = (
                        int(details.get("fragments_superseded", 0)) + superseded
                    )
            advanced = {}
            for domain, cutoff in cutoffs.items():
                if domain in failed_domains:
                    continue
                try:
                    await self.leases.acquire(
                        self._scope,
                        watermark_key(domain),
                        _WATERMARK_OWNER,
                        self.events.retention,
                        cutoff.isoformat().encode("utf-8"),
                    )
                    advanced[domain] = cutoff.isoformat()
                except Exception as exc:
                    out.report.fail(f"save-watermark {domain}", exc)
            out.report.details["watermarks"] = advanced
        finally:
            try:
                await self.leases.release(self._scope, REFLECTION_LOCK, self.replica)
            except Exception as exc:
                out.report.fail("release-lock", exc)

    async def _withdraw_if_gone(
        self,
        domain: str,
        entity: Entity,
        events: Sequence[Event],
        stored: set[str],
        report: StageReport,
    ) -> bool:
        """Delete the fragments just stored from `events` when one of them is gone.

        A forget erases the user's events, then deletes the fragments derived
        from them; one that ran while this entity was being distilled (after its
        events were read, before its fragments were stored) left fragments
        quoting erased events behind. So, after the store, the events are read
        again: either the forget's erase came before this read (an event is
        missing: the fragments are withdrawn here, and the domain's watermark
        stays, so the next pass distils the entity from the events left) or
        after it, and then the forget's fragment deletion comes after the store
        too. Events that cannot be read back withdraw the fragments. True when
        withdrawn (or meant to be)."""
        first = min(e.occurred_at for e in events)
        last = max(e.occurred_at for e in events)
        try:
            again = await self._window(
                domain,
                since=first,
                until=last + MICROSECOND,
                limit=max(self.options.max_events_per_entity, len(events)),
                entity=entity,
                report=report,
            )
            present = {(e.domain, e.id) for e in again.events}  # events' identity
            gone = [e.id for e in events if (e.domain, e.id) not in present]
            if not gone:
                return False
            reason = f"{len(gone)} event(s) gone meanwhile, e.g. {gone[0]!r}"
        except Exception as exc:
            report.fail(f"verify {entity.type}/{entity.id}", exc)
            reason = "could not re-read its events"
        withdrawn = 0
        for record_id in sorted(stored):
            try:
                withdrawn += await self.knowledge.store.delete(domain, record_id)
            except Exception as exc:
                report.fail(f"withdraw {entity.type}/{entity.id}", exc)
        details = report.details.setdefault("fragments_withdrawn", {})
        details[f"{domain}: {entity.type}/{entity.id}"] = f"{withdrawn} withdrawn: {reason}"
        return True

    # -- superseding earlier fragments -------------------------------------------
    async def _reflections(self, domain: str) -> dict[str, list[MemoryRecord]]:
        """The domain's stored reflection fragments by entity key (listed once per
        domain and pass; fragments this pass stored are spared by their ids)."""
        out: dict[str, list[MemoryRecord]] = defaultdict(list)
        cursor: str | None = None
        while True:
            page = await self.knowledge.store.list(
                domain,
                namespace=KNOWLEDGE_NAMESPACE,
                kinds=[_KIND],
                limit=_LIST_PAGE,
                cursor=cursor,
            )
            for record in page.records:
                entity = record.attributes.get("entity")
                if isinstance(entity, list) and len(entity) == 2:
                    out[json.dumps(entity, ensure_ascii=False)].append(record)
            cursor = page.next_cursor
            if cursor is None:
                return out

    async def _supersede(
        self,
        domain: str,
        records: Sequence[MemoryRecord],
        kept: set[str],
        attributes: dict[str, object],
    ) -> int:
        """Delete the entity's earlier fragments the new ones cover; the count."""
        removed = 0
        for record in records:
            if record.id not in kept and _superseded(record, attributes):
                removed += await self.knowledge.store.delete(domain, record.id)
        return removed

    # -- what a domain's pass covers ------------------------------------------
    async def _watermark(self, domain: str) -> datetime | None:
        lease = await self.leases.get(self._scope, watermark_key(domain))
        if lease is None:
            return None
        try:
            return datetime.fromisoformat(lease.payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None

    async def _window(
        self,
        domain: str,
        *,
        since: datetime,
        until: datetime,
        limit: int,
        entity: Entity | None = None,
        report: StageReport,
    ) -> EventWindow:
        """`window` bounded above by `until` (every shipped event log has it,
        contract EL-UNTIL); a third-party log whose `window` lacks it (a
        TypeError naming `until`) is read newest first up to
        `legacy_scan_limit` events and filtered."""
        try:
            return await self.events.window(
                domain, since=since, limit=limit, entity=entity, until=until
            )
        except TypeError as exc:
            if "until" not in str(exc):
                raise
        report.details["until_unsupported"] = True
        scan = await self.events.window(
            domain, since=since, limit=self.options.legacy_scan_limit, entity=entity
        )
        kept = tuple(e for e in scan.events if e.occurred_at < until)
        return EventWindow(events=kept[:limit], limited=len(kept) > limit)

    async def _aged_entities(
        self, domain: str, since: datetime, until: datetime, report: StageReport
    ) -> set[Entity]:
        """Entities of the domain's events with since <= event time < until,
        paging back in event time (a page's oldest instant is read whole)."""
        found: set[Entity] = set()
        page_size = self.options.page_size

        def take(events: Sequence[Event]) -> None:
            for event in events:
                if event.domain == domain:
                    found.update(event.entities)

        while since < until:
            page = await self._window(
                domain, since=since, until=until, limit=page_size, report=report
            )
            take(page.events)
            if not page.limited or not page.events:
                break
            oldest = page.events[-1].occurred_at
            limit = page_size
            while True:  # every event at exactly `oldest`, whatever the page cut
                tie = await self._window(
                    domain,
                    since=oldest,
                    until=min(oldest + MICROSECOND, until),
                    limit=limit,
                    report=report,
                )
                if not tie.limited or report.details.get("until_unsupported"):
                    take(tie.events)
                    break
                limit *= 2
            until = oldest
        return found

    async def _domain_work(
        self, domain: str, out: ReflectionReport
    ) -> tuple[list[tuple[Entity, list[Event]]], datetime | None]:
        """(entities to distil with their eligible events, the cutoff to save)."""
        now = self.clock.now()
        cutoff = now - self.options.age_threshold
        floor = now - self.events.retention
        try:
            watermark = await self._watermark(domain)
        except Exception as exc:
            out.report.fail(f"watermark {domain}", exc)
            return [], None
        since = floor if watermark is None else max(watermark, floor)
        try:
            entities = await self._aged_entities(domain, since, cutoff, out.report)
        except Exception as exc:
            out.report.fail(f"window {domain}", exc)
            return [], None
        out.entities_discovered += len(entities)
        work: list[tuple[Entity, list[Event]]] = []
        for entity in sorted(entities, key=lambda e: (e.type, e.id)):
            try:
                history = await self._window(
                    domain,
                    since=floor,
                    until=cutoff,
                    limit=self.options.max_events_per_entity,
                    entity=entity,
                    report=out.report,
                )
            except Exception as exc:
                out.report.fail(f"history {entity.type}/{entity.id}", exc)
                continue
            events = [e for e in history.events if e.domain == domain]
            if len(events) >= self.options.min_events:
                work.append((entity, events))
        return work, cutoff

    async def _distil(
        self, entity: Entity, events: Sequence[Event], report: StageReport
    ) -> list[tuple[str, float]]:
        if self.llm is None:
            return [_fallback_fragment(entity, events)]
        lines = "\n".join(
            f"{e.occurred_at.isoformat()} {e.agent} {e.action} → {e.outcome}: {e.summary}"
            for e in events
        )
        answer = await self.llm.complete(
            f"Entity {entity.type} {entity.id}:\n{lines}",
            max_tokens=1024,
            timeout=self.options.model_timeout,
            system=DISTIL_SYSTEM_PROMPT,
        )
        fragments, error = parse_fragments(answer, self.options.max_fragments_per_entity)
        if error is not None or not fragments:
            report.details.setdefault("parse_errors", 0)
            report.details["parse_errors"] += 1
            return [_fallback_fragment(entity, events)]
        return fragments

    # -- the loop ----------------------------------------------------------------
    async def run_forever(
        self,
        domains: Sequence[str],
        *,
        on_report: Callable[[ReflectionReport], None] | None = None,
    ) -> None:
        """Run a pass every interval until cancelled. A pass that reported
        failures is retried after `retry_backoff`, doubling up to `interval`;
        nothing a pass raises stops the loop."""
        failed_in_a_row = 0
        while True:
            try:
                result = await self.run_once(domains)
            except Exception as exc:  # run_once is fail-open; this is a last guard
                result = ReflectionReport()
                result.report.fail("pass", exc)
            if on_report is not None:
                try:
                    on_report(result)
                except Exception:
                    _log.exception("reflection on_report callback failed")
            interval = self.options.interval
            if result.report.ok:
                failed_in_a_row = 0
                delay = interval
            else:
                failed_in_a_row += 1
                backoff = self.options.retry_backoff * 2 ** min(failed_in_a_row - 1, 30)
                delay = min(backoff, interval)
                _log.warning(
                    "reflection pass reported %d failure(s); next attempt in %ss",
                    len(result.report.failures),
                    delay.total_seconds(),
                )
            await asyncio.sleep(delay.total_seconds())

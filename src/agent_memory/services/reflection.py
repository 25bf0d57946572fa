"""The reflection job: every interval (default 24 h), distil old events into
knowledge fragments that outlive the event log.

A pass takes each domain's events older than the age threshold (default 7
days), groups them by entity, and for entities with at least the minimum
number of events (default 5) asks the model for 1-3 fragments, which are
embedded and stored. Events are never deleted by it. A deployment-scoped lease
makes sure only one replica runs a pass; the others log that the lock is held
and skip. Without a model, a deterministic summary per entity is stored.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import timedelta

from attrs import define, field

from agent_memory.domain.records import Entity, Event
from agent_memory.domain.views import estimate_tokens
from agent_memory.ports.models import Clock, LanguageModel
from agent_memory.ports.storage import EventLog, LeaseStore
from agent_memory.services.knowledge import KnowledgeService, parse_fragments
from agent_memory.services.reports import StageReport

__all__ = ["REFLECTION_LOCK", "ReflectionJob", "ReflectionOptions", "ReflectionReport"]

_log = logging.getLogger("agent_memory.reflection")
REFLECTION_LOCK = "job:reflection"
DISTIL_SYSTEM_PROMPT = (
    "These are past events about one entity. Distil 1 to 3 reusable lessons another "
    "agent should know when it meets this entity again. Answer with ONLY a JSON array: "
    '[{"content": "<one self-contained sentence>", "importance": 0.0-1.0}].'
)


@define
class ReflectionOptions:
    interval: timedelta = timedelta(hours=24)
    age_threshold: timedelta = timedelta(days=7)
    min_events: int = 5
    max_events_per_entity: int = 50
    scan_limit: int = 10_000
    lock_ttl: timedelta = timedelta(minutes=30)
    deployment: str = "default"
    model_timeout: float = 120.0


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
    ) -> None:
        self.events = events
        self.leases = leases
        self.knowledge = knowledge
        self.clock = clock
        self.llm = llm
        self.options = options or ReflectionOptions()
        self.replica = replica or f"replica-{uuid.uuid4().hex[:8]}"

    async def run_once(
        self,
        domains: Sequence[str],
        *,
        progress: Callable[[int, int, str], None] | None = None,
    ) -> ReflectionReport:
        """One pass over `domains`, if this replica gets the lock."""
        out = ReflectionReport()
        scope = f"deployment:{self.options.deployment}"
        lease = await self.leases.acquire(
            scope, REFLECTION_LOCK, self.replica, self.options.lock_ttl
        )
        if lease is None:
            holder = await self.leases.get(scope, REFLECTION_LOCK)
            out.lock_held_by = holder.owner if holder is not None else "unknown"
            _log.info("reflection lock held by %s; skipping this pass", out.lock_held_by)
            return out
        out.ran = True
        try:
            groups: list[tuple[str, Entity, list[Event]]] = []
            for domain in domains:
                groups.extend(await self._groups(domain, out.report))
            out.entities_discovered = len(groups)
            eligible = [g for g in groups if len(g[2]) >= self.options.min_events]
            for n, (domain, entity, events) in enumerate(eligible, start=1):
                if progress is not None:
                    progress(n, len(eligible), f"{domain}: {entity.type}/{entity.id}")
                try:
                    fragments = await self._distil(entity, events, out.report)
                    out.embedding_tokens += sum(estimate_tokens(c) for c, _ in fragments)
                    out.fragments_stored += await self.knowledge.store_fragments(
                        domain,
                        fragments,
                        kind="reflection",
                        attributes={"entity": [entity.type, entity.id], "events": len(events)},
                    )
                    out.entities_processed += 1
                except Exception as exc:
                    out.report.fail(f"distil {entity.type}/{entity.id}", exc)
        finally:
            try:
                await self.leases.release(scope, REFLECTION_LOCK, self.replica)
            except Exception as exc:
                out.report.fail("release-lock", exc)
        return out

    async def _groups(
        self, domain: str, report: StageReport
    ) -> list[tuple[str, Entity, list[Event]]]:
        now = self.clock.now()
        cutoff = now - self.options.age_threshold
        try:
            window = await self.events.window(
                domain, since=now - self.events.retention, limit=self.options.scan_limit
            )
        except Exception as exc:
            report.fail(f"window {domain}", exc)
            return []
        by_entity: dict[Entity, list[Event]] = defaultdict(list)
        for event in window.events:
            if event.occurred_at < cutoff and event.domain == domain:
                for entity in event.entities:
                    by_entity[entity].append(event)
        return [
            (domain, entity, evs[: self.options.max_events_per_entity])
            for entity, evs in sorted(by_entity.items(), key=lambda kv: (kv[0].type, kv[0].id))
        ]

    async def _distil(
        self, entity: Entity, events: Sequence[Event], report: StageReport
    ) -> list[tuple[str, float]]:
        if self.llm is None:
            return [_fallback_fragment(entity, events)]
        lines = "\n".join(
            f"{e.occurred_at.isoformat()} {e.agent} {e.action} -> {e.outcome}: {e.summary}"
            for e in events
        )
        answer = await self.llm.complete(
            f"Entity {entity.type} {entity.id}:\n{lines}",
            max_tokens=1024,
            timeout=self.options.model_timeout,
            system=DISTIL_SYSTEM_PROMPT,
        )
        fragments, error = parse_fragments(answer, 3)
        if error is not None or not fragments:
            report.details.setdefault("parse_errors", 0)
            report.details["parse_errors"] += 1
            return [_fallback_fragment(entity, events)]
        return fragments

    async def run_forever(self, domains: Sequence[str]) -> None:
        """Run a pass every interval until cancelled."""
        while True:
            await self.run_once(domains)
            await asyncio.sleep(self.options.interval.total_seconds())

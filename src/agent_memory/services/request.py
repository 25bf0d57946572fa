"""The request lifecycle around one agent request, framework-agnostic.

    async with memory.request(agent="A", domain="k8s", request_id="r1",
                              entities=[Entity("pod", "web-1")]) as req:
        ctx = await req.planning_context()     # views for the planner
        ...                                     # the agent works
        await req.record(steps)                 # episodic events

On enter: announce an activity signal (a lease with a payload, renewed every
TTL/3 by a background task with the request's latest `status(...)`) and take
advisory claims on the request's entities (`req.claims` says who else holds
one). A signal that lapsed between two renewals (an outage or a pause longer
than its TTL), or that could not be announced on enter, is announced by the
renewal: the request is still running. Claims are
not renewed: they expire at their TTL (`renew_claims=True` renews them too).
`await req.suspend()` (a human in the loop) stops the renewal and withdraws
signal and claims; `await req.resume()` announces and claims
afresh. On every exit — normal, exception, cancellation — the renewal is
stopped and joined, then claims and signal are released within a bounded
cleanup timeout (also those whose acquire failed with its outcome unknown: the
store may have taken them). Every stage is fail-open: a backend or model failure lands in
`req.reports`, never in the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import timedelta
from types import TracebackType
from typing import cast

import attrs
from attrs import define, field

from agent_memory.domain.errors import InvalidInput, LeaseNotHeld, StoreClosed
from agent_memory.domain.records import Entity, Lease
from agent_memory.domain.steps import Step
from agent_memory.domain.validation import (
    require_id,
    require_positive,
    require_scope,
    require_text,
)
from agent_memory.domain.views import KnowledgeItem
from agent_memory.ports.models import Clock, LanguageModel
from agent_memory.ports.storage import EventLog, LeaseStore
from agent_memory.services.compaction import Compactor
from agent_memory.services.coordination import (
    ClaimResult,
    Coordinator,
    claim_key,
    request_owner,
    signal_key,
)
from agent_memory.services.event_scopes import scoped_events
from agent_memory.services.knowledge import KnowledgeService
from agent_memory.services.observability import Observability, entity_counts, view_attributes
from agent_memory.services.planning import PlanningContext, PlanningInputs, render_planning
from agent_memory.services.recorder import Recorder, RecorderOptions
from agent_memory.services.reports import StageReport, fail_open

__all__ = ["AgentMemory", "MemoryRequest", "RequestOptions"]

_HOOK = "pipeline.hook"


@define
class RequestOptions:
    """Numbers of the request lifecycle (defaults from the design; env via Settings)."""

    signal_ttl: timedelta = timedelta(minutes=5)
    claim_ttl: timedelta | None = None
    """TTL of investigation claims; None means the signal TTL."""
    renew_claims: bool = False
    """Renew claims with the signal. Off: claims are advisory and expire at their TTL."""
    cleanup_timeout: float = 5.0
    lookback: timedelta = timedelta(hours=24)
    window_limit: int = 20
    entity_history_limit: int = 10
    view_budget_bytes: int = 8000
    coordination_limit: int = 10
    recorder: RecorderOptions = field(factory=RecorderOptions)

    def __attrs_post_init__(self) -> None:
        if self.signal_ttl <= timedelta(0):
            raise InvalidInput("signal_ttl", "must be positive")
        if self.claim_ttl is not None and self.claim_ttl <= timedelta(0):
            raise InvalidInput("claim_ttl", "must be positive")
        if not self.cleanup_timeout > 0:
            raise InvalidInput("cleanup_timeout", "must be positive")
        for name in ("window_limit", "entity_history_limit", "view_budget_bytes"):
            require_positive(getattr(self, name), name)  # an int: the views reject others
        limit = self.coordination_limit
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise InvalidInput(
                "coordination_limit", f"a non-negative integer is required, got {limit!r}"
            )


class AgentMemory:
    """The Phase-1 service: shared episodic memory and coordination for a domain's agents."""

    def __init__(
        self,
        *,
        events: EventLog,
        leases: LeaseStore,
        clock: Clock,
        llm: LanguageModel | None = None,
        options: RequestOptions | None = None,
        observability: Observability | None = None,
        backend: str = "unknown",
        compactor: Compactor | None = None,
        knowledge: KnowledgeService | None = None,
    ) -> None:
        # windows show the global events of the domain's family only
        self.events = scoped_events(events)
        self.leases = leases
        self.clock = clock
        self.llm = llm
        self.options = options or RequestOptions()
        self.observability = observability or Observability()
        self.backend = backend
        self.recorder = Recorder(events, llm, clock, self.options.recorder)
        self.compactor = compactor
        self.knowledge = knowledge

    def request(
        self,
        *,
        agent: str,
        domain: str,
        request_id: str,
        user_id: str | None = None,
        entities: Sequence[Entity] = (),
        doing: str = "",
    ) -> MemoryRequest:
        return MemoryRequest(
            self,
            agent=require_id(agent, "agent"),
            domain=require_scope(domain, "domain"),
            request_id=require_id(request_id, "request_id"),
            user_id=None if user_id is None else require_id(user_id, "user_id"),
            entities=_entities(entities),
            doing=require_text(doing, "doing"),
        )


def _entities(entities: object) -> tuple[Entity, ...]:
    """The request's entities, refused at once when they are not `Entity`
    values (a claim of something else would only fail later, per entity)."""
    if isinstance(entities, Entity | str | bytes):
        raise InvalidInput("entities", f"a sequence of Entity is required, got {entities!r}")
    try:
        items = tuple(cast("Iterable[object]", entities))
    except TypeError:
        raise InvalidInput(
            "entities", f"a sequence of Entity is required, got {entities!r}"
        ) from None
    checked: list[Entity] = []
    for entity in items:
        if not isinstance(entity, Entity):
            raise InvalidInput("entities", f"Entity values are required, got {entity!r}")
        checked.append(entity)
    return tuple(checked)


class MemoryRequest:
    """One agent request's memory lifecycle (use as an async context manager)."""

    def __init__(
        self,
        memory: AgentMemory,
        *,
        agent: str,
        domain: str,
        request_id: str,
        user_id: str | None,
        entities: tuple[Entity, ...],
        doing: str,
    ) -> None:
        self._m = memory
        self.agent = agent
        self.domain = domain
        self.request_id = request_id
        self.user_id = user_id
        self.entities = entities
        self.doing = doing
        self.claims: list[ClaimResult] = []
        self.reports: dict[str, StageReport] = {}
        self._held: list[str] = []
        # keys whose acquire failed with its outcome unknown (the store may have
        # taken it, e.g. a reply lost to a timeout): released on withdrawal too
        self._unsure: list[str] = []
        self._renewal: asyncio.Task[None] | None = None
        self._coord = Coordinator(
            memory.leases,
            domain,
            memory.options.signal_ttl,
            claim_ttl=memory.options.claim_ttl,
        )
        self._started = memory.clock.now()
        self._steps = 0  # steps recorded so far: numbers the ones without an id
        self._status = "active"
        self._suspended = False

    def _report(self, stage: str) -> StageReport:
        report = StageReport(stage)
        self.reports[stage] = report
        return report

    # -- enter ---------------------------------------------------------------
    async def __aenter__(self) -> MemoryRequest:
        report = self._report("activity-announcement")
        with self._m.observability.span(
            f"{_HOOK}.before_planning.activity-announcement", domain=self.domain, agent=self.agent
        ) as span:
            await self._advertise(report)
            span.set(
                signal_announced=bool(report.details.get("signal")),
                claims_requested=len(self.entities),
                claims_acquired=int(report.details.get("claims_acquired", 0)),
                claims_held_by_others=len(report.details.get("claims_held_by_others", [])),
                failures=len(report.failures),
            )
        return self

    async def _advertise(self, report: StageReport) -> None:
        """Announce the signal, claim the entities, start the renewal (fail-open).
        The renewal starts even when the announcement failed: it announces the
        signal once the backend answers again."""
        async with fail_open(report, "announce"):
            report.details["signal"] = await self._announce_signal()
        self.claims = []
        for entity in self.entities:
            async with fail_open(report, f"claim {entity.type}/{entity.id}"):
                key = claim_key(entity)
                async with self._unsure_until_known(key):
                    result = await self._coord.claim(
                        self.agent, self.request_id, entity, self._started
                    )
                self.claims.append(result)
                if result.acquired and key not in self._held:
                    self._held.append(key)
        report.details["claims_acquired"] = sum(c.acquired for c in self.claims)
        report.details["claims_held_by_others"] = [
            {"entity": [c.entity.type, c.entity.id], "holder": c.holder_agent}
            for c in self.claims
            if not c.acquired
        ]
        self._renewal = asyncio.create_task(self._renew_forever())

    @contextlib.asynccontextmanager
    async def _unsure_until_known(self, key: str) -> AsyncIterator[None]:
        """Around an acquire of `key`: when it fails with an error that does not
        say the store refused it untouched (invalid input, closed store), the
        store may hold the lease for us anyway (the reply was lost), so the key
        is released on withdrawal with the held ones (owner-checked: a no-op
        when it is not ours)."""
        try:
            yield
        except (InvalidInput, StoreClosed):
            raise
        except Exception:
            if key not in self._unsure and key not in self._held:
                self._unsure.append(key)
            raise

    async def _announce_signal(self) -> bool:
        """Announce the signal and hold its key; whether it is ours."""
        key = signal_key(self.agent, self.request_id)
        async with self._unsure_until_known(key):
            lease = await self._announce()
        if lease is not None and key not in self._held:
            self._held.append(key)
        return lease is not None

    def status(self, status: str) -> None:
        """Set what the request is doing now (e.g. "waiting for approval"); the
        next renewal of its signal carries it."""
        if not isinstance(status, str) or not status.strip():
            raise InvalidInput("status", "a non-blank string is required")
        self._status = require_text(status, "status")

    @property
    def suspended(self) -> bool:
        return self._suspended

    async def suspend(self) -> StageReport:
        """Pause for a human in the loop: stop renewing and withdraw the signal
        and claims, so the request is no longer advertised (fail-open)."""
        report = self._report("suspend")
        if self._suspended:
            report.details["already_suspended"] = True
            return report
        self._suspended = True
        await self._withdraw(report)
        return report

    async def resume(self) -> StageReport:
        """Come back from `suspend()`: announce and claim afresh, renew again."""
        report = self._report("resume")
        if not self._suspended:
            report.details["not_suspended"] = True
            return report
        self._suspended = False
        await self._advertise(report)
        return report

    async def _renew_forever(self) -> None:
        report = self._report("activity-renewal")
        interval = self._m.options.signal_ttl.total_seconds() / 3
        renew_claims = self._m.options.renew_claims
        signal = signal_key(self.agent, self.request_id)
        renewals = 0
        while True:
            await asyncio.sleep(interval)
            if signal not in self._held:  # the announcement on enter failed
                async with fail_open(report, f"announce {signal}"):
                    if await self._announce_signal():
                        report.details["announced"] = int(report.details.get("announced", 0)) + 1
                continue
            for key in list(self._held):
                if key != signal and not renew_claims:
                    continue
                async with fail_open(report, f"renew {key}"):
                    try:
                        if key == signal:
                            await self._coord.renew_signal(
                                self.agent,
                                self.request_id,
                                doing=self.doing,
                                started_at=self._started,
                                entities=self.entities,
                                status=self._status,
                            )
                        else:
                            await self._coord.renew(self.agent, self.request_id, [key])
                    except LeaseNotHeld:
                        if key != signal or not await self._reannounce():
                            self._held.remove(key)
                            raise
                        report.details["reannounced"] = (
                            int(report.details.get("reannounced", 0)) + 1
                        )
                    renewals += 1
            report.details["renewals"] = renewals

    async def _announce(self) -> Lease | None:
        """Announce the request's signal with its latest status; the lease, or
        None when another holds the key."""
        return await self._coord.announce(
            self.agent,
            self.request_id,
            doing=self.doing,
            started_at=self._started,
            entities=self.entities,
            status=self._status,
        )

    async def _reannounce(self) -> bool:
        """Announce the signal again after it lapsed between two renewals (an
        outage or a pause longer than its TTL): the request is still running
        and the key is its own. True when it is ours again."""
        return await self._announce() is not None

    # -- planning ------------------------------------------------------------
    async def planning_context(
        self, *, knowledge: Sequence[KnowledgeItem] = (), digest: str | None = None
    ) -> PlanningContext:
        """The views for the planner, built from the event window, the entity
        history and the active signals and claims (fail-open)."""
        opts = self._m.options
        report = self._report("memory-enrichment")
        inputs = PlanningInputs(
            agent=self.agent,
            domain=self.domain,
            request_id=self.request_id,
            now=self._m.clock.now(),
        )
        obs = self._m.observability
        with obs.span(
            f"{_HOOK}.before_planning.memory-enrichment", domain=self.domain, agent=self.agent
        ) as span:
            since = inputs.now - opts.lookback
            async with fail_open(report, "event-window"):
                window = await self._m.events.window(
                    self.domain, since=since, limit=opts.window_limit
                )
                inputs.events = list(window.events)
                inputs.events_limited = window.limited
                self._m.observability.retrieval(self._m.backend, "hit" if window.events else "miss")
                obs.results("events", len(window.events))
            if report.failures:
                self._m.observability.retrieval(self._m.backend, "error")
            if self.entities:
                entity = inputs.entity = self.entities[0]
                async with fail_open(report, f"entity-history {entity.type}/{entity.id}"):
                    hist = await self._m.events.window(
                        self.domain, since=since, limit=opts.entity_history_limit, entity=entity
                    )
                    inputs.entity_history = list(hist.events)
            async with fail_open(report, "signals"):
                signals = await self._coord.active_signals()
                own = (self.agent, self.request_id)  # a request is the pair
                inputs.signals = [s for s in signals if (s.agent, s.request_id) != own]
            async with fail_open(report, "claims"):
                inputs.claims = await self._coord.active_claims()
            span.event(
                "activity.coordination.complete",
                signals_discovered=len(inputs.signals),
                claims_active=len(inputs.claims),
            )
            inputs.knowledge = list(knowledge)
            inputs.digest = digest
            if digest is None and self._m.compactor is not None:
                started = self._m.clock.now()
                result = await self._m.compactor.digest(self.domain)
                inputs.digest = result.digest
                span.event(
                    "activity.compaction.cache_decision",
                    path=str(result.path),
                    coverage=str(result.coverage),
                    cache_hit=result.cache_hit,
                    model_called=result.model_called,
                    events=int(result.report.details.get("events", 0)),
                    failures=len(result.report.failures),
                    duration_ms=round((self._m.clock.now() - started).total_seconds() * 1000, 3),
                )
                obs.digest_decision(str(result.path))
                report.details["digest"] = {
                    "path": str(result.path),
                    "coverage": str(result.coverage),
                    "cache_hit": result.cache_hit,
                    "model_called": result.model_called,
                }
                report.failures.extend(result.report.failures)
            if not knowledge and self._m.knowledge is not None:
                query = " ".join([self.doing, *(f"{e.type} {e.id}" for e in self.entities)])
                async with fail_open(report, "knowledge-recall"):
                    inputs.knowledge = await self._m.knowledge.recall(self.domain, query or "")
                    obs.results("knowledge", len(inputs.knowledge))
            context = render_planning(
                inputs,
                budget_bytes=opts.view_budget_bytes,
                coordination_limit=opts.coordination_limit,
                report=report,
            )
            memory_view = context.view_reports.get("agent_memory")
            if memory_view is not None:
                span.event(
                    "memory.enrichment.injected",
                    entities_found=len(self.entities),
                    **view_attributes(memory_view),
                )
            coordination_view = context.view_reports.get("agent_coordination")
            if coordination_view is not None:
                shown = sum(s.admitted for s in coordination_view.sections)
                span.set(signals_shown=shown)
            span.set(
                events=len(inputs.events),
                context_bytes=len(context.text.encode("utf-8")),
                failures=len(report.failures),
            )
        return context

    # -- after execution -----------------------------------------------------
    async def record(self, steps: Sequence[Step]) -> StageReport:
        """Record the executed steps as events (fail-open; the report says what happened)."""
        report = self._report("memory-record")
        # A step without an id gets "<request>#<n>", n counted over the whole
        # request: numbered per call, the second call's first step would reuse
        # the first call's id and the (idempotent) event log would drop it.
        first, self._steps = self._steps, self._steps + len(steps)
        steps = [
            s if s.id is not None else attrs.evolve(s, id=f"{self.request_id}#{first + i}")
            for i, s in enumerate(steps)
        ]
        with self._m.observability.span(
            f"{_HOOK}.after_execution.memory-record", domain=self.domain, agent=self.agent
        ) as span:
            await self._m.recorder.record(
                domain=self.domain,
                agent=self.agent,
                request_id=self.request_id,
                steps=steps,
                user_id=self.user_id,
                request_entities=self.entities,
                report=report,
            )
            details = report.details
            span.event("memory.entity_extraction.completed", **entity_counts(details))
            span.set(
                steps=int(details.get("steps", 0)),
                eligible=int(details.get("eligible", 0)),
                events_recorded=int(details.get("events_written", 0)),
                failures=len(report.failures),
            )
            return report

    async def learn(self, result: str, *, wait: bool = False) -> StageReport:
        """After synthesis: extract reusable knowledge from the request's result
        (asynchronous and fail-open; `wait=True` runs it inline)."""
        report = self._report("knowledge-extraction")
        if self._m.knowledge is None:
            report.details["skipped"] = "no knowledge service configured"
            return report
        with self._m.observability.span(
            f"{_HOOK}.after_synthesis.knowledge-extraction", domain=self.domain, agent=self.agent
        ):
            async with fail_open(report, "extract"):
                outcome = await self._m.knowledge.extract(
                    domain=self.domain,
                    request_id=self.request_id,
                    result=result,
                    wait=wait,
                    user_id=self.user_id,
                )
                report.details.update(outcome.details)
                report.failures.extend(outcome.failures)
        return report

    # -- exit ----------------------------------------------------------------
    async def _cleanup(self, report: StageReport) -> None:
        await self._withdraw(report)

    async def _withdraw(self, report: StageReport) -> None:
        """Stop and join the renewal, then release every held lease (fail-open)."""
        if self._renewal is not None:
            self._renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewal
            self._renewal = None
        released = 0
        for key in list(reversed(self._held)):
            async with fail_open(report, f"release {key}"):
                if await self._m.leases.release(self.domain, key, self._coord_owner()):
                    released += 1
                self._held.remove(key)
        for key in list(self._unsure):  # taken for us, perhaps: owner-checked
            async with fail_open(report, f"release {key}"):
                if await self._m.leases.release(self.domain, key, self._coord_owner()):
                    released += 1
                self._unsure.remove(key)
        report.details["released"] = released

    def _coord_owner(self) -> str:
        return request_owner(self.agent, self.request_id)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        report = self._report("cleanup")
        report.details["exit"] = (
            "cancelled"
            if exc_type is not None and issubclass(exc_type, asyncio.CancelledError)
            else "error"
            if exc_type is not None
            else "normal"
        )
        task = asyncio.ensure_future(self._cleanup(report))
        try:
            await asyncio.wait_for(asyncio.shield(task), self._m.options.cleanup_timeout)
        except TimeoutError:
            limit = self._m.options.cleanup_timeout
            report.fail("cleanup", TimeoutError(f"cleanup exceeded {limit}s"))
            task.cancel()
        except asyncio.CancelledError:
            # Cancelled again while cleaning up: let the shielded cleanup finish
            # within its budget, then propagate.
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(task, self._m.options.cleanup_timeout)
            raise

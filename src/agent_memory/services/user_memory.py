"""Private user memory: extraction after the response, reconciliation, recall
before planning, and verifiable forgetting.

Facts are `MemoryRecord`s owned by the user id, in the agent type's namespace
or in `universal` (read by every agent); `kind` is the fact category, so stores
filter categories natively. Cross-agent facts (name, preferred language, time
zone: `domain.user_facts.is_universal`) are written to, and reconciled in,
`universal`; everything else stays in the agent's namespace. Attributes:
confidence, source (explicit/derived), last_used_at and, after a CONTRADICT,
`supersedes` (the replaced fact's id). Derived cache entries live in the cache
scope `user_cache_scope(user)`.

Agents reconcile one user's facts concurrently, with no lock: a stored ADD is
settled against copies another writer stored meanwhile (one stays), a
CONTRADICT whose target is already gone settles the replacements of it (the
latest stays), a target that vanished before its UPDATE or DUPLICATE landed
keeps the candidate as a fact of its own, and a DUPLICATE's refresh is written
only over the version it read (`VersionedWrites` stores).

Forgetting a user also reaches what their data fed, found from stored data so
it works in any process: before the user's events are erased they are read
(`EventLog.user_events`), and their domains, requests and entities name the
domain digests to invalidate (every domain's, for a global event) and the
knowledge fragments to delete (tagged with the user id, extracted from one of
their requests, or reflected on an entity their events carry). Triples and
graph checkpoints owned by the user id go too.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from attrs import define, evolve, frozen

from agent_memory.domain.errors import DuplicateRecord, InvalidInput, NotFound
from agent_memory.domain.langgraph_layout import (
    REGISTRY_KIND,
    REGISTRY_OWNER,
    owner_of,
    registry_shard,
)
from agent_memory.domain.records import Event, MemoryRecord
from agent_memory.domain.triples import MAX_LIMIT
from agent_memory.domain.user_facts import (
    DEFAULT_SIMILARITY_THRESHOLD,
    UNIVERSAL_NAMESPACE,
    Classification,
    FactCandidate,
    Neighbour,
    Operation,
    immediate_decision,
    is_universal,
    normalise_fact,
    parse_classifications,
    parse_extraction,
    rule_extract,
)
from agent_memory.domain.validation import (
    require_id,
    require_positive,
    require_scope,
    require_text,
)
from agent_memory.domain.views import (
    FORMAT_VERSION,
    Fact,
    FactCategory,
    FactSource,
    RenderedView,
    ViewOutcome,
    ViewReport,
    render_user_profile,
)
from agent_memory.ports.models import Clock, Embedder, LanguageModel
from agent_memory.ports.storage import Cache, EventLog, MemoryStore, TripleStore, VersionedWrites
from agent_memory.services.audit import AuditTrail
from agent_memory.services.background import BackgroundReports
from agent_memory.services.compaction import CACHE_KEY as DIGEST_KEY
from agent_memory.services.compaction import invalidate_digest
from agent_memory.services.forget_marks import mark_forgetting, unmark
from agent_memory.services.graph_memory import (
    CHECKPOINT_SCOPE,
    forget_checkpoints,
    is_checkpoint_of,
)
from agent_memory.services.knowledge import KNOWLEDGE_NAMESPACE, knowledge_domains
from agent_memory.services.observability import Observability, hashed_id, view_attributes
from agent_memory.services.reports import StageReport
from agent_memory.services.uninterrupted import Uninterrupted
from agent_memory.services.user_scope import user_cache_scope

__all__ = [
    "ForgetReceipt",
    "Invalidated",
    "UserMemory",
    "UserMemoryOptions",
    "derived_from",
    "fact_from_record",
    "user_cache_scope",
]

EXTRACTION_SYSTEM_PROMPT = (
    "You extract durable facts a user stated about themselves, for a personal assistant. "
    'Answer with ONLY a JSON object: {"facts": [{"content": "User ...", "category": '
    '"identity|preference|constraint|relationship|context", "confidence": 0.0-1.0, '
    '"explicit": true|false, "universal": true|false}], "summary": "<one sentence about '
    'this session>"}. Set "universal" for facts every assistant should share: the '
    "user's name or how to address them, preferred language, time zone."
)
RECONCILE_SYSTEM_PROMPT = (
    "You reconcile new facts about a user with the facts already stored. For each "
    "candidate choose ADD (new information), UPDATE (refines a stored fact: give the "
    "merged content), CONTRADICT (replaces a stored fact that is no longer true) or "
    "DUPLICATE (already known). Answer with ONLY a JSON array: "
    '[{"index": <candidate index>, "operation": "...", "target_id": "<stored id or null>", '
    '"content": "<text for UPDATE/CONTRADICT or null>"}].'
)


#: Operations other than ADD that store a candidate's text (DUPLICATE stores nothing).
_STORING = frozenset({Operation.UPDATE, Operation.CONTRADICT})


@define
class UserMemoryOptions:
    similarity_threshold: float = DEFAULT_SIMILARITY_THRESHOLD
    neighbours: int = 5
    recall_limit: int = 15
    recall_summaries: int = 3
    relevance_weight: float = 0.5
    """Recall ranks relevance-searched facts by these weights: similarity,"""
    recency_weight: float = 0.2
    """recency (halving every `recency_half_life` since the fact's last update)"""
    importance_weight: float = 0.3
    """and importance (the fact's confidence)."""
    recency_half_life: timedelta = timedelta(days=30)
    model_timeout: float = 60.0
    max_tokens: int = 1024
    profile_budget_bytes: int = 8000

    def __attrs_post_init__(self) -> None:
        # checked here, not at the first profile() (which named `budget_bytes`)
        require_positive(self.profile_budget_bytes, "profile_budget_bytes")


@frozen
class Invalidated:
    """One item derived from the user's data that forgetting removed.

    `kind` is `digest` (scope: the domain), `fragment` (scope: the domain, key:
    the record id), `triples`, `checkpoints` or `langgraph_namespaces` (the
    LangGraph store's registry entries of the user's namespaces) (scope: the
    owner, key `*`, `count` how many)."""

    kind: str
    scope: str
    key: str
    count: int = 1


@frozen
class ForgetReceipt:
    """What forgetting removed, per store, and each derived item it invalidated."""

    user_id: str
    namespace: str | None
    facts: int = 0
    events: int = 0
    cache_entries: int = 0
    derived: tuple[Invalidated, ...] = ()
    failures: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.failures


_log = logging.getLogger(__name__)

#: Opens the memory stores of the deployment's other embedding spaces (the old
#: space a re-embed keeps, a new one it is building), which a forget must reach
#: too (`bootstrap.services.other_spaces`).
OtherSpaces = Callable[[], AbstractAsyncContextManager[Sequence[MemoryStore]]]

#: Opens the deployment's triple store (None: it keeps none), which a forget
#: must reach when the service was given no `triples` of its own
#: (`bootstrap.services.deployment_triples`).
TriplesOpener = Callable[[], AbstractAsyncContextManager[TripleStore | None]]


async def _forget_langgraph_registry(store: MemoryStore, user_id: str) -> int:
    """Delete from `store` the LangGraph store's registry entries of the
    namespaces whose first label is the user (`domain.langgraph_layout`): their
    items went with the user's scope, and the entries name the namespaces. The
    count."""
    if owner_of((user_id,)) != user_id:  # such namespaces live under another owner
        return 0
    return await store.delete_scope(
        REGISTRY_OWNER, namespace=registry_shard(user_id), kinds=[REGISTRY_KIND]
    )


def _failure(what: str, exc: BaseException, where: str | None = None) -> str:
    """One failure of a receipt: `<what>: <error type>: [<where>: ]<message>`.
    `what` is a fixed word (store, events, digest, knowledge, ...); the scope a
    part failed in (a domain, an embedding space) comes after the error type,
    so the entry points can show `<what>: <error type>` without any scope (a
    forget visits every domain of the deployment, other tenants' too)."""
    place = "" if where is None else f"{where}: "
    return f"{what}: {type(exc).__name__}: {place}{exc}"


def derived_from(record: MemoryRecord, user_id: str, events: Sequence[Event]) -> bool:
    """True when a knowledge fragment was (or may have been) derived from the
    user's data: tagged with the user id (a request's result, or reflected
    events of the user; among the `users` of a fragment several requests
    derived, or one of `provenance: "many"`), extracted from one of the user's
    requests (`request_id`, `request_ids`), or reflected
    on an entity one of the user's events in that domain carries (fragments
    stored before they were tagged)."""
    attributes = record.attributes
    if attributes.get("user_id") == user_id or attributes.get("provenance") == "many":
        return True
    users = attributes.get("users")
    if isinstance(users, list) and user_id in users:
        return True
    mine = [e for e in events if e.domain == record.owner]
    requests = attributes.get("request_ids")
    request_ids = set(requests) if isinstance(requests, list) else set()
    if attributes.get("request_id") is not None:
        request_ids.add(attributes["request_id"])
    if request_ids and any(e.origin_request_id in request_ids for e in mine):
        return True
    entity = attributes.get("entity")
    if record.kind == "reflection" and isinstance(entity, list) and len(entity) == 2:
        wanted = (str(entity[0]), str(entity[1]))
        return any((x.type, x.id) == wanted for e in mine for x in e.entities)
    return False


@frozen
class ForgottenUsers:
    """What `UserMemory.forget(user)` removes, as a test on single items: how an
    import leaves out, of a file written before the forget, the data of users
    forgotten since (it would bring them back). `users` are stored owner ids;
    `events` the users' events (those of the file: the lineage of the
    knowledge fragments and digests derived from them); `loops` the loops of
    their triples (checkpoints written before the owner-prefixed keys)."""

    users: frozenset[str]
    events: tuple[Event, ...] = ()
    loops: frozenset[tuple[str, str]] = frozenset()

    def holds_record(self, record: MemoryRecord) -> bool:
        """The user's facts and summaries (their scope), the LangGraph
        registry entries of their namespaces, and knowledge fragments derived
        from their data."""
        if record.owner in self.users:
            return True
        if record.owner == REGISTRY_OWNER and record.kind == REGISTRY_KIND:
            return any(
                owner_of((user,)) == user and record.namespace == registry_shard(user)
                for user in self.users
            )
        if record.namespace != KNOWLEDGE_NAMESPACE:
            return False
        return any(derived_from(record, user, self._events_of(user)) for user in self.users)

    def holds_event(self, event: Event) -> bool:
        return event.user_id in self.users

    def holds_triple(self, owner: str) -> bool:
        return owner in self.users

    def holds_cache(self, scope: str, key: str) -> bool:
        """Entries derived from the user's data (their cache scope), their
        loops' checkpoints, and the digests of the domains their events fed
        (every domain's, when one of them was global)."""
        if any(scope == user_cache_scope(user) for user in self.users):
            return True
        if scope == CHECKPOINT_SCOPE:
            return any(
                is_checkpoint_of(key, user, [loop for o, loop in self.loops if o == user])
                for user in self.users
            )
        if key != DIGEST_KEY:
            return False
        return any(e.is_global or e.domain == scope for e in self.events)

    def _events_of(self, user: str) -> list[Event]:
        return [e for e in self.events if e.user_id == user]


def fact_from_record(record: MemoryRecord) -> Fact:
    attrs_ = record.attributes
    return Fact(
        id=record.id,
        category=record.kind,
        content=record.content,
        confidence=float(attrs_.get("confidence", 0.8)),
        source=attrs_.get("source", "explicit"),
        created_at=record.created_at,
        updated_at=record.updated_at,
    )


class UserMemory:
    """Private facts per user, reconciled, recalled and forgettable."""

    def __init__(
        self,
        *,
        store: MemoryStore,
        embedder: Embedder,
        clock: Clock,
        llm: LanguageModel | None = None,
        events: EventLog | None = None,
        cache: Cache | None = None,
        options: UserMemoryOptions | None = None,
        triples: TripleStore | None = None,
        observability: Observability | None = None,
        audit: AuditTrail | None = None,
        other_spaces: OtherSpaces | None = None,
        open_triples: TriplesOpener | None = None,
    ) -> None:
        self.observability = observability or Observability()
        self.other_spaces = other_spaces
        self.open_triples = open_triples
        self.audit = audit if audit is not None else AuditTrail(None, clock)
        self.store = store
        self.triples = triples
        self.embedder = embedder
        self.clock = clock
        self.llm = llm
        self.events = events
        self.cache = cache
        self.options = options or UserMemoryOptions()
        self.counters: Counter[str] = Counter()
        self._background = BackgroundReports()
        # forgets run to their end and their audit entry, even when the caller
        # is cancelled part-way (`services.uninterrupted`)
        self._forgets = Uninterrupted()

    # -- extraction ------------------------------------------------------------
    async def extract(
        self,
        *,
        user_id: str | None,
        namespace: str,
        conversation: str,
        wait: bool = False,
    ) -> StageReport:
        """Extract facts and a session summary after the response, then reconcile.

        Asynchronous by default (returns at once with `scheduled`; `drain()`
        waits); `wait=True` runs it to completion. Without a user id it is
        skipped and the report says so."""
        report = StageReport("user-memory-extraction")
        if user_id is None:
            report.details["skipped"] = "no user id"
            return report
        require_id(user_id, "user_id")
        require_scope(namespace, "namespace")
        require_text(conversation, "conversation")
        if wait:
            return await self._extract(user_id, namespace, conversation, report)
        self._background.spawn(self._extract(user_id, namespace, conversation, report))
        report.details["scheduled"] = True
        return report

    async def drain(self) -> list[StageReport]:
        """Wait for scheduled extractions and for forgets whose callers were
        cancelled; every extraction report finished since the last drain."""
        await self._forgets.wait()
        return await self._background.drain()

    async def _extract(
        self, user_id: str, namespace: str, conversation: str, report: StageReport
    ) -> StageReport:
        with self.observability.span(
            "pipeline.hook.after_synthesis.user-memory-extraction",
            namespace=namespace,
            user_key=hashed_id(user_id),
        ) as span:
            await self._extract_facts(user_id, namespace, conversation, report)
            reconciled = report.details.get("reconcile", {})
            operations = reconciled.get("operations", {}) if isinstance(reconciled, dict) else {}
            span.event(
                "user_memory.extraction.complete",
                extractor=str(report.details.get("extractor", "")),
                candidates=int(report.details.get("candidates", 0)),
                stored=sum(n for op, n in operations.items() if op != "DUPLICATE"),
                failures=len(report.failures),
            )
        return report

    async def _extract_facts(
        self, user_id: str, namespace: str, conversation: str, report: StageReport
    ) -> StageReport:
        try:
            candidates, summary = await self._candidates(conversation, report)
            if summary:
                candidates.append(
                    FactCandidate(
                        content=summary, category=FactCategory.SUMMARY, source=FactSource.DERIVED
                    )
                )
            report.details["candidates"] = len(candidates)
            if candidates:
                reconciled = await self.reconcile(
                    user_id=user_id, namespace=namespace, candidates=candidates
                )
                report.details["reconcile"] = reconciled.details
                report.failures.extend(reconciled.failures)
        except Exception as exc:
            report.fail("extract", exc)
        return report

    async def _candidates(
        self, conversation: str, report: StageReport
    ) -> tuple[list[FactCandidate], str | None]:
        if self.llm is None:
            report.details["extractor"] = "rules"
            return rule_extract(conversation), None
        report.details["extractor"] = "model"
        started = time.perf_counter()
        try:
            answer = await self.llm.complete(
                f"Conversation:\n{conversation}",
                max_tokens=self.options.max_tokens,
                timeout=self.options.model_timeout,
                system=EXTRACTION_SYSTEM_PROMPT,
            )
        except Exception as exc:
            report.fail("extract-model", exc)
            report.details["extractor"] = "rules (model failed)"
            self._model_request_events(started, "error", 0, None)
            return rule_extract(conversation), None
        candidates, summary, error = parse_extraction(answer)
        if error is not None:
            report.details["extraction_error"] = error
        outcome = "ok" if error is None else "unusable"
        self._model_request_events(started, outcome, len(candidates), summary)
        return candidates, summary

    def _model_request_events(
        self, started: float, outcome: str, candidates: int, summary: str | None
    ) -> None:
        """`user_memory.extraction.llm_request` and `user_memory.summary.llm_request`
        on the current span. One model request returns both the facts and the
        session summary, so both events describe it (`same_request`); counts only."""
        duration_ms = round((time.perf_counter() - started) * 1000, 3)
        self.observability.event(
            "user_memory.extraction.llm_request",
            outcome=outcome,
            duration_ms=duration_ms,
            candidates=candidates,
        )
        self.observability.event(
            "user_memory.summary.llm_request",
            outcome=outcome,
            same_request=True,
            summary_returned=summary is not None,
        )

    # -- reconciliation ----------------------------------------------------------
    async def _neighbours(
        self, user_id: str, namespace: str, vector: np.ndarray[Any, Any], category: FactCategory
    ) -> list[Neighbour]:
        hits = await self.store.search(
            user_id, vector, limit=self.options.neighbours, namespace=namespace
        )
        return [
            Neighbour(id=h.record.id, content=h.record.content, similarity=h.score)
            for h in hits
            if category is not FactCategory.SUMMARY and h.record.kind != FactCategory.SUMMARY
        ]

    async def reconcile(
        self, *, user_id: str, namespace: str, candidates: Sequence[FactCandidate]
    ) -> StageReport:
        """Apply each candidate as ADD / UPDATE / CONTRADICT / DUPLICATE, in the
        namespace it belongs to: `universal` for cross-agent facts, else `namespace`."""
        report = StageReport("user-memory-reconcile")
        require_id(user_id, "user_id")
        require_scope(namespace, "namespace")
        if not candidates:
            return report
        spaces = [self.namespace_for(c, namespace) for c in candidates]
        universal = sum(ns == UNIVERSAL_NAMESPACE for ns in spaces)
        if universal:
            report.details["universal"] = universal
        try:  # fail-open: an embedder or store failure is reported, not raised
            vectors = await self.embedder.embed([c.content for c in candidates])
            neighbours = [
                await self._neighbours(user_id, spaces[i], vectors[i], c.category)
                for i, c in enumerate(candidates)
            ]
        except Exception as exc:
            report.fail("neighbours", exc)
            report.details["operations"] = {}
            return report
        decisions: dict[int, Classification] = {}
        pending: list[int] = []
        for i, candidate in enumerate(candidates):
            decision = immediate_decision(
                candidate, neighbours[i], self.options.similarity_threshold
            )
            if decision is None:
                pending.append(i)
            else:
                decisions[i] = decision
        report.details["model_calls"] = 0
        if pending:
            decisions.update(await self._classify(candidates, neighbours, pending, report))
        ops: Counter[str] = Counter()
        summaries = 0
        now = self.clock.now()
        additions: dict[int, MemoryRecord] = {}  # every ADD goes to the store in one batch
        for i, candidate in enumerate(candidates):
            decision = decisions.get(i, Classification(Operation.ADD))
            if decision.operation is Operation.ADD:
                additions[i] = self._record(user_id, spaces[i], candidate, vectors[i], now)
                continue
            try:
                applied = await self._apply(user_id, spaces[i], candidate, vectors[i], decision)
            except Exception as exc:
                report.fail(f"apply {decision.operation} [{i}]", exc)
                continue
            ops[str(applied)] += 1
            self.counters[f"op.{applied}"] += 1
            if candidate.category is FactCategory.SUMMARY and applied in _STORING:
                summaries += 1
        for i, applied in (await self._add_all(additions, report)).items():
            ops[str(applied)] += 1
            self.counters[f"op.{applied}"] += 1
            summaries += candidates[i].category is FactCategory.SUMMARY
        report.details["operations"] = dict(ops)
        self.observability.user_memory_operations(dict(ops))
        self._reconciled_event(report)
        if summaries:
            report.details["summaries_stored"] = summaries
            self.counters["summary.stored"] += summaries
            self.observability.user_memory_summaries(summaries)
            self.observability.event("user_memory.summary.stored", summaries=summaries)
        return report

    def _reconciled_event(self, report: StageReport) -> None:
        """`user_memory.reconciliation.complete` on the current span (counts only)."""
        ops = report.details.get("operations", {})
        self.observability.event(
            "user_memory.reconciliation.complete",
            operations_add=int(ops.get("ADD", 0)),
            operations_update=int(ops.get("UPDATE", 0)),
            operations_contradict=int(ops.get("CONTRADICT", 0)),
            operations_duplicate=int(ops.get("DUPLICATE", 0)),
            model_calls=int(report.details.get("model_calls", 0)),
            classification=str(report.details.get("classification", "none")),
            failures=len(report.failures),
        )

    @staticmethod
    def namespace_for(candidate: FactCandidate, namespace: str) -> str:
        """Where a candidate is stored and reconciled: `universal` for the facts
        every agent shares (name, preferred language, time zone), else the agent's."""
        return UNIVERSAL_NAMESPACE if is_universal(candidate) else namespace

    async def _ask(self, prompt: str) -> str:
        assert self.llm is not None
        self.counters["model_calls"] += 1
        return await self.llm.complete(
            prompt,
            max_tokens=self.options.max_tokens,
            timeout=self.options.model_timeout,
            system=RECONCILE_SYSTEM_PROMPT,
        )

    @staticmethod
    def _prompt(items: Sequence[tuple[int, FactCandidate, Sequence[Neighbour]]]) -> str:
        body = [
            {
                "index": index,
                "candidate": c.content,
                "category": c.category.value,
                "stored": [{"id": n.id, "content": n.content} for n in ns],
            }
            for index, c, ns in items
        ]
        return "Candidates:\n" + json.dumps(body, ensure_ascii=False, indent=1)

    async def _classify(
        self,
        candidates: Sequence[FactCandidate],
        neighbours: Sequence[Sequence[Neighbour]],
        pending: Sequence[int],
        report: StageReport,
    ) -> dict[int, Classification]:
        """One batched model call; per-candidate calls for what it left unusable."""
        if self.llm is None:
            report.details["classification"] = "no model: ADD"
            return {}
        out: dict[int, Classification] = {}
        try:
            answer = await self._ask(
                self._prompt([(i, candidates[i], neighbours[i]) for i in pending])
            )
            report.details["model_calls"] += 1
            parsed, error = parse_classifications(answer, neighbours)
            out = {i: parsed[i] for i in pending if i in parsed}
            if error is not None:
                report.details["batch_error"] = error
        except Exception as exc:
            report.fail("classify-batch", exc)
        missing = [i for i in pending if i not in out]
        if not missing:
            self.counters["batch.success"] += 1
            self.observability.user_memory_batch("success")
            report.details["classification"] = "batch"
            return out
        self.counters["batch.fallback"] += 1
        self.observability.user_memory_batch("fallback")
        report.details["classification"] = "per-candidate fallback"
        for i in missing:
            try:
                answer = await self._ask(self._prompt([(0, candidates[i], neighbours[i])]))
                report.details["model_calls"] += 1
                single, _ = parse_classifications(answer, [neighbours[i]])
            except Exception as exc:
                report.fail(f"classify [{i}]", exc)
                continue
            if 0 in single:
                out[i] = single[0]
        return out

    async def _add_all(
        self, additions: dict[int, MemoryRecord], report: StageReport
    ) -> dict[int, Operation]:
        """Store the ADDs (by candidate index) in one batch; what each became: ADD,
        or DUPLICATE when another writer stored the same fact meanwhile. A batch
        refused as invalid (one fact over a backend's limit) is stored one record
        at a time, so only the invalid fact fails."""
        if not additions:
            return {}
        stored: list[int] = []
        try:
            await self.store.add(list(additions.values()))
            stored = list(additions)
        except InvalidInput:
            for i, record in additions.items():
                try:
                    await self.store.add([record])
                except DuplicateRecord:  # its fresh id: a non-atomic batch wrote it
                    stored.append(i)
                except Exception as exc:
                    report.fail(f"apply ADD [{i}]", exc)
                else:
                    stored.append(i)
        except Exception as exc:
            report.fail(f"apply ADD x{len(additions)}", exc)
        out: dict[int, Operation] = {}
        for i in stored:
            out[i] = Operation.ADD
            try:
                if await self._dropped_as_copy(additions[i]):
                    out[i] = Operation.DUPLICATE
            except Exception as exc:
                report.fail(f"settle ADD [{i}]", exc)
        return out

    async def _dropped_as_copy(self, record: MemoryRecord) -> bool:
        """Settle a fact just stored against copies of it (same namespace, same
        normalised text) that another writer stored meanwhile — both reconciled
        before either was stored, so each saw none. The first stored copy
        (created_at, then id) stays and whoever sees the others deletes them:
        every writer keeps the same one, so one copy remains. True when `record`
        is not the one that stays."""
        if record.kind == FactCategory.SUMMARY.value:
            return False  # summaries are never reconciled
        wanted = normalise_fact(record.content)
        hits = await self.store.search(
            record.owner, record.vector, limit=self.options.neighbours, namespace=record.namespace
        )
        copies = {
            h.record.id: h.record
            for h in hits
            if h.record.kind != FactCategory.SUMMARY.value
            and normalise_fact(h.record.content) == wanted
        }
        copies.setdefault(record.id, record)  # another writer may have deleted it already
        if len(copies) < 2:
            return False
        keep = min(copies.values(), key=lambda r: (r.created_at, r.id))
        for copy in copies.values():
            if copy.id != keep.id:
                await self._delete_read(copy)
        return keep.id != record.id

    async def _delete_read(self, record: MemoryRecord) -> None:
        """Delete `record` as it was read: on a store with `VersionedWrites` only
        while it is still that version, so an update another writer made since
        the read is not deleted with it; other stores delete it outright."""
        if isinstance(self.store, VersionedWrites):
            await self.store.delete_if_unchanged(record.owner, record.id, record.updated_at)
        else:
            await self.store.delete(record.owner, record.id)

    async def _keep(
        self,
        user_id: str,
        namespace: str,
        candidate: FactCandidate,
        vector: np.ndarray[Any, Any],
    ) -> Operation:
        """The candidate's target vanished meanwhile (forgotten, or replaced by
        another writer): keep the information as a fact of its own."""
        record = self._record(user_id, namespace, candidate, vector, self.clock.now())
        await self.store.add([record])
        return Operation.DUPLICATE if await self._dropped_as_copy(record) else Operation.ADD

    async def _apply(
        self,
        user_id: str,
        namespace: str,
        candidate: FactCandidate,
        vector: np.ndarray[Any, Any],
        decision: Classification,
    ) -> Operation:
        """UPDATE, CONTRADICT or DUPLICATE one candidate (ADDs are batched by the
        caller); the operation it came to."""
        now = self.clock.now()
        assert decision.target_id is not None
        if decision.operation is Operation.CONTRADICT:
            await self._replace(user_id, namespace, candidate, vector, decision, now)
            return Operation.CONTRADICT
        target = await self.store.get(user_id, decision.target_id)
        if target is None:  # vanished meanwhile: keep the information
            return await self._keep(user_id, namespace, candidate, vector)
        if decision.operation is Operation.DUPLICATE:
            if not await self._refresh(target, now):
                return await self._keep(user_id, namespace, candidate, vector)
        elif decision.operation is Operation.UPDATE:
            content = decision.content or candidate.content
            (new_vector,) = await self.embedder.embed([content])
            try:
                await self.store.update(
                    evolve(
                        target,
                        content=content,
                        vector=new_vector,
                        updated_at=now,
                        attributes={**target.attributes, "last_used_at": now.isoformat()},
                    )
                )
            except NotFound:  # removed since it was read
                return await self._keep(user_id, namespace, candidate, vector)
        return decision.operation

    async def _replace(
        self,
        user_id: str,
        namespace: str,
        candidate: FactCandidate,
        vector: np.ndarray[Any, Any],
        decision: Classification,
        now: datetime,
    ) -> None:
        """CONTRADICT: store the replacement first, then remove the old fact. A
        target already gone was replaced by another writer meanwhile (or
        forgotten): the replacements of it are settled to one."""
        assert decision.target_id is not None
        content = decision.content or candidate.content
        if content != candidate.content:
            (vector,) = await self.embedder.embed([content])
        replacement = self._record(
            user_id,
            namespace,
            evolve(candidate, content=content),
            vector,
            now,
            supersedes=decision.target_id,
        )
        await self.store.add([replacement])
        if not await self.store.delete(user_id, decision.target_id):
            await self._settle_replacements(user_id, namespace, decision.target_id)

    async def _refresh(self, target: MemoryRecord, now: datetime) -> bool:
        """A DUPLICATE's refresh of the stored fact's last-used time; False when
        the fact is gone. A store with `VersionedWrites` writes it only over the
        version read (as that version plus 1 µs), so a refresh never puts back
        the text another writer changed meanwhile (that write is as fresh); other
        stores replace the record."""
        refreshed = evolve(
            target, attributes={**target.attributes, "last_used_at": now.isoformat()}
        )
        if isinstance(self.store, VersionedWrites):
            version = target.updated_at + timedelta(microseconds=1)
            if await self.store.update_if_older(evolve(refreshed, updated_at=version)):
                return True
            return await self.store.get(target.owner, target.id) is not None
        try:
            await self.store.update(refreshed)
        except NotFound:
            return False
        return True

    async def _settle_replacements(self, user_id: str, namespace: str, replaced: str) -> None:
        """After a CONTRADICT found its target already gone: other writers may
        have replaced the same fact meanwhile, each with its own replacement.
        The latest (created_at, then id) stays, as if the writers had run one
        after another; every writer that finds its target gone deletes the
        others, so one remains."""
        replacements: list[MemoryRecord] = []
        cursor = None
        while True:
            page = await self.store.list(user_id, namespace=namespace, limit=200, cursor=cursor)
            replacements += [r for r in page.records if r.attributes.get("supersedes") == replaced]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        if len(replacements) < 2:
            return
        keep = max(replacements, key=lambda r: (r.created_at, r.id))
        for record in replacements:
            if record.id != keep.id:
                await self._delete_read(record)

    @staticmethod
    def _record(
        user_id: str,
        namespace: str,
        candidate: FactCandidate,
        vector: np.ndarray[Any, Any],
        now: datetime,
        supersedes: str | None = None,
    ) -> MemoryRecord:
        attributes: dict[str, Any] = {
            "confidence": candidate.confidence,
            "source": candidate.source.value,
            "last_used_at": now.isoformat(),
        }
        if supersedes is not None:
            attributes["supersedes"] = supersedes
        return MemoryRecord(
            id=uuid.uuid4().hex,
            owner=user_id,
            namespace=namespace,
            kind=candidate.category.value,
            content=candidate.content,
            vector=vector,
            created_at=now,
            updated_at=now,
            importance=candidate.confidence,
            attributes=attributes,
        )

    # -- recall ------------------------------------------------------------------
    async def recall(
        self, *, user_id: str, namespace: str, request: str
    ) -> tuple[list[Fact], StageReport]:
        """Identity facts always, the last session summaries, then preferences,
        constraints, relationships and context by relevance to the request; at
        most `recall_limit` facts from the namespace and `universal`."""
        report = StageReport("user-memory-recall")
        require_id(user_id, "user_id")
        require_scope(namespace, "namespace")
        spaces = list(dict.fromkeys([namespace, UNIVERSAL_NAMESPACE]))
        chosen: dict[str, MemoryRecord] = {}
        limit = self.options.recall_limit
        try:
            identity: list[MemoryRecord] = []
            summaries: list[MemoryRecord] = []
            for ns in spaces:
                page = await self.store.list(
                    user_id, namespace=ns, kinds=[FactCategory.IDENTITY.value], limit=limit
                )
                identity.extend(page.records)
                page = await self.store.list(
                    user_id,
                    namespace=ns,
                    kinds=[FactCategory.SUMMARY.value],
                    limit=self.options.recall_summaries,
                )
                summaries.extend(page.records)
            summaries.sort(key=lambda r: (r.created_at, r.id), reverse=True)
            report.details["identity"] = len(identity)
            report.details["summaries"] = min(len(summaries), self.options.recall_summaries)
            for record in identity + summaries[: self.options.recall_summaries]:
                if len(chosen) < limit:
                    chosen.setdefault(record.id, record)
            (query,) = await self.embedder.embed([request])
            kinds = [
                FactCategory.CONSTRAINT.value,
                FactCategory.PREFERENCE.value,
                FactCategory.RELATIONSHIP.value,
                FactCategory.CONTEXT.value,
            ]
            hits = []
            for ns in spaces:
                hits.extend(
                    await self.store.search(user_id, query, limit=limit, namespace=ns, kinds=kinds)
                )
            now = self.clock.now()
            hits.sort(key=lambda h: (-self._weighted(h.score, h.record, now), h.record.id))
            for hit in hits:
                if len(chosen) >= limit:
                    break
                chosen.setdefault(hit.record.id, hit.record)
        except Exception as exc:
            report.fail("recall", exc)
        facts = [fact_from_record(r) for r in chosen.values()]
        report.details["facts"] = len(facts)
        self.observability.results("user_facts", len(facts))
        return facts, report

    def _weighted(self, similarity: float, record: MemoryRecord, now: datetime) -> float:
        """A relevance-searched fact's recall score: the weighted sum of its
        similarity, recency and importance (`UserMemoryOptions` weights)."""
        o = self.options
        half_life = o.recency_half_life.total_seconds()
        age = max((now - record.updated_at).total_seconds(), 0.0)
        recency = math.exp(-math.log(2) * age / half_life) if half_life > 0 else 1.0
        return (
            o.relevance_weight * similarity
            + o.recency_weight * recency
            + o.importance_weight * record.importance
        )

    async def profile(self, *, user_id: str | None, namespace: str, request: str) -> RenderedView:
        """`<user_profile>` for the request (recall + the budgeted view). Without a
        user id (event-driven or scheduled agents) it skips silently: no text."""
        if user_id is None or not user_id.strip():
            return RenderedView(
                "",
                ViewReport(
                    view="user_profile",
                    format_version=FORMAT_VERSION,
                    event_format=None,
                    budget_bytes=self.options.profile_budget_bytes,
                    bytes_used=0,
                    outcome=ViewOutcome.COMPLETE,
                    sections=(),
                ),
            )
        with self.observability.span(
            "pipeline.hook.before_planning.user-memory-enrichment",
            namespace=namespace,
            user_key=hashed_id(user_id),
        ) as span:
            facts, report = await self.recall(user_id=user_id, namespace=namespace, request=request)
            span.event(
                "user_memory.recall.identity",
                identity_facts=int(report.details.get("identity", 0)),
                summaries=int(report.details.get("summaries", 0)),
                failures=len(report.failures),
            )
            view = render_user_profile(
                facts, now=self.clock.now(), budget_bytes=self.options.profile_budget_bytes
            )
            span.event(
                "user_memory.enrichment.injected",
                facts_count=len(facts),
                profile_chars=len(view.text),
                **view_attributes(view.report),
            )
        return view

    # -- forgetting ----------------------------------------------------------------
    async def forget(self, user_id: str, namespace: str | None = None) -> ForgetReceipt:
        """Remove everything about a user (or one namespace of it): facts and
        summaries (the universal ones too), events carrying the user id, derived
        cache entries, and everything derived from the user's data — the
        digests of the domains their events fed, knowledge fragments from their
        requests or events, their triples and graph checkpoints. Fail-open: what
        failed is listed in the receipt, the rest is still removed. A caller
        cancelled meanwhile (a timeout around the call) gets its cancellation,
        and the forget still runs to its end and its audit entry (`drain()`
        waits for it)."""
        require_id(user_id, "user_id")
        if namespace is not None:
            require_scope(namespace, "namespace")
        # to its end and its audit entry, even when the caller is cancelled
        return await self._forgets.run(self._forget_marked(user_id, namespace))

    async def _forget_marked(self, user_id: str, namespace: str | None) -> ForgetReceipt:
        """A whole-user forget, marked in progress (`forget_marks`) from before
        it reads or deletes anything until after its audit entry: an import
        that ends meanwhile finds the mark and removes what it wrote of the
        user (their data may land after this forget deleted that kind)."""
        if namespace is not None or self.cache is None:
            return await self._forget(user_id, namespace)
        failures: list[str] = []
        mark: str | None = None
        try:
            mark = await mark_forgetting(self.cache, user_id)
        except Exception as exc:
            failures.append(_failure("forget mark", exc))
        try:
            return await self._forget(user_id, namespace, failures)
        finally:
            if mark is not None:
                try:
                    await unmark(self.cache, mark)
                except Exception as exc:  # it lapses with its ttl
                    _log.warning("forget mark not removed: %s: %s", type(exc).__name__, exc)

    async def _forget(
        self, user_id: str, namespace: str | None, failures: list[str] | None = None
    ) -> ForgetReceipt:
        failures = [] if failures is None else failures
        facts = events_erased = cache_entries = 0
        derived: list[Invalidated] = []
        if namespace is not None:
            try:
                facts = await self.store.delete_scope(user_id, namespace=namespace)
            except Exception as exc:
                failures.append(_failure("store", exc))
            await self._in_other_spaces(
                failures, lambda store: store.delete_scope(user_id, namespace=namespace)
            )
            receipt = ForgetReceipt(user_id, namespace, facts=facts, failures=tuple(failures))
            await self._audit("forget_namespace", receipt)
            return receipt
        # Lineage first, from stored data: what the user's events fed.
        mine: list[Event] = []
        domains: list[str] = []
        if self.events is not None:
            try:
                mine = await self.events.user_events(user_id)
                domains = await self.events.domains()
            except Exception as exc:
                failures.append(_failure("lineage", exc))
        # Primary data next, so nothing can be rebuilt from it afterwards: in the
        # space reads use and in every other one that holds the deployment's
        # records (a re-embed's kept or half-built space).
        try:
            facts = await self.store.delete_scope(user_id)
        except Exception as exc:
            failures.append(_failure("store", exc))

        namespaces = 0
        try:
            namespaces = await _forget_langgraph_registry(self.store, user_id)
        except Exception as exc:
            failures.append(_failure("langgraph namespaces", exc))

        async def elsewhere(store: MemoryStore) -> None:
            await store.delete_scope(user_id)
            await _forget_langgraph_registry(store, user_id)
            # counted with the read space's (a fragment in both counts twice:
            # once per space it was deleted from)
            known = [*domains, *await knowledge_domains(store)]
            derived.extend(await self._forget_fragments(store, user_id, mine, known, failures))

        await self._in_other_spaces(failures, elsewhere)
        if self.events is not None:
            try:
                events_erased = await self.events.erase_user(user_id)
            except Exception as exc:
                failures.append(_failure("events", exc))
        if self.cache is not None:
            try:
                cache_entries = await self.cache.delete_prefix(user_cache_scope(user_id), "")
            except Exception as exc:
                failures.append(_failure("cache", exc))
            # A domain's digest quotes its own events and every global one.
            fed = {e.domain for e in mine}
            if any(e.is_global for e in mine):
                fed.update(domains)
            for domain in sorted(fed):
                try:
                    if await invalidate_digest(self.cache, domain):
                        derived.append(Invalidated("digest", domain, "digest"))
                except Exception as exc:
                    failures.append(_failure("digest", exc, domain))
        # Read after the user's cache scope was deleted: an extraction racing
        # this forget registers its domain before it stores, and withdraws what
        # it stored when its in-flight mark (in that scope) is gone.
        known = list(domains)
        try:
            known += await knowledge_domains(self.store)
        except Exception as exc:
            failures.append(_failure("knowledge domains", exc))
        derived.extend(await self._forget_fragments(self.store, user_id, mine, known, failures))
        derived.extend(await self._forget_graph(user_id, failures))
        if namespaces:
            derived.append(Invalidated("langgraph_namespaces", user_id, "*", namespaces))
        receipt = ForgetReceipt(
            user_id,
            None,
            facts=facts,
            events=events_erased,
            cache_entries=cache_entries,
            derived=tuple(derived),
            failures=tuple(failures),
        )
        await self._audit("forget_user", receipt)
        return receipt

    async def _audit(self, operation: str, receipt: ForgetReceipt) -> None:
        """The audit entry of a forget: the receipt's counts, no content."""
        counts: Counter[str] = Counter(
            facts=receipt.facts, events=receipt.events, cache_entries=receipt.cache_entries
        )
        for item in receipt.derived:
            counts[item.kind if item.kind.endswith("s") else item.kind + "s"] += item.count
        counts["failures"] = len(receipt.failures)
        await self.audit.record(
            operation, subject=receipt.user_id, counts=dict(counts), result=receipt
        )

    async def delete_scope(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        """`MemoryStore.delete_scope` with an audit entry (`delete_scope`, subject
        the owner, `records` the count): the store's own call writes none."""
        removed = await self.store.delete_scope(owner, namespace=namespace, kinds=kinds)
        failures: list[str] = []
        await self._in_other_spaces(
            failures, lambda store: store.delete_scope(owner, namespace=namespace, kinds=kinds)
        )
        if failures:
            _log.warning("delete_scope in other embedding spaces: %s", "; ".join(failures))
        await self.audit.record(
            "delete_scope", subject=owner, counts={"records": removed}, result=removed
        )
        return removed

    async def _in_other_spaces(
        self, failures: list[str], action: Callable[[MemoryStore], Awaitable[Any]]
    ) -> None:
        """Run `action` on the store of every other embedding space the deployment
        holds records in (`other_spaces`); what fails is added to `failures`."""
        if self.other_spaces is None:
            return
        try:
            async with self.other_spaces() as stores:
                for store in stores:
                    try:
                        await action(store)
                    except Exception as exc:
                        failures.append(_failure("store", exc, store.space.identity))
        except Exception as exc:
            failures.append(_failure("other embedding spaces", exc))

    async def _forget_fragments(
        self,
        store: MemoryStore,
        user_id: str,
        mine: Sequence[Event],
        domains: Sequence[str],
        failures: list[str],
    ) -> list[Invalidated]:
        """Delete the knowledge fragments derived from the user's data from
        `store`, in every known domain (a tagged fragment can outlive the events
        it came from)."""
        out: list[Invalidated] = []
        for domain in sorted({*domains, *(e.domain for e in mine)}):
            try:
                doomed: list[str] = []
                cursor = None
                while True:
                    page = await store.list(
                        domain, namespace=KNOWLEDGE_NAMESPACE, limit=200, cursor=cursor
                    )
                    doomed += [r.id for r in page.records if derived_from(r, user_id, mine)]
                    if page.next_cursor is None:
                        break
                    cursor = page.next_cursor
                for record_id in doomed:
                    if await store.delete(domain, record_id):
                        out.append(Invalidated("fragment", domain, record_id))
            except Exception as exc:
                failures.append(_failure("knowledge", exc, domain))
        return out

    async def _forget_graph(self, user_id: str, failures: list[str]) -> list[Invalidated]:
        """The user's triples and the checkpoints of their agent loops."""
        out: list[Invalidated] = []
        loops: set[str] = set()

        async def erase(triples: TripleStore) -> None:
            nonlocal loops
            loops = {t.loop for t in await triples.query(user_id, limit=MAX_LIMIT)}
            removed = await triples.delete_scope(user_id)
            if removed:
                out.append(Invalidated("triples", user_id, "*", removed))

        try:
            if self.triples is not None:
                await erase(self.triples)
            elif self.open_triples is not None:
                async with self.open_triples() as triples:
                    if triples is not None:
                        await erase(triples)
        except Exception as exc:
            failures.append(_failure("triples", exc))
        if self.cache is not None:
            try:
                removed = await forget_checkpoints(self.cache, user_id, loops)
                if removed:
                    out.append(Invalidated("checkpoints", user_id, "*", removed))
            except Exception as exc:
                failures.append(_failure("checkpoints", exc))
        return out

    async def forget_fact(self, user_id: str, fact_id: str) -> ForgetReceipt:
        require_id(user_id, "user_id")
        require_id(fact_id, "fact_id")
        return await self._forgets.run(self._forget_fact(user_id, fact_id))

    async def _forget_fact(self, user_id: str, fact_id: str) -> ForgetReceipt:
        failures: list[str] = []
        removed = 0
        try:
            removed = int(await self.store.delete(user_id, fact_id))
        except Exception as exc:
            failures.append(_failure("store", exc))
        await self._in_other_spaces(failures, lambda store: store.delete(user_id, fact_id))
        receipt = ForgetReceipt(user_id, None, facts=removed, failures=tuple(failures))
        await self._audit("forget_fact", receipt)
        return receipt

    async def facts(self, *, user_id: str, namespace: str | None = None) -> list[MemoryRecord]:
        """Every stored fact of the user (for inspection and tests)."""
        out: list[MemoryRecord] = []
        cursor = None
        while True:
            page = await self.store.list(user_id, namespace=namespace, limit=200, cursor=cursor)
            out.extend(page.records)
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

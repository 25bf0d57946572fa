"""Knowledge that outlives the event log: fragments extracted from a request's
result (after synthesis) and distilled from old events by the reflection job.

Fragments are `MemoryRecord`s owned by the domain, namespace `knowledge`, kind
`fragment` (from a result) or `reflection` (from the job). Their attributes say
what they were derived from (`request_id` and the request's `user_id`, or the
reflected `entity` and its events' `users`), so forgetting a user can find and
remove them. Recall ranks them by
a weighted sum of relevance (cosine), recency (exponential decay) and
importance; the weights are configurable.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import secrets
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import attrs
import numpy as np
from attrs import define

from agent_memory.domain.errors import DuplicateRecord, NotFound
from agent_memory.domain.json_answers import extract_json_array
from agent_memory.domain.records import MemoryRecord
from agent_memory.domain.validation import require_id, require_scope
from agent_memory.domain.views import KnowledgeItem
from agent_memory.ports.models import Clock, Embedder, LanguageModel
from agent_memory.ports.storage import Cache, MemoryStore, VersionedWrites
from agent_memory.services.background import BackgroundReports
from agent_memory.services.reports import StageReport
from agent_memory.services.user_scope import user_cache_scope

__all__ = [
    "DOMAINS_OWNER",
    "KNOWLEDGE_NAMESPACE",
    "MAX_PROVENANCE",
    "KnowledgeOptions",
    "KnowledgeService",
    "fragment_id",
    "knowledge_domains",
    "merged_provenance",
    "parse_fragments",
]

KNOWLEDGE_NAMESPACE = "knowledge"
#: Every domain that has held knowledge is registered here (a record per
#: domain, owner `DOMAINS_OWNER`, namespace `DOMAINS_NAMESPACE`, its content the
#: domain), so a forget finds fragments derived from a user's data in domains
#: the event log no longer lists (its events purged, or none recorded).
#: How many users (and request ids) a fragment names as its provenance; one that
#: more have derived is marked `provenance: "many"` and goes with any user's forget.
MAX_PROVENANCE = 64
DOMAINS_OWNER = "agent-memory.knowledge-domains"
DOMAINS_NAMESPACE = "registry"
DOMAIN_KIND = "knowledge.domain"
EXTRACT_SYSTEM_PROMPT = (
    "Extract reusable operational knowledge from this result: facts, fixes and pitfalls "
    "another agent could apply later. Answer with ONLY a JSON array: "
    '[{"content": "<one self-contained sentence>", "importance": 0.0-1.0}]. '
    "Return [] when there is nothing reusable."
)


@define
class KnowledgeOptions:
    relevance_weight: float = 0.6
    recency_weight: float = 0.2
    importance_weight: float = 0.2
    recency_half_life: timedelta = timedelta(days=14)
    candidates: int = 50
    max_fragments: int = 5
    model_timeout: float = 60.0
    max_tokens: int = 1024


def fragment_id(domain: str, kind: str, content: str, key: str = "") -> str:
    """A fragment's content address: the same (domain, kind, key, content) — content
    compared case- and whitespace-insensitively — always gets the same id."""
    normal = " ".join(content.split()).casefold()
    digest = hashlib.sha256(
        json.dumps([domain, kind, key, normal], ensure_ascii=False).encode("utf-8")
    )
    return f"{kind}-{digest.hexdigest()[:32]}"


def parse_fragments(text: str, limit: int) -> tuple[list[tuple[str, float]], str | None]:
    """(content, importance) pairs from a model answer; the error, if any."""
    array, _truncated, error = extract_json_array(text)
    if array is None:
        return [], error
    out: list[tuple[str, float]] = []
    for raw in array:
        if not isinstance(raw, dict):
            continue
        content = raw.get("content")
        importance = raw.get("importance", 0.5)
        if not isinstance(content, str) or not content.strip():
            continue
        if not isinstance(importance, int | float) or not 0 <= importance <= 1:
            importance = 0.5
        out.append((content.strip(), float(importance)))
    return out[:limit], None


#: How long an extraction's in-flight mark outlives its model timeout (the
#: embedding and the store after the answer); past it, the mark lapses and the
#: fragments are withdrawn as if the user had been forgotten.
_MARK_SLACK = timedelta(minutes=10)


class KnowledgeService:
    """Stores and recalls a domain's knowledge fragments."""

    def __init__(
        self,
        *,
        store: MemoryStore,
        embedder: Embedder,
        clock: Clock,
        llm: LanguageModel | None = None,
        options: KnowledgeOptions | None = None,
        cache: Cache | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.clock = clock
        self.llm = llm
        self.options = options or KnowledgeOptions()
        # where an extraction for a user marks itself in flight (`_extract`)
        self.cache = cache
        self._background = BackgroundReports()

    async def store_fragments(
        self,
        domain: str,
        fragments: Sequence[tuple[str, float]],
        *,
        kind: str,
        attributes: dict[str, Any] | None = None,
        key: str = "",
    ) -> int:
        """Embed and store fragments under the domain; the count stored.

        Ids are content-addressed (`fragment_id`): storing the same content again
        (same domain, kind and `key`) refreshes the stored record instead of
        adding a copy, so a repeated pass never duplicates knowledge."""
        written = await self._store_fragments(
            domain, fragments, kind=kind, attributes=attributes, key=key
        )
        return len(written)

    async def _store_fragments(
        self,
        domain: str,
        fragments: Sequence[tuple[str, float]],
        *,
        kind: str,
        attributes: dict[str, Any] | None = None,
        key: str = "",
    ) -> list[tuple[MemoryRecord, MemoryRecord | None]]:
        """`store_fragments`: each record written, with the version it replaced
        (None when it added the record), so an extraction can withdraw exactly
        what it wrote (`_withdraw_if_forgotten`)."""
        unique: dict[str, tuple[str, float]] = {}
        for content, importance in fragments:
            unique.setdefault(fragment_id(domain, kind, content, key), (content, importance))
        if not unique:
            return []
        # registered before the fragments are stored: a forget reads the
        # registry after it has deleted the user's cache scope (see `_extract`)
        await self._register(domain)
        ids = list(unique)
        vectors = await self.embedder.embed([unique[i][0] for i in ids])
        now = self.clock.now()
        written: list[tuple[MemoryRecord, MemoryRecord | None]] = []
        fresh: list[MemoryRecord] = []
        for n, record_id in enumerate(ids):
            content, importance = unique[record_id]
            record = MemoryRecord(
                id=record_id,
                owner=domain,
                namespace=KNOWLEDGE_NAMESPACE,
                kind=kind,
                content=content,
                vector=vectors[n],
                created_at=now,
                updated_at=now,
                importance=importance,
                attributes=dict(attributes or {}),
            )
            stored = await self.store.get(domain, record_id)
            if stored is None:
                fresh.append(record)
            else:
                record = _refreshed(record, stored)
                await self.store.update(record)
                written.append((record, stored))
        if fresh:
            try:
                await self.store.add(fresh)
                written += [(record, None) for record in fresh]
            except DuplicateRecord:  # a concurrent writer stored some of them first
                for record in fresh:
                    stored = await self.store.get(domain, record.id)
                    if stored is None:
                        await self.store.add([record])
                    else:
                        record = _refreshed(record, stored)
                        await self.store.update(record)
                    written.append((record, stored))
        return written

    async def _register(self, domain: str) -> None:
        """Record `domain` in the knowledge-domain registry: one add, a record
        already there left as it is. Not remembered in process: the registry can
        be deleted under a running service (a forget of its owner id, or by
        hand), and a domain missing from it is one whose fragments a forget
        might not find."""
        now = self.clock.now()
        record = MemoryRecord(
            id="domain-" + hashlib.sha256(domain.encode("utf-8")).hexdigest()[:32],
            owner=DOMAINS_OWNER,
            namespace=DOMAINS_NAMESPACE,
            kind=DOMAIN_KIND,
            content=domain,
            vector=np.zeros(self.store.space.dimension, dtype=np.float32),
            created_at=now,
            updated_at=now,
        )
        with contextlib.suppress(DuplicateRecord):  # registered already
            await self.store.add([record])

    async def extract(
        self,
        *,
        domain: str,
        request_id: str,
        result: str,
        wait: bool = False,
        user_id: str | None = None,
    ) -> StageReport:
        """Extract fragments from a request's result (asynchronous by default).
        With the request's user id the fragments are tagged with it, so
        forgetting that user removes them."""
        require_scope(domain, "domain")
        if user_id is not None:
            require_id(user_id, "user_id")
        report = StageReport("knowledge-extraction")
        if self.llm is None:
            report.details["skipped"] = "no language model configured"
            return report
        if wait:
            return await self._extract(domain, request_id, result, report, user_id)
        self._background.spawn(self._extract(domain, request_id, result, report, user_id))
        report.details["scheduled"] = True
        return report

    async def drain(self) -> list[StageReport]:
        """Wait for scheduled extractions; every report finished since the last drain."""
        return await self._background.drain()

    async def _extract(
        self,
        domain: str,
        request_id: str,
        result: str,
        report: StageReport,
        user_id: str | None = None,
    ) -> StageReport:
        assert self.llm is not None
        marker = await self._mark(user_id, request_id, report)
        try:
            answer = await self.llm.complete(
                f"Result of request {request_id}:\n{result}",
                max_tokens=self.options.max_tokens,
                timeout=self.options.model_timeout,
                system=EXTRACT_SYSTEM_PROMPT,
            )
            fragments, error = parse_fragments(answer, self.options.max_fragments)
            if error is not None:
                report.details["parse_error"] = error
            attributes: dict[str, Any] = {"request_id": request_id}
            if user_id is not None:
                attributes["user_id"] = user_id
            written = await self._store_fragments(
                domain, fragments, kind="fragment", attributes=attributes
            )
            report.details["stored"] = len(written)
            if marker is not None:
                await self._withdraw_if_forgotten(written, marker, report)
        except Exception as exc:
            report.fail("extract", exc)
        return report

    async def _mark(
        self, user_id: str | None, request_id: str, report: StageReport
    ) -> tuple[str, str] | None:
        """Mark an extraction for `user_id` in flight: an entry in the user's
        cache scope, which `UserMemory.forget` deletes before it deletes the
        fragments derived from the user's data. (scope, key), or None without a
        user or a cache (or when the mark cannot be written: reported)."""
        if user_id is None or self.cache is None:
            return None
        scope = user_cache_scope(user_id)
        key = f"knowledge-extraction:{secrets.token_hex(8)}"
        ttl = timedelta(seconds=self.options.model_timeout) + _MARK_SLACK
        try:
            await self.cache.put(scope, key, request_id.encode("utf-8"), ttl=ttl)
        except Exception as exc:
            report.fail("mark-in-flight", exc)
            return None
        return scope, key

    async def _withdraw_if_forgotten(
        self,
        written: Sequence[tuple[MemoryRecord, MemoryRecord | None]],
        marker: tuple[str, str],
        report: StageReport,
    ) -> None:
        """Withdraw the fragments just stored when the user was forgotten while
        they were extracted. A forget deletes the user's cache scope, then the
        fragments derived from the user: either its cache deletion came before
        this read (the mark is gone: the fragments are withdrawn here) or after
        it, and then its fragment deletion comes after the store too. A mark
        that cannot be read withdraws them (as if gone).

        Only what this extraction wrote is withdrawn: fragment ids are content
        addresses, so another request may hold the same fragment (`_withdraw`)."""
        assert self.cache is not None
        scope, key = marker
        try:
            present = await self.cache.get(scope, key) is not None
        except Exception as exc:
            report.fail("read-mark", exc)
            present = False
        if present:
            try:
                await self.cache.delete(scope, key)
            except Exception as exc:  # it lapses with its TTL
                report.fail("clear-mark", exc)
            return
        withdrawn = 0
        for ours, replaced in written:
            withdrawn += await self._withdraw(ours, replaced)
        report.details["withdrawn"] = withdrawn

    async def _withdraw(self, ours: MemoryRecord, replaced: MemoryRecord | None) -> int:
        """Undo one write of a withdrawn extraction (1 when undone). A version
        another request wrote since (its own tags) is theirs and stays. Ours is
        deleted, or, when it replaced another request's version (the same
        fragment, derived from another user's data), that version is put back;
        one derived from this same user is not (the user was forgotten). On a
        store with `VersionedWrites` both are conditional on our version still
        being the stored one."""
        stored = await self.store.get(ours.owner, ours.id)
        if stored is None:
            return 0
        versioned = self.store if isinstance(self.store, VersionedWrites) else None
        user = ours.attributes.get("user_id")
        if not _same_write(stored, ours):
            # another request's version since: it stays, without the provenance it
            # merged from ours (this user was forgotten before we wrote)
            kept = _without_provenance(stored.attributes, ours.attributes)
            if kept == stored.attributes:
                return 0
            just_after = stored.updated_at + timedelta(microseconds=1)
            cleaned = attrs.evolve(stored, attributes=kept, updated_at=just_after)
            if versioned is not None:
                return int(await versioned.update_if_older(cleaned))
            with contextlib.suppress(NotFound):
                await self.store.update(cleaned)
                return 1
            return 0
        if replaced is not None and replaced.attributes.get("user_id") != user:
            if versioned is not None:
                # atomically over our version only: a version written since is newer
                just_after = ours.updated_at + timedelta(microseconds=1)
                back = attrs.evolve(replaced, updated_at=just_after)
                return int(await versioned.update_if_older(back))
            with contextlib.suppress(NotFound):  # deleted since (a forget): stays deleted
                await self.store.update(replaced)
                return 1
            return 0
        if versioned is not None:
            return int(await versioned.delete_if_unchanged(ours.owner, ours.id, ours.updated_at))
        return int(await self.store.delete(ours.owner, ours.id))

    async def recall(self, domain: str, query: str, *, limit: int = 5) -> list[KnowledgeItem]:
        """Fragments ranked by weighted relevance, recency and importance."""
        require_scope(domain, "domain")
        (vector,) = await self.embedder.embed([query])
        hits = await self.store.search(
            domain, vector, limit=self.options.candidates, namespace=KNOWLEDGE_NAMESPACE
        )
        now = self.clock.now()
        o = self.options
        half_life = o.recency_half_life.total_seconds()
        scored = []
        for hit in hits:
            age = max((now - hit.record.updated_at).total_seconds(), 0.0)
            recency = math.exp(-math.log(2) * age / half_life) if half_life > 0 else 1.0
            score = (
                o.relevance_weight * hit.score
                + o.recency_weight * recency
                + o.importance_weight * hit.record.importance
            )
            scored.append((score, hit.record))
        scored.sort(key=lambda pair: (-pair[0], pair[1].id))
        return [
            KnowledgeItem(id=r.id, content=r.content, score=round(s, 6)) for s, r in scored[:limit]
        ]


def _refreshed(record: MemoryRecord, stored: MemoryRecord) -> MemoryRecord:
    """`record` written over `stored`, the same fragment (a content address):
    created when `stored` was, and derived from what both were derived from
    (`merged_provenance`), so a forget of any of their users finds it."""
    return attrs.evolve(
        record,
        created_at=stored.created_at,
        attributes=merged_provenance(stored.attributes, record.attributes),
    )


def _names(attributes: dict[str, Any], one: str, many: str) -> set[str]:
    out = {v for v in attributes.get(many, ()) or () if isinstance(v, str)}
    value = attributes.get(one)
    if isinstance(value, str):
        out.add(value)
    return out


def merged_provenance(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The attributes `new` with the provenance of `old` kept: every user
    (`user_id`, `users`) and request (`request_id`, `request_ids`) either names.
    `new`'s own `user_id` and `request_id` stay as they are (the latest writer's).
    Past `MAX_PROVENANCE` names of either kind the lists are cut and the fragment
    is marked `provenance: "many"`: a forget of any user then deletes it (it may
    have been derived from anyone's data)."""
    out = dict(new)
    many = old.get("provenance") == "many" or new.get("provenance") == "many"
    for one, plural in (("user_id", "users"), ("request_id", "request_ids")):
        names = _names(old, one, plural) | _names(new, one, plural)
        if len(names) > MAX_PROVENANCE:
            many = True
        if names - _names(new, one, ""):
            out[plural] = sorted(names)[:MAX_PROVENANCE]
    if many:
        out["provenance"] = "many"
    return out


def _without_provenance(attributes: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """`attributes` without the user and request of `ours` in their `users` and
    `request_ids` (a list left naming only the record's own tag is dropped)."""
    out = dict(attributes)
    for one, plural in (("user_id", "users"), ("request_id", "request_ids")):
        listed = out.get(plural)
        gone = ours.get(one)
        if not isinstance(listed, list) or gone not in listed:
            continue
        names = {v for v in listed if v != gone}
        if names - _names(out, one, ""):
            out[plural] = sorted(names)
        else:
            del out[plural]
    return out


def _same_write(stored: MemoryRecord, ours: MemoryRecord) -> bool:
    """Whether `stored` is the version `ours` wrote: same time, tags and text (a
    request storing the same fragment in the same microsecond has other tags)."""
    return (
        stored.updated_at == ours.updated_at
        and stored.attributes == ours.attributes
        and stored.content == ours.content
    )


async def knowledge_domains(store: MemoryStore) -> list[str]:
    """Every domain the knowledge-domain registry of `store` lists, sorted."""
    out: set[str] = set()
    cursor = None
    while True:
        page = await store.list(
            DOMAINS_OWNER,
            namespace=DOMAINS_NAMESPACE,
            kinds=[DOMAIN_KIND],
            limit=200,
            cursor=cursor,
        )
        out.update(r.content for r in page.records)
        if page.next_cursor is None:
            return sorted(out)
        cursor = page.next_cursor

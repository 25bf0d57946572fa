"""Graph-backed memory for an agent loop: fact extraction, hydration, checkpoints.

- **Extraction**: the `LanguageModel` turns a loop's working context into
  `(subject, predicate, object)` triples (answer capped at `max_tokens`).
  Before a compaction it always runs (`force=True`): the context is about to
  be lost. Between compactions it runs every `trigger_iteration_interval`
  iterations or once context utilisation reaches `trigger_context_threshold`.
  A bad answer or a bad item is counted and skipped, never raised.
- **Hydration**: `pre_task` renders the triples relevant to a task description
  (past decisions and files, each section switchable, then other facts) within
  `max_context_tokens`; `post_compaction` renders the loop's last checkpoint
  (unless `reconstruct_from_checkpoint` is off) plus its graph within
  `max_recovery_tokens`. The rendering rules live in
  `agent_memory.domain.graph_context`; the text's token count (tokenizer, or
  `estimate_tokens`) never exceeds the budget.
- **Checkpoints**: per loop, on the `Cache` port given (the processor passes a
  JetStream key-value bucket when `checkpoint.storage_bucket` names one), kept
  `retention_days`.

The settings carry the configuration document's names (`extraction.llm_assisted`,
`hydration.pre_task`, `hydration.post_compaction`, `checkpoint`); the document
itself is read by the processor entry point. Everything is fail-open: a failing
port or model is recorded on the result (`failures`) and logged; the loop being
served never sees an exception.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta

from attrs import field, frozen, validators

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.graph_context import (
    ContextLine,
    is_decision,
    is_file,
    plain,
    render_graph_context,
    section_of,
    task_terms,
    triple_line,
)
from agent_memory.domain.json_answers import extract_json_array
from agent_memory.domain.triples import (
    Checkpoint,
    ExtractionOutcome,
    Hydration,
    Triple,
    distinct,
    order_triples,
)
from agent_memory.domain.validation import (
    MAX_ID_BYTES,
    attrs_validator,
    require_model_name,
    require_positive,
    require_positive_number,
    require_scope,
    require_text,
    require_unit_interval,
)
from agent_memory.domain.views import (
    budget_bytes_for_tokens,
    count_tokens,
    encode_text,
    shorten_text,
)
from agent_memory.ports.models import Clock, LanguageModel, Tokenizer
from agent_memory.ports.storage import Cache, TripleStore
from agent_memory.services.reports import StageReport

__all__ = [
    "CHECKPOINT_SCOPE",
    "EXTRACTION_SYSTEM_PROMPT",
    "CheckpointSettings",
    "ExtractionSettings",
    "GraphMemory",
    "GraphSettings",
    "PostCompactionSettings",
    "PreTaskSettings",
    "checkpoint_key",
    "forget_checkpoints",
    "is_decision",
    "is_file",
]

_log = logging.getLogger(__name__)

CHECKPOINT_SCOPE = "agent-memory/graph-checkpoints"

EXTRACTION_SYSTEM_PROMPT = (
    "You extract durable facts from an AI agent's working context as knowledge-graph "
    "triples. Answer with ONLY a JSON array of objects "
    '[{"subject": "...", "predicate": "...", "object": "..."}]. Use short canonical '
    "names for subjects and objects and snake_case predicates. Record decisions with the "
    'predicate "decided" and files the agent read or changed with "read" or "modified" '
    "(object: the file path). No commentary; [] when there is nothing durable."
)


# -- settings -------------------------------------------------------------------
#
# Every check is one of the shared helpers of `domain.validation`, made an attrs
# validator by `attrs_validator` (the attribute's name is the field).


def _fraction(value: object, name: str) -> float:
    """A number in (0, 1]: `require_unit_interval`, without 0."""
    fraction = require_unit_interval(value, name)
    if fraction == 0:
        raise InvalidInput(name, f"a number in (0, 1] is required, got {value!r}")
    return fraction


_BOOL = validators.instance_of(bool)
_POSITIVE_INT = attrs_validator(require_positive)
_POSITIVE = attrs_validator(require_positive_number)
_BUCKET = re.compile(r"^[A-Za-z0-9_-]+$")


def _bucket(value: object, name: str) -> None:
    if value is not None and not (isinstance(value, str) and _BUCKET.match(value)):
        raise InvalidInput(name, f"a bucket name of [A-Za-z0-9_-] is required, got {value!r}")


def _model(value: object, name: str) -> None:
    if value is not None:
        require_model_name(value, name)


@frozen
class ExtractionSettings:
    """`extraction.llm_assisted.*` (`model`: the model name extraction asks for)."""

    enabled: bool = field(default=True, validator=_BOOL)
    model: str | None = field(default=None, validator=attrs_validator(_model))
    trigger_iteration_interval: int = field(default=5, validator=_POSITIVE_INT)
    trigger_context_threshold: float = field(default=0.8, validator=attrs_validator(_fraction))
    max_tokens: int = field(default=1000, validator=_POSITIVE_INT)
    timeout_seconds: float = field(default=30.0, validator=_POSITIVE)
    max_input_tokens: int = field(default=6000, validator=_POSITIVE_INT)
    max_triples: int = field(default=50, validator=_POSITIVE_INT)


@frozen
class PreTaskSettings:
    """`hydration.pre_task.*`."""

    enabled: bool = field(default=True, validator=_BOOL)
    max_context_tokens: int = field(default=2000, validator=_POSITIVE_INT)
    include_decisions: bool = field(default=True, validator=_BOOL)
    include_files: bool = field(default=True, validator=_BOOL)
    max_triples: int = field(default=40, validator=_POSITIVE_INT)
    hops: int = field(default=1, validator=_POSITIVE_INT)
    scan_limit: int = field(default=500, validator=_POSITIVE_INT)


@frozen
class PostCompactionSettings:
    """`hydration.post_compaction.*`."""

    enabled: bool = field(default=True, validator=_BOOL)
    reconstruct_from_checkpoint: bool = field(default=True, validator=_BOOL)
    max_recovery_tokens: int = field(default=1500, validator=_POSITIVE_INT)
    max_triples: int = field(default=80, validator=_POSITIVE_INT)


@frozen
class CheckpointSettings:
    """`checkpoint.*`. `storage_bucket`: the JetStream key-value bucket the
    processor keeps checkpoints in (None: the `Cache` port)."""

    enabled: bool = field(default=True, validator=_BOOL)
    storage_bucket: str | None = field(default=None, validator=attrs_validator(_bucket))
    retention_days: float = field(default=7.0, validator=_POSITIVE)

    @property
    def retention(self) -> timedelta:
        return timedelta(days=self.retention_days)


@frozen
class GraphSettings:
    """Everything graph memory is configured by."""

    extraction: ExtractionSettings = ExtractionSettings()
    pre_task: PreTaskSettings = PreTaskSettings()
    post_compaction: PostCompactionSettings = PostCompactionSettings()
    checkpoint: CheckpointSettings = CheckpointSettings()


# -- the service ----------------------------------------------------------------


def _owner_prefix(owner: str) -> str:
    return hashlib.sha256(json.dumps(["owner", owner]).encode()).hexdigest()[:32] + "/"


def _legacy_checkpoint_key(owner: str, loop: str) -> str:
    return hashlib.sha256(json.dumps([owner, loop]).encode()).hexdigest()


def checkpoint_key(owner: str, loop: str) -> str:
    """The cache-key base of a loop's checkpoints (`<base>/<id>`, or `<base>/~<digest
    of the id>` for a long id, and `<base>/latest`).
    It starts with a digest of the owner alone, so an owner's checkpoints can be
    removed by prefix (`forget_checkpoints`)."""
    return _owner_prefix(owner) + _legacy_checkpoint_key(owner, loop)


def _entry_key(base: str, checkpoint_id: str) -> str:
    """The cache key of one checkpoint's own copy: `<base>/<id>`, unless that is
    over `MAX_ID_BYTES` (an event id may take all of them: the processor makes
    it the checkpoint's id), would be the `latest` entry, or the id starts with
    `~`; then `<base>/~<sha256 of the id>` (no verbatim id starts with `~`, so
    the two forms never collide)."""
    key = f"{base}/{checkpoint_id}"
    if (
        checkpoint_id == "latest"
        or checkpoint_id.startswith("~")
        or len(key.encode("utf-8")) > MAX_ID_BYTES
    ):
        return f"{base}/~" + hashlib.sha256(checkpoint_id.encode("utf-8")).hexdigest()
    return key


async def forget_checkpoints(cache: Cache, owner: str, loops: Sequence[str] | set[str]) -> int:
    """Delete every checkpoint of the owner's loops; the count. `loops` names
    loops whose checkpoints may predate the owner-prefixed keys."""
    require_scope(owner, "owner")
    removed = await cache.delete_prefix(CHECKPOINT_SCOPE, _owner_prefix(owner))
    for loop in sorted(loops):
        removed += await cache.delete_prefix(
            CHECKPOINT_SCOPE, _legacy_checkpoint_key(owner, loop) + "/"
        )
    return removed


def is_checkpoint_of(key: str, owner: str, loops: Collection[str]) -> bool:
    """Whether the checkpoint entry `key` (in `CHECKPOINT_SCOPE`) is one
    `forget_checkpoints(cache, owner, loops)` deletes."""
    return key.startswith(_owner_prefix(owner)) or any(
        key.startswith(_legacy_checkpoint_key(owner, loop) + "/") for loop in loops
    )


class GraphMemory:
    """Extraction, hydration and checkpoints for agent loops (see module doc)."""

    def __init__(
        self,
        triples: TripleStore,
        cache: Cache,
        model: LanguageModel | None,
        *,
        clock: Clock,
        settings: GraphSettings | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        self._triples = triples
        self._cache = cache
        self._model = model
        self._clock = clock
        self._settings = settings if settings is not None else GraphSettings()
        self._tokenizer = tokenizer

    @property
    def settings(self) -> GraphSettings:
        return self._settings

    @property
    def triples(self) -> TripleStore:
        return self._triples

    def with_cache(self, cache: Cache) -> GraphMemory:
        """The same graph memory keeping its checkpoints on `cache` instead."""
        return GraphMemory(
            self._triples,
            cache,
            self._model,
            clock=self._clock,
            settings=self._settings,
            tokenizer=self._tokenizer,
        )

    async def mentions(self, owner: str, loop: str, nodes: Sequence[str]) -> bool:
        """Whether the loop's graph has a triple whose subject or object is one of
        `nodes` (reactive hydration: did a changed entity matter to this loop?)."""
        require_scope(owner, "owner")
        require_scope(loop, "loop")
        for node in nodes:
            if not node.strip() or "\x00" in node:
                continue
            for found in (
                await self._triples.query(owner, loop=loop, subject=node, limit=1),
                await self._triples.query(owner, loop=loop, object=node, limit=1),
            ):
                if found:
                    return True
        return False

    # -- extraction ------------------------------------------------------------

    def should_extract(self, iteration: int | None, utilization: float | None) -> bool:
        """Every `trigger_iteration_interval` iterations, or at `trigger_context_threshold`
        (the triggers between compactions; a compaction extracts with `force=True`).

        With neither signal known (both None), extraction runs: the caller asked.
        """
        ex = self._settings.extraction
        if not ex.enabled:
            return False
        if iteration is None and utilization is None:
            return True
        by_iteration = (
            iteration is not None
            and iteration > 0
            and iteration % ex.trigger_iteration_interval == 0
        )
        by_utilization = utilization is not None and utilization >= ex.trigger_context_threshold
        return by_iteration or by_utilization

    async def extract(
        self,
        owner: str,
        loop: str,
        content: str,
        *,
        source: str = "",
        iteration: int | None = None,
        utilization: float | None = None,
        force: bool = False,
    ) -> ExtractionOutcome:
        """Turn `content` into triples of `(owner, loop)` and store the new ones."""
        require_scope(owner, "owner")
        require_scope(loop, "loop")
        require_text(content, "content")
        if not (force and self._settings.extraction.enabled) and not self.should_extract(
            iteration, utilization
        ):
            return ExtractionOutcome(triggered=False)
        report = StageReport("graph.extract")
        if self._model is None:
            return ExtractionOutcome(
                triggered=True, error="no language model is configured", no_model=True
            )
        if not content.strip():
            return ExtractionOutcome(triggered=True)
        ex = self._settings.extraction
        body = shorten_text(content, budget_bytes_for_tokens(ex.max_input_tokens))
        # each line as the inside of a JSON string (`encode_text`): line by line,
        # so the model still reads lines, but no text can close or forge the
        # frame (`</context>`, or a look-alike that NFKC turns into one)
        body = "\n".join(encode_text(line)[1:-1] for line in body.split("\n"))
        prompt = (
            f"Working context of agent loop {encode_text(loop)}:\n<context>\n{body}\n</context>"
        )
        try:
            answer = await self._model.complete(
                prompt,
                max_tokens=ex.max_tokens,
                timeout=ex.timeout_seconds,
                system=EXTRACTION_SYSTEM_PROMPT,
            )
        except Exception as exc:
            report.fail("model", exc)
            return ExtractionOutcome(
                triggered=True,
                error=f"{type(exc).__name__}: {exc}",
                failures=_failures(report),
                model_failed=True,
            )
        parsed, bad, error = self._parse(owner, loop, answer, source)
        parsed = distinct(parsed)[: ex.max_triples]
        if error is not None:
            _log.warning("graph extraction for loop %r: unusable answer: %s", loop, error)
        if bad:
            _log.warning("graph extraction for loop %r: %d bad item(s) skipped", loop, bad)
        added = 0
        if parsed:
            try:
                added = await self._triples.add(parsed)
            except Exception as exc:
                report.fail("triples.add", exc)
        return ExtractionOutcome(
            triggered=True,
            triples=tuple(parsed),
            added=added,
            bad_items=bad,
            error=error,
            failures=_failures(report),
        )

    def _parse(
        self, owner: str, loop: str, answer: str, source: str
    ) -> tuple[list[Triple], int, str | None]:
        items, truncated, error = extract_json_array(answer)
        if items is None:
            return [], 0, error or "no JSON array in the answer"
        now = self._clock.now()
        out: list[Triple] = []
        bad = 1 if truncated else 0
        for item in items:
            if not isinstance(item, Mapping):
                bad += 1
                continue
            s, p, o = item.get("subject"), item.get("predicate"), item.get("object")
            if not (isinstance(s, str) and isinstance(p, str) and isinstance(o, str)):
                bad += 1
                continue
            try:
                out.append(
                    Triple(
                        owner=owner,
                        loop=loop,
                        subject=s.strip(),
                        predicate=p.strip(),
                        object=o.strip(),
                        created_at=now,
                        source=source[:500],
                    )
                )
            except InvalidInput:
                bad += 1
        return out, bad, None

    # -- checkpoints -----------------------------------------------------------

    def _checkpoint_key(self, owner: str, loop: str) -> str:
        return checkpoint_key(owner, loop)

    async def checkpoint(
        self,
        owner: str,
        loop: str,
        *,
        summary: str = "",
        iteration: int | None = None,
        source: str = "",
        decisions: Sequence[str] | None = None,
        files: Sequence[str] | None = None,
    ) -> tuple[Checkpoint | None, tuple[str, ...]]:
        """Save the loop's checkpoint (decisions and files from its graph unless
        given); (the checkpoint or None when disabled/failed, failures)."""
        require_scope(owner, "owner")
        require_scope(loop, "loop")
        if not self._settings.checkpoint.enabled:
            return None, ()
        report = StageReport("graph.checkpoint")
        loop_triples: list[Triple] = []
        try:
            loop_triples = await self._triples.query(owner, loop=loop, limit=500)
        except Exception as exc:
            report.fail("triples.query", exc)
        if decisions is None:
            decisions = [plain(t) for t in loop_triples if is_decision(t)][:50]
        if files is None:
            files = list(dict.fromkeys(t.object for t in loop_triples if is_file(t)))[:100]
        cp = Checkpoint(
            owner=owner,
            loop=loop,
            id=source or uuid.uuid4().hex,
            created_at=self._clock.now(),
            iteration=iteration,
            summary=summary,
            decisions=tuple(decisions),
            files=tuple(files),
            triple_count=len(loop_triples),
            source=source,
        )
        body = json.dumps(cp.as_json()).encode()
        base = self._checkpoint_key(owner, loop)
        ttl = self._settings.checkpoint.retention
        try:
            await self._cache.put(CHECKPOINT_SCOPE, _entry_key(base, cp.id), body, ttl)
            if not await self._newer_latest(base, cp, report):
                await self._cache.put(CHECKPOINT_SCOPE, f"{base}/latest", body, ttl)
        except Exception as exc:
            report.fail("cache.put", exc)
            return None, _failures(report)
        if loop_triples and await self._forgotten_meanwhile(loop_triples[0], report):
            # a forget of the owner ran between the triples' read and these
            # writes: its checkpoint delete came first, so withdraw them here
            # (`latest` only while it is still this one: one written since is
            # another writer's; the cache has no conditional delete, so a write
            # landing between this read and the delete is the window left)
            try:
                await self._cache.delete(CHECKPOINT_SCOPE, _entry_key(base, cp.id))
                if await self._cache.get(CHECKPOINT_SCOPE, f"{base}/latest") == body:
                    await self._cache.delete(CHECKPOINT_SCOPE, f"{base}/latest")
            except Exception as exc:
                report.fail("cache.delete", exc)
            return None, _failures(report)
        return cp, _failures(report)

    async def _newer_latest(self, base: str, cp: Checkpoint, report: StageReport) -> bool:
        """Whether the loop's `latest` is already a checkpoint created after `cp`:
        another writer's (one that built its checkpoint later but wrote first, or
        a processor whose clock is ahead). Then `cp` keeps only its own copy, so
        `latest` never moves back to an older checkpoint. The cache has no
        conditional put: a write landing between this read and ours is the
        window left. An unreadable `latest` is replaced; a failing read is
        reported and `latest` written."""
        try:
            raw = await self._cache.get(CHECKPOINT_SCOPE, f"{base}/latest")
        except Exception as exc:
            report.fail("cache.get", exc)
            return False
        if raw is None:
            return False
        try:
            current = Checkpoint.from_json(json.loads(raw))
        except (InvalidInput, ValueError, TypeError, AttributeError):
            return False
        return current.created_at > cp.created_at

    async def _forgotten_meanwhile(self, read: Triple, report: StageReport) -> bool:
        """Whether `read`, one of the loop's triples read before the checkpoint
        was written, is gone now (or was stored again since, with another
        `created_at` or `source`): a forget of the owner (`delete_scope`) erases
        every triple the checkpoint was built from at once, and a fact stored
        after it (a concurrent extraction) is not one of them, so "does the loop
        still have a triple" cannot tell. A read that fails keeps the checkpoint
        (the loop's resume point) and is reported: a transient error must not
        drop it."""
        try:
            now = await self._triples.query(
                read.owner,
                loop=read.loop,
                subject=read.subject,
                predicate=read.predicate,
                object=read.object,
                limit=1,
            )
        except Exception as exc:
            report.fail("triples.recheck", exc)
            return False
        return now != [read]

    async def last_checkpoint(self, owner: str, loop: str) -> Checkpoint | None:
        """The loop's latest checkpoint within retention (raises on backend errors)."""
        require_scope(owner, "owner")
        require_scope(loop, "loop")
        raw = await self._cache.get(CHECKPOINT_SCOPE, f"{self._checkpoint_key(owner, loop)}/latest")
        if raw is None:  # written before keys carried the owner prefix
            raw = await self._cache.get(
                CHECKPOINT_SCOPE, f"{_legacy_checkpoint_key(owner, loop)}/latest"
            )
        if raw is None:
            return None
        return Checkpoint.from_json(json.loads(raw))

    # -- hydration -------------------------------------------------------------

    async def hydrate_pre_task(self, owner: str, loop: str, task: str) -> Hydration:
        """Triples relevant to `task` (facts, past decisions, files), within
        `max_context_tokens`. Spans every loop of the owner: past loops' knowledge."""
        require_scope(owner, "owner")
        require_scope(loop, "loop")
        require_text(task, "task")
        pre = self._settings.pre_task
        report = StageReport("graph.hydrate.pre_task")
        if not pre.enabled:
            return _empty(owner, loop, "pre_task", pre.max_context_tokens)
        candidates: list[Triple] = []
        try:
            candidates = await self._triples.query(owner, limit=pre.scan_limit)
        except Exception as exc:
            report.fail("triples.query", exc)
        terms = task_terms(task)

        def score(t: Triple) -> int:
            words = task_terms(f"{t.subject} {t.predicate} {t.object}")
            return len(terms & words)

        scored = [(score(t), i, t) for i, t in enumerate(candidates)]
        relevant = [t for s, _, t in sorted(scored, key=lambda x: (-x[0], x[1])) if s > 0]
        extra: list[Triple] = []
        for seed in relevant[:3]:
            for node in (seed.subject, seed.object):
                try:
                    steps = await self._triples.neighbours(owner, node, hops=pre.hops, limit=20)
                except Exception as exc:
                    report.fail("triples.neighbours", exc)
                    break
                extra.extend(step.triple for step in steps)
        others = [t for s, _, t in scored if s == 0]
        ranked = [
            t
            for t in distinct(
                [t for t in relevant if is_decision(t) or is_file(t)]
                + [t for t in relevant if not (is_decision(t) or is_file(t))]
                + extra
                + [t for t in others if is_decision(t)]
                + [t for t in others if is_file(t)]
            )
            if _included(pre, section_of(t))
        ][: pre.max_triples]
        items = [ContextLine(section_of(t), triple_line(t), t) for t in ranked]
        text, tokens, used, omitted = render_graph_context(
            "pre_task",
            loop,
            items,
            pre.max_context_tokens,
            self._tokenizer,
            ("decisions", "files", "facts"),
        )
        return Hydration(
            owner=owner,
            loop=loop,
            kind="pre_task",
            text=text,
            tokens=tokens,
            budget_tokens=pre.max_context_tokens,
            triples_used=used,
            omitted=omitted,
            failures=_failures(report),
        )

    async def hydrate_post_compaction(self, owner: str, loop: str) -> Hydration:
        """The loop's last checkpoint plus its graph, within `max_recovery_tokens`."""
        require_scope(owner, "owner")
        require_scope(loop, "loop")
        post = self._settings.post_compaction
        report = StageReport("graph.hydrate.post_compaction")
        if not post.enabled:
            return _empty(owner, loop, "post_compaction", post.max_recovery_tokens)
        cp: Checkpoint | None = None
        if post.reconstruct_from_checkpoint:
            try:
                cp = await self.last_checkpoint(owner, loop)
            except Exception as exc:
                report.fail("checkpoint.get", exc)
        loop_triples: list[Triple] = []
        try:
            loop_triples = await self._triples.query(owner, loop=loop, limit=post.max_triples)
        except Exception as exc:
            report.fail("triples.query", exc)
        items: list[ContextLine] = []
        if cp is not None:
            if cp.summary.strip():
                half = max(post.max_recovery_tokens // 2, 1)
                line = _summary_line(cp.summary, half, self._tokenizer)
                items.append(ContextLine("checkpoint", line))
            items.extend(
                ContextLine("checkpoint", f"decision: {encode_text(d)}") for d in cp.decisions
            )
            items.extend(ContextLine("checkpoint", f"file: {encode_text(f)}") for f in cp.files)
        ranked = [t for t in loop_triples if is_decision(t)] + [
            t for t in loop_triples if not is_decision(t)
        ]
        items.extend(
            ContextLine("graph", triple_line(t), t) for t in distinct(order_triples(ranked))
        )
        text, tokens, used, omitted = render_graph_context(
            "post_compaction",
            loop,
            items,
            post.max_recovery_tokens,
            self._tokenizer,
            ("checkpoint", "graph"),
        )
        return Hydration(
            owner=owner,
            loop=loop,
            kind="post_compaction",
            text=text,
            tokens=tokens,
            budget_tokens=post.max_recovery_tokens,
            triples_used=used,
            omitted=omitted,
            checkpoint_id=None if cp is None else cp.id,
            failures=_failures(report),
        )


def _summary_line(summary: str, max_tokens: int, tokenizer: Tokenizer | None) -> str:
    """`summary: "<text>"`, the text shortened so that the line counts at most
    `max_tokens` (by `tokenizer`, else `estimate_tokens`). Tokens are not 4 bytes
    each (CJK, emoji, a byte-level tokenizer): starting from that allowance, it
    narrows in proportion to the overshoot until the line fits (or nothing of
    the text is left)."""
    allowance = budget_bytes_for_tokens(max_tokens)
    while True:
        line = f"summary: {encode_text(shorten_text(summary, allowance))}"
        tokens = count_tokens(line, tokenizer)
        if tokens <= max_tokens or allowance == 0:
            return line
        allowance = min(allowance - 1, allowance * max_tokens // tokens)


def _included(pre: PreTaskSettings, section: str) -> bool:
    """Whether a pre-task context lists this section (`include_decisions`, `include_files`)."""
    if section == "decisions":
        return pre.include_decisions
    if section == "files":
        return pre.include_files
    return True


def _failures(report: StageReport) -> tuple[str, ...]:
    return tuple(f"{f.operation}: {f.error_type}: {f.message}" for f in report.failures)


def _empty(owner: str, loop: str, kind: str, budget: int) -> Hydration:
    return Hydration(
        owner=owner,
        loop=loop,
        kind=kind,
        text="",
        tokens=0,
        budget_tokens=budget,
        triples_used=0,
        omitted=0,
    )

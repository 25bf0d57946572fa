"""Graph-backed memory for an agent loop: fact extraction, hydration, checkpoints.

- **Extraction**: before a loop's context is compacted, the `LanguageModel`
  turns the conversation into `(subject, predicate, object)` triples (answer
  capped at `max_tokens`). It runs every `every_n_iterations` iterations or
  once context utilisation reaches `utilization_threshold`; a bad answer or a
  bad item is counted and skipped, never raised.
- **Hydration**: `pre_task` renders the triples relevant to a task description
  (facts, past decisions, files) within `max_context_tokens`;
  `post_compaction` renders the loop's last checkpoint plus its graph within
  `max_recovery_tokens`. Lines are encoded with `encode_text` and admitted in
  priority order by `trim_to_token_budget`; the text's token count (tokenizer,
  or `estimate_tokens`) never exceeds the budget.
- **Checkpoints**: per loop, on the `Cache` port, kept `retention_days`.

Everything is fail-open: a failing port or model is recorded on the result
(`failures`) and logged; the loop being served never sees an exception.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs
from attrs import field, frozen

from agent_memory.domain.errors import ConfigurationError, InvalidInput
from agent_memory.domain.json_answers import extract_json_array
from agent_memory.domain.triples import (
    Checkpoint,
    ExtractionOutcome,
    Hydration,
    Triple,
    distinct,
    order_triples,
)
from agent_memory.domain.validation import require_scope, require_text
from agent_memory.domain.views import (
    budget_bytes_for_tokens,
    count_tokens,
    encode_text,
    shorten_text,
    trim_to_token_budget,
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

_log = logging.getLogger("agent_memory.graph")

CHECKPOINT_SCOPE = "agent-memory/graph-checkpoints"

EXTRACTION_SYSTEM_PROMPT = (
    "You extract durable facts from an AI agent's working context as knowledge-graph "
    "triples. Answer with ONLY a JSON array of objects "
    '[{"subject": "...", "predicate": "...", "object": "..."}]. Use short canonical '
    "names for subjects and objects and snake_case predicates. Record decisions with the "
    'predicate "decided" and files the agent read or changed with "read" or "modified" '
    "(object: the file path). No commentary; [] when there is nothing durable."
)

_DECISION_WORDS = ("decid", "decision", "chose", "choose", "agreed", "resolved", "selected")
_FILE_PREDICATES = frozenset(
    {"modified", "edited", "created", "read", "reads", "wrote", "changed", "deleted", "touched"}
)
_FILE_LIKE = re.compile(
    r"^(?:[\w.\-~]+/)+[\w.\-]+$|^[\w\-]+\.(?:py|md|rst|txt|toml|ya?ml|json|js|ts|tsx|jsx|rs|go|"
    r"java|kt|c|h|cc|cpp|hpp|cs|rb|php|sql|sh|cfg|ini|lock|html|css)$"
)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "from",
        "into",
        "have",
        "has",
        "was",
        "were",
        "are",
        "not",
        "but",
        "you",
        "your",
        "our",
        "their",
        "then",
        "than",
        "them",
        "they",
        "will",
        "would",
        "should",
        "could",
        "what",
        "when",
        "where",
        "which",
        "while",
        "about",
        "after",
        "before",
        "task",
        "please",
        "make",
        "sure",
        "need",
        "needs",
        "using",
        "use",
    ]
)


def _snake(predicate: str) -> str:
    return re.sub(r"[\s\-]+", "_", predicate.strip().lower())


def is_decision(t: Triple) -> bool:
    """A triple that records a decision (by its predicate)."""
    p = _snake(t.predicate)
    return any(word in p for word in _DECISION_WORDS)


def is_file(t: Triple) -> bool:
    """A triple about a file: a file predicate, or a path-like object."""
    return _snake(t.predicate) in _FILE_PREDICATES or bool(_FILE_LIKE.match(t.object.strip()))


def _terms(text: str) -> set[str]:
    return {w for w in (m.lower() for m in _WORD.findall(text)) if len(w) >= 3 and w not in _STOP}


# -- settings -------------------------------------------------------------------


def _section(doc: Mapping[str, Any], path: str, known: set[str]) -> dict[str, Any]:
    node: Any = doc
    for part in path.split("."):
        if not isinstance(node, Mapping):
            raise ConfigurationError(f"{path}: an object is required")
        node = node.get(part, {})
    if not isinstance(node, Mapping):
        raise ConfigurationError(f"{path}: an object is required, got {type(node).__name__}")
    unknown = sorted(set(node) - known)
    if unknown:
        raise ConfigurationError(f"{path}: unknown keys {unknown}")
    return dict(node)


def _pos_int(path: str) -> Any:
    def check(_inst: object, attr: Any, value: object) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigurationError(f"{path}.{attr.name}: a positive integer, got {value!r}")

    return check


def _pos_num(path: str) -> Any:
    def check(_inst: object, attr: Any, value: object) -> None:
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
            raise ConfigurationError(f"{path}.{attr.name}: a positive number, got {value!r}")

    return check


def _boolean(path: str) -> Any:
    def check(_inst: object, attr: Any, value: object) -> None:
        if not isinstance(value, bool):
            raise ConfigurationError(f"{path}.{attr.name}: true or false, got {value!r}")

    return check


def _fraction(path: str) -> Any:
    def check(_inst: object, attr: Any, value: object) -> None:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1
        if not ok:
            raise ConfigurationError(f"{path}.{attr.name}: a number in (0, 1], got {value!r}")

    return check


_EX = "extraction.llm_assisted"
_PRE = "hydration.pre_task"
_POST = "hydration.post_compaction"
_CP = "checkpoint"


@frozen
class ExtractionSettings:
    """`extraction.llm_assisted.*`."""

    enabled: bool = field(default=True, validator=_boolean(_EX))
    max_tokens: int = field(default=1024, validator=_pos_int(_EX))
    every_n_iterations: int = field(default=5, validator=_pos_int(_EX))
    utilization_threshold: float = field(default=0.8, validator=_fraction(_EX))
    timeout_seconds: float = field(default=30.0, validator=_pos_num(_EX))
    max_input_tokens: int = field(default=6000, validator=_pos_int(_EX))
    max_triples: int = field(default=50, validator=_pos_int(_EX))


@frozen
class PreTaskSettings:
    """`hydration.pre_task.*`."""

    enabled: bool = field(default=True, validator=_boolean(_PRE))
    max_context_tokens: int = field(default=2000, validator=_pos_int(_PRE))
    max_triples: int = field(default=40, validator=_pos_int(_PRE))
    hops: int = field(default=1, validator=_pos_int(_PRE))
    scan_limit: int = field(default=500, validator=_pos_int(_PRE))


@frozen
class PostCompactionSettings:
    """`hydration.post_compaction.*`."""

    enabled: bool = field(default=True, validator=_boolean(_POST))
    max_recovery_tokens: int = field(default=4000, validator=_pos_int(_POST))
    max_triples: int = field(default=80, validator=_pos_int(_POST))


@frozen
class CheckpointSettings:
    """`checkpoint.*`."""

    enabled: bool = field(default=True, validator=_boolean(_CP))
    retention_days: float = field(default=7.0, validator=_pos_num(_CP))

    @property
    def retention(self) -> timedelta:
        return timedelta(days=self.retention_days)


@frozen
class GraphSettings:
    """The graph sections of the processor's JSON document."""

    extraction: ExtractionSettings = ExtractionSettings()
    pre_task: PreTaskSettings = PreTaskSettings()
    post_compaction: PostCompactionSettings = PostCompactionSettings()
    checkpoint: CheckpointSettings = CheckpointSettings()

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any]) -> GraphSettings:
        """Read `extraction.llm_assisted.*`, `hydration.pre_task.*`,
        `hydration.post_compaction.*` and `checkpoint.*`; other top-level keys are
        left to their readers. Unknown keys inside these sections are errors."""
        if not isinstance(doc, Mapping):
            raise ConfigurationError("the configuration must be a JSON object")
        _section(doc, "extraction", {"llm_assisted"})
        _section(doc, "hydration", {"pre_task", "post_compaction"})

        def build(kind: type[Any], path: str) -> Any:
            names = {a.name for a in attrs.fields(kind)}
            return kind(**_section(doc, path, names))

        return cls(
            extraction=build(ExtractionSettings, _EX),
            pre_task=build(PreTaskSettings, _PRE),
            post_compaction=build(PostCompactionSettings, _POST),
            checkpoint=build(CheckpointSettings, _CP),
        )


# -- rendering --------------------------------------------------------------------


@frozen
class _Item:
    section: str
    text: str
    triple: Triple | None = None


def _line(t: Triple) -> str:
    return f"- {encode_text(t.subject)} {encode_text(t.predicate)} {encode_text(t.object)}"


_SECTION_TITLES = {
    "checkpoint": "## Last checkpoint",
    "decisions": "## Past decisions",
    "files": "## Files",
    "facts": "## Relevant facts",
    "graph": "## Loop knowledge",
}


def _render(
    kind: str,
    loop: str,
    items: Sequence[_Item],
    budget: int,
    tokenizer: Tokenizer | None,
    order: Sequence[str],
) -> tuple[str, int, int, int]:
    """(text, tokens, triples used, omitted): `items` in priority order, grouped
    by section in `order`, within `budget` tokens (the frame included)."""
    head = f"<graph_context kind={encode_text(kind)} loop={encode_text(loop)}>"
    tail = "</graph_context>"
    sections = [s for s in order if any(i.section == s for i in items)]
    frame = [head, *(_SECTION_TITLES[s] for s in sections), tail]
    frame_tokens = count_tokens("\n".join(frame), tokenizer)
    if not items or frame_tokens > budget:
        return "", 0, 0, len(items)
    trim = trim_to_token_budget(
        items, budget - frame_tokens, text=lambda i: i.text, tokenizer=tokenizer
    )
    kept = list(trim.kept)
    while True:
        lines = [head]
        for s in sections:
            chosen = [i.text for i in kept if i.section == s]
            if chosen:
                lines.append(_SECTION_TITLES[s])
                lines.extend(chosen)
        lines.append(tail)
        text = "\n".join(lines) if kept else ""
        tokens = count_tokens(text, tokenizer) if text else 0
        if tokens <= budget:
            used = sum(1 for i in kept if i.triple is not None)
            return text, tokens, used, len(items) - len(kept)
        kept.pop()  # a tokenizer that is not additive: drop the lowest priority


# -- the service ----------------------------------------------------------------


def _owner_prefix(owner: str) -> str:
    return hashlib.sha256(json.dumps(["owner", owner]).encode()).hexdigest()[:32] + "/"


def _legacy_checkpoint_key(owner: str, loop: str) -> str:
    return hashlib.sha256(json.dumps([owner, loop]).encode()).hexdigest()


def checkpoint_key(owner: str, loop: str) -> str:
    """The cache-key base of a loop's checkpoints (`<base>/<id>`, `<base>/latest`).
    It starts with a digest of the owner alone, so an owner's checkpoints can be
    removed by prefix (`forget_checkpoints`)."""
    return _owner_prefix(owner) + _legacy_checkpoint_key(owner, loop)


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

    # -- extraction ------------------------------------------------------------

    def should_extract(self, iteration: int | None, utilization: float | None) -> bool:
        """Every `every_n_iterations` iterations, or at `utilization_threshold`.

        With neither signal known (both None), extraction runs: the caller asked.
        """
        ex = self._settings.extraction
        if not ex.enabled:
            return False
        if iteration is None and utilization is None:
            return True
        by_iteration = (
            iteration is not None and iteration > 0 and iteration % ex.every_n_iterations == 0
        )
        by_utilization = utilization is not None and utilization >= ex.utilization_threshold
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
            return ExtractionOutcome(triggered=True, error="no language model is configured")
        if not content.strip():
            return ExtractionOutcome(triggered=True)
        ex = self._settings.extraction
        body = shorten_text(content, budget_bytes_for_tokens(ex.max_input_tokens))
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
                triggered=True, error=f"{type(exc).__name__}: {exc}", failures=_failures(report)
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
            decisions = [_plain(t) for t in loop_triples if is_decision(t)][:50]
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
            await self._cache.put(CHECKPOINT_SCOPE, f"{base}/{cp.id}", body, ttl)
            await self._cache.put(CHECKPOINT_SCOPE, f"{base}/latest", body, ttl)
        except Exception as exc:
            report.fail("cache.put", exc)
            return None, _failures(report)
        return cp, _failures(report)

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
        terms = _terms(task)

        def score(t: Triple) -> int:
            words = _terms(f"{t.subject} {t.predicate} {t.object}")
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
        ranked = distinct(
            [t for t in relevant if is_decision(t) or is_file(t)]
            + [t for t in relevant if not (is_decision(t) or is_file(t))]
            + extra
            + [t for t in others if is_decision(t)]
            + [t for t in others if is_file(t)]
        )[: pre.max_triples]
        items = [_Item(_section_of(t), _line(t), t) for t in ranked]
        text, tokens, used, omitted = _render(
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
        try:
            cp = await self.last_checkpoint(owner, loop)
        except Exception as exc:
            report.fail("checkpoint.get", exc)
        loop_triples: list[Triple] = []
        try:
            loop_triples = await self._triples.query(owner, loop=loop, limit=post.max_triples)
        except Exception as exc:
            report.fail("triples.query", exc)
        items: list[_Item] = []
        if cp is not None:
            if cp.summary.strip():
                allowance = budget_bytes_for_tokens(max(post.max_recovery_tokens // 2, 1))
                summary = shorten_text(cp.summary, allowance)
                items.append(_Item("checkpoint", f"summary: {encode_text(summary)}"))
            items.extend(_Item("checkpoint", f"decision: {encode_text(d)}") for d in cp.decisions)
            items.extend(_Item("checkpoint", f"file: {encode_text(f)}") for f in cp.files)
        ranked = [t for t in loop_triples if is_decision(t)] + [
            t for t in loop_triples if not is_decision(t)
        ]
        items.extend(_Item("graph", _line(t), t) for t in distinct(order_triples(ranked)))
        text, tokens, used, omitted = _render(
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


def _section_of(t: Triple) -> str:
    if is_decision(t):
        return "decisions"
    if is_file(t):
        return "files"
    return "facts"


def _plain(t: Triple) -> str:
    return f"{t.subject} {t.predicate} {t.object}"


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

"""Fact triples `(subject, predicate, object)` of a knowledge graph, scoped to an
owner and an agent loop, plus the values graph memory produces (checkpoints,
hydrated context, extraction outcomes).

A triple is identified by `(owner, loop, subject, predicate, object)`: adding
the same fact again is a no-op (the first `source` and `created_at` are kept),
so replaying an event never duplicates a fact. Triples order newest first by
`created_at`, then by `(loop, subject, predicate, object)` ascending in code
point order; a walk orders by hop distance first. Every backend sorts this way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import attrs
from attrs import field, frozen

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.time import to_micros
from agent_memory.domain.validation import (
    require_id,
    require_positive,
    require_scope,
    require_text,
    require_utc,
)

__all__ = [
    "MAX_TERM_CHARS",
    "Checkpoint",
    "ExtractionOutcome",
    "Hydration",
    "Triple",
    "WalkStep",
    "check_filters",
    "check_triples",
    "distinct",
    "order_triples",
    "require_hops",
    "require_limit",
    "require_node",
    "triple_sort_key",
    "walk",
    "walk_async",
    "walk_order_key",
]

#: The longest subject, predicate or object accepted (characters); the bound of
#: every id, `validation.MAX_ID_BYTES` bytes of UTF-8, is the tighter one.
MAX_TERM_CHARS = 1_000
#: The longest source accepted (characters).
MAX_SOURCE_CHARS = 500
#: The most hops a walk may take.
MAX_HOPS = 8
#: The largest `limit` a query or walk accepts.
MAX_LIMIT = 10_000


def _term(field_name: str, max_chars: int = MAX_TERM_CHARS, *, blank_ok: bool = False) -> Any:
    def check(_inst: object, _attr: object, value: object) -> None:
        if blank_ok:
            require_text(value, field_name)
        else:
            require_id(value, field_name)
        assert isinstance(value, str)
        if "\x00" in value:
            raise InvalidInput(field_name, "text must not contain NUL (\\x00)")
        if len(value) > max_chars:
            raise InvalidInput(field_name, f"at most {max_chars} characters, got {len(value)}")

    return check


def _scope(field_name: str) -> Any:
    def check(_inst: object, _attr: object, value: object) -> None:
        require_scope(value, field_name)
        assert isinstance(value, str)
        if "\x00" in value:
            raise InvalidInput(field_name, "a scope must not contain NUL (\\x00)")
        if len(value) > MAX_TERM_CHARS:
            raise InvalidInput(field_name, f"at most {MAX_TERM_CHARS} characters")

    return check


def _utc(value: object) -> datetime:
    return require_utc(value, "triple.created_at")


@frozen
class Triple:
    """One fact: `subject --predicate--> object`, in `owner`'s graph, learnt in `loop`.

    `source` says where it came from (an event id, "llm", a file...), possibly empty.
    """

    owner: str = field(validator=_scope("triple.owner"))
    loop: str = field(validator=_scope("triple.loop"))
    subject: str = field(validator=_term("triple.subject"))
    predicate: str = field(validator=_term("triple.predicate"))
    object: str = field(validator=_term("triple.object"))
    created_at: datetime = field(converter=_utc)
    source: str = field(
        default="", validator=_term("triple.source", MAX_SOURCE_CHARS, blank_ok=True)
    )

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """The identity: `(owner, loop, subject, predicate, object)`."""
        return (self.owner, self.loop, self.subject, self.predicate, self.object)

    def nodes(self) -> tuple[str, str]:
        return (self.subject, self.object)


def triple_sort_key(t: Triple) -> tuple[int, str, str, str, str]:
    """Newest first, then loop, subject, predicate, object ascending."""
    return (-to_micros(t.created_at), t.loop, t.subject, t.predicate, t.object)


def order_triples(triples: Iterable[Triple]) -> list[Triple]:
    return sorted(triples, key=triple_sort_key)


@frozen
class WalkStep:
    """A triple reached by a walk, `distance` hops from the start node (1 = touches it)."""

    triple: Triple
    distance: int


def walk_order_key(step: WalkStep) -> tuple[int, int, str, str, str, str]:
    return (step.distance, *triple_sort_key(step.triple))


class _Walk:
    """The state of one breadth-first walk (shared by `walk` and `walk_async`)."""

    def __init__(self, node: str) -> None:
        self.seen = {node}
        self.frontier = frozenset(self.seen)
        self.reached: dict[tuple[str, str, str, str, str], WalkStep] = {}

    def step(self, distance: int, edges: Iterable[Triple]) -> None:
        found: set[str] = set()
        for t in edges:
            if t.key in self.reached:
                continue
            self.reached[t.key] = WalkStep(t, distance)
            for n in t.nodes():
                if n not in self.seen:
                    self.seen.add(n)
                    found.add(n)
        self.frontier = frozenset(found)

    def result(self, limit: int) -> list[WalkStep]:
        return sorted(self.reached.values(), key=walk_order_key)[:limit]


def walk(
    node: str, hops: int, limit: int, edges_of: Callable[[frozenset[str]], Iterable[Triple]]
) -> list[WalkStep]:
    """Breadth-first walk from `node`, either direction along edges, up to `hops`.

    `edges_of(frontier)` returns the triples whose subject or object is in the
    frontier. Each triple is reached once, at its smallest distance; nodes already
    visited are not expanded again. Ordered by `walk_order_key`, at most `limit`.
    """
    state = _Walk(node)
    for distance in range(1, hops + 1):
        if not state.frontier:
            break
        state.step(distance, edges_of(state.frontier))
    return state.result(limit)


async def walk_async(
    node: str,
    hops: int,
    limit: int,
    edges_of: Callable[[frozenset[str]], Awaitable[Iterable[Triple]]],
) -> list[WalkStep]:
    """`walk` with an asynchronous `edges_of`."""
    state = _Walk(node)
    for distance in range(1, hops + 1):
        if not state.frontier:
            break
        state.step(distance, await edges_of(state.frontier))
    return state.result(limit)


def require_hops(value: object) -> int:
    hops = require_positive(value, "hops")
    if hops > MAX_HOPS:
        raise InvalidInput("hops", f"at most {MAX_HOPS}, got {hops}")
    return hops


def require_limit(value: object) -> int:
    limit = require_positive(value, "limit")
    if limit > MAX_LIMIT:
        raise InvalidInput("limit", f"at most {MAX_LIMIT}, got {limit}")
    return limit


def _strings(value: object, field_name: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise InvalidInput(field_name, "a sequence of strings is required")
    for item in value:
        require_text(item, field_name)
    return tuple(value)


def _decisions(value: object) -> tuple[str, ...]:
    return _strings(value, "checkpoint.decisions")


def _files(value: object) -> tuple[str, ...]:
    return _strings(value, "checkpoint.files")


def _checkpoint_utc(value: object) -> datetime:
    return require_utc(value, "checkpoint.created_at")


@frozen
class Checkpoint:
    """What a loop knew at one moment: enough to recover after its context is compacted."""

    owner: str = field(validator=_scope("checkpoint.owner"))
    loop: str = field(validator=_scope("checkpoint.loop"))
    id: str = field(validator=lambda _i, _a, v: require_id(v, "checkpoint.id"))
    created_at: datetime = field(converter=_checkpoint_utc)
    iteration: int | None = None
    summary: str = field(default="", validator=lambda _i, _a, v: require_text(v, "summary"))
    decisions: tuple[str, ...] = field(default=(), converter=_decisions)
    files: tuple[str, ...] = field(default=(), converter=_files)
    triple_count: int = 0
    source: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "loop": self.loop,
            "id": self.id,
            "created_at": self.created_at.isoformat(),
            "iteration": self.iteration,
            "summary": self.summary,
            "decisions": list(self.decisions),
            "files": list(self.files),
            "triple_count": self.triple_count,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Checkpoint:
        try:
            created = datetime.fromisoformat(str(data["created_at"]))
            return cls(
                owner=data["owner"],
                loop=data["loop"],
                id=data["id"],
                created_at=created,
                iteration=data.get("iteration"),
                summary=data.get("summary", ""),
                decisions=tuple(data.get("decisions", ())),
                files=tuple(data.get("files", ())),
                triple_count=int(data.get("triple_count", 0)),
                source=str(data.get("source", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, InvalidInput):
                raise
            raise InvalidInput("checkpoint", f"malformed checkpoint: {exc}") from None


@frozen
class Hydration:
    """Context rendered for a loop within a token budget.

    `kind` is `pre_task` or `post_compaction`; `tokens` <= `budget_tokens`
    always; `omitted` counts candidate lines the budget left out.
    """

    owner: str
    loop: str
    kind: str
    text: str
    tokens: int
    budget_tokens: int
    triples_used: int
    omitted: int
    checkpoint_id: str | None = None
    failures: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "loop": self.loop,
            "kind": self.kind,
            "context": self.text,
            "tokens": self.tokens,
            "budget_tokens": self.budget_tokens,
            "triples_used": self.triples_used,
            "omitted": self.omitted,
            "checkpoint_id": self.checkpoint_id,
            "failures": list(self.failures),
        }


@frozen
class ExtractionOutcome:
    """What one extraction did: the triples it parsed, how many were new, what it skipped.

    `triggered` is False when neither the iteration nor the utilisation called for
    it. `bad_items` counts model items that were not valid triples; `error` says why
    the whole answer was unusable, why the model call failed (`model_failed`), or
    that no model is configured (`no_model`).
    """

    triggered: bool
    triples: tuple[Triple, ...] = ()
    added: int = 0
    bad_items: int = 0
    error: str | None = None
    failures: tuple[str, ...] = ()
    no_model: bool = False
    model_failed: bool = False

    @property
    def bad_output(self) -> bool:
        """The model answered, but not (entirely) with valid triples."""
        if self.no_model or self.model_failed:
            return False
        return self.error is not None or self.bad_items > 0


def distinct(triples: Sequence[Triple]) -> list[Triple]:
    """The triples without repeats of one key, first occurrence kept, order kept."""
    seen: set[tuple[str, str, str, str, str]] = set()
    out: list[Triple] = []
    for t in triples:
        if t.key not in seen:
            seen.add(t.key)
            out.append(t)
    return out


def _filter(value: object, field_name: str) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise InvalidInput(field_name, f"a string or None is required, got {type(value).__name__}")
    require_node(value, field_name)


def require_node(value: object, field_name: str = "node") -> str:
    """A term to match (a query filter, a walk's start): any valid text without
    NUL. No stored term holds NUL, and PostgreSQL refuses it in a parameter, so
    it is `InvalidInput` naming the field on every backend rather than [] on
    some and a server error on others."""
    text = require_text(value, field_name)
    if "\x00" in text:
        raise InvalidInput(field_name, "text must not contain NUL (\\x00)")
    return text


def check_filters(
    owner: object,
    *,
    loop: object = None,
    subject: object = None,
    predicate: object = None,
    object_: object = None,
    limit: object = 100,
) -> None:
    """Validate the arguments of `TripleStore.query` (and the scope of the others)."""
    require_scope(owner, "owner")
    if loop is not None:
        require_scope(loop, "loop")
    _filter(subject, "subject")
    _filter(predicate, "predicate")
    _filter(object_, "object")
    require_limit(limit)


def check_triples(triples: object) -> list[Triple]:
    """The batch of `TripleStore.add` as a list; anything but Triples is `InvalidInput`."""
    if isinstance(triples, Triple) or not isinstance(triples, Sequence) or isinstance(triples, str):
        raise InvalidInput("triples", "a sequence of Triple is required")
    out = list(triples)
    for item in out:
        if not isinstance(item, Triple):
            raise InvalidInput("triples", f"a Triple is required, got {type(item).__name__}")
        # Again, for a Triple built with validators disabled: every backend then
        # refuses bad fields (e.g. an id over MAX_ID_BYTES) alike, before any I/O.
        attrs.validate(item)
    return out

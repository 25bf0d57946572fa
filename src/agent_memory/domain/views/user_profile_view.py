"""`<user_profile>`: a user's private facts grouped by category, within a byte budget.

Groups come in this order, which is also their priority when the budget is
short: Identity, Constraint, Preference, Relationship, Context, Summary. Durable
facts carry a confidence band ("explicit, high confidence"); context facts and
summaries carry a recency label ("recorded 3 days ago") instead, computed from
the `now` the caller passes. Within a group: durable facts by confidence, then
most recently updated, then id; context and summaries most recent first. The
`<context_precedence>` block follows: the current request, then the latest
conversation turn, win over stored facts; context and summaries are possibly
stale hints.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.validation import require_utc
from agent_memory.domain.views.budget import (
    Line,
    SectionSpec,
    layout,
    require_budget,
    require_sequence,
)
from agent_memory.domain.views.encoding import SHORTENED_MARKER, encode_text, shorten_encoded
from agent_memory.domain.views.inputs import Fact, FactCategory
from agent_memory.domain.views.report import RenderedView
from agent_memory.domain.views.tokens import DEFAULT_BUDGET_BYTES

__all__ = [
    "CONTEXT_PRECEDENCE",
    "confidence_band",
    "fact_line",
    "recency_label",
    "render_user_profile",
]

CONTEXT_PRECEDENCE = (
    "<context_precedence>",
    "If this user_profile disagrees with the conversation_history or the user_request about "
    "any subject (a place, a date, who is involved, a budget or any other named thing), go by "
    "the live conversation: the current user_request comes first, then the latest "
    "conversation_history turn.",
    "Context and Summary entries are hints that may be out of date; their recency label "
    '("recorded ... ago") tells when each was last written.',
    "</context_precedence>",
)
_MIN_TEXT = 24


def confidence_band(fact: Fact) -> str:
    """E.g. "explicit, high confidence" (high >= 0.8, medium >= 0.5, else low)."""
    level = "high" if fact.confidence >= 0.8 else "medium" if fact.confidence >= 0.5 else "low"
    return f"{fact.source.value}, {level} confidence"


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}{'' if n == 1 else 's'} ago"


def recency_label(moment: datetime, now: datetime) -> str:
    """E.g. "recorded 3 days ago"; a moment in the future (clock skew) reads "just now"."""
    seconds = int((require_utc(now, "now") - require_utc(moment)).total_seconds())
    if seconds < 60:
        return "recorded just now"
    if seconds < 3600:
        return "recorded " + _plural(seconds // 60, "minute")
    if seconds < 86400:
        return "recorded " + _plural(seconds // 3600, "hour")
    return "recorded " + _plural(seconds // 86400, "day")


def fact_line(fact: Fact, now: datetime, *, max_content_bytes: int = 400) -> Line:
    """`- "content" [shortened] (label; id "f1")`; the marker is outside the allowance."""
    body, shortened = shorten_encoded(fact.content, max_content_bytes)
    label = confidence_band(fact) if fact.category.durable else recency_label(fact.updated_at, now)
    marker = f" {SHORTENED_MARKER}" if shortened else ""
    return Line(f"- {body}{marker} ({label}; id {encode_text(fact.id)})", shortened=shortened)


def _order(category: FactCategory, facts: Sequence[Fact]) -> list[Fact]:
    mine = [f for f in facts if f.category is category]
    # A total order on every field first, so the input order never shows.
    mine.sort(key=lambda f: (f.id, f.content, f.source.value, f.confidence, f.created_at))
    if category.durable:
        mine.sort(key=lambda f: (f.confidence, f.updated_at), reverse=True)
    else:
        mine.sort(key=lambda f: f.updated_at, reverse=True)
    return mine


def render_user_profile(
    facts: Sequence[Fact],
    *,
    now: datetime,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    max_fact_bytes: int = 400,
) -> RenderedView:
    """Render `<user_profile>` + `<context_precedence>` within `budget_bytes` bytes.

    Facts are shown once per id (later copies count as duplicates). The order
    of `facts` does not matter: the output depends only on their values.
    """
    now = require_utc(now, "now")
    budget_bytes = require_budget(budget_bytes)
    facts = require_sequence(facts, Fact, "facts")
    for fact in facts:
        if not isinstance(fact, Fact):
            raise InvalidInput("facts", f"Fact values are required, got {fact!r}")
    if not isinstance(max_fact_bytes, int) or max_fact_bytes < _MIN_TEXT:
        raise InvalidInput("max_fact_bytes", f"an integer >= {_MIN_TEXT} is required")

    def render(fact: Fact) -> Line:
        return fact_line(fact, now, max_content_bytes=max_fact_bytes)

    def fit(fact: Fact, room: int) -> Line | None:
        empty = fact_line(
            Fact(
                id=fact.id,
                category=fact.category,
                content="",
                confidence=fact.confidence,
                source=fact.source,
                created_at=fact.created_at,
                updated_at=fact.updated_at,
            ),
            now,
        )
        overhead = empty.cost - 1 - 2 + len(SHORTENED_MARKER) + 1
        allowance = min(room - overhead, max_fact_bytes)
        if allowance < _MIN_TEXT:
            # the shortest allowance may still fit: its cut can land before a
            # character that escaping widens ("<" is six bytes, "\u003c");
            # `room` has no newline, a line's cost has
            line = fact_line(fact, now, max_content_bytes=_MIN_TEXT)
            return line if line.cost - 1 <= room else None
        return fact_line(fact, now, max_content_bytes=allowance)

    sections = [
        SectionSpec(
            name=category.value,
            title=category.value.capitalize(),
            records=_order(category, facts),
            key=lambda f: ("fact", f.id),
            render=render,
            fit=fit,
        )
        for category in FactCategory
    ]
    return layout(
        view="user_profile",
        head=["<user_profile>"],
        sections=sections,
        tail=["</user_profile>", *CONTEXT_PRECEDENCE],
        budget_bytes=budget_bytes,
    )

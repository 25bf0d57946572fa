"""View inputs that have no record type elsewhere yet: facts, activity signals,
knowledge items and investigation claims. Frozen attrs values, validated when built.
"""

from __future__ import annotations

import enum
import math
from datetime import datetime
from typing import Any

from attrs import field, frozen

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import Entity
from agent_memory.domain.validation import (
    require_id,
    require_text,
    require_unit_interval,
    require_utc,
)

__all__ = [
    "ActivitySignal",
    "Fact",
    "FactCategory",
    "FactSource",
    "Investigation",
    "KnowledgeItem",
]


def _id(name: str) -> Any:
    def check(_inst: object, _attr: object, value: object) -> None:
        require_id(value, name)

    return check


def _text(name: str) -> Any:
    def check(_inst: object, _attr: object, value: object) -> None:
        require_text(value, name)

    return check


def _created_at(value: object) -> datetime:
    return require_utc(value, "fact.created_at")


def _updated_at(value: object) -> datetime:
    return require_utc(value, "fact.updated_at")


def _started_at(value: object) -> datetime:
    return require_utc(value, "signal.started_at")


def _since(value: object) -> datetime:
    return require_utc(value, "investigation.since")


class FactCategory(enum.StrEnum):
    """What kind of user fact; the order here is the `<user_profile>` order."""

    IDENTITY = "identity"
    CONSTRAINT = "constraint"
    PREFERENCE = "preference"
    RELATIONSHIP = "relationship"
    CONTEXT = "context"
    SUMMARY = "summary"

    @property
    def durable(self) -> bool:
        """Durable facts show a confidence band; context and summaries a recency label."""
        return self not in (FactCategory.CONTEXT, FactCategory.SUMMARY)


class FactSource(enum.StrEnum):
    """Whether the user said it (`explicit`) or it was inferred (`derived`)."""

    EXPLICIT = "explicit"
    DERIVED = "derived"


def _category(value: object) -> FactCategory:
    try:
        if isinstance(value, str):
            return FactCategory(value)
    except ValueError:
        pass
    allowed = ", ".join(c.value for c in FactCategory)
    raise InvalidInput("fact.category", f"one of {allowed} is required, got {value!r}")


def _source(value: object) -> FactSource:
    try:
        if isinstance(value, str):
            return FactSource(value)
    except ValueError:
        pass
    raise InvalidInput("fact.source", f"'explicit' or 'derived' is required, got {value!r}")


def _confidence(value: object) -> float:
    return require_unit_interval(value, "fact.confidence")


@frozen
class Fact:
    """One private fact about a user, as a view shows it."""

    id: str = field(validator=_id("fact.id"))
    category: FactCategory = field(converter=_category)
    content: str = field(validator=_text("fact.content"))
    confidence: float = field(converter=_confidence)
    source: FactSource = field(converter=_source)
    created_at: datetime = field(converter=_created_at)
    updated_at: datetime = field(converter=_updated_at)


@frozen
class ActivitySignal:
    """An agent working in a domain right now: what (`action`), how far (`status`)."""

    agent: str = field(validator=_id("signal.agent"))
    request_id: str = field(validator=_id("signal.request_id"))
    domain: str = field(validator=_id("signal.domain"))
    action: str = field(validator=_text("signal.action"))
    status: str = field(validator=_text("signal.status"))
    started_at: datetime = field(converter=_started_at)


def _score(value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidInput("knowledge.score", f"a finite number is required, got {value!r}")
    return float(value)


@frozen
class KnowledgeItem:
    """A retrieved knowledge fragment and its relevance score (higher is better)."""

    id: str = field(validator=_id("knowledge.id"))
    content: str = field(validator=_text("knowledge.content"))
    score: float = field(converter=_score)


def _entity(value: object) -> Entity:
    if not isinstance(value, Entity):
        raise InvalidInput("investigation.entity", f"an Entity is required, got {value!r}")
    return value


@frozen
class Investigation:
    """A claim: `agent` (request `request_id`) investigates `entity` since `since`."""

    entity: Entity = field(converter=_entity)
    agent: str = field(validator=_id("investigation.agent"))
    request_id: str = field(validator=_id("investigation.request_id"))
    since: datetime = field(converter=_since)

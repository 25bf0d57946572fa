"""Turning an agent's executed steps into episodic events (pure rules).

- event time: the step's end, else its start, else the recording time — the
  basis is recorded on the event;
- failure causes are cut to 256 UTF-8 bytes with `[shortened]` and a flag;
- the model sees at most `payload_allowance` bytes per step, shared between the
  failure facts (first) and the response;
- entities come from the request (first, when asked), explicit step metadata
  (`entity_type`/`entity_id`, or `entities: [{"type", "id"}]`) and the model's
  summary; the source is recorded and every entity field is counted as
  missing, empty, valid or invalid.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from attrs import field, frozen

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import Entity, EntitySource, Event, SummarySource, TimeBasis
from agent_memory.domain.validation import require_json_mapping, require_text, require_utc
from agent_memory.domain.views.encoding import shorten_text

__all__ = [
    "CAUSE_MAX_BYTES",
    "EntityCounts",
    "FallbackReason",
    "Step",
    "StepSummary",
    "build_event",
    "entity_from_json",
    "event_time",
    "heuristic_summary",
    "metadata_entities",
    "step_payload",
]

CAUSE_MAX_BYTES = 256


class FallbackReason(enum.StrEnum):
    """Why a step got a heuristic summary instead of the model's."""

    MODEL_ERROR = "model_error"
    SUMMARY_TIMEOUT = "summary_timeout"
    PARSE_ERROR = "parse_error"
    BATCH_LIMIT = "batch_limit"
    NO_MODEL = "no_model"
    PARENT_CANCELLED = "parent_cancelled"
    SUMMARIZER_ERROR = "summarizer_error"


def _opt_utc(value: object) -> datetime | None:
    return None if value is None else require_utc(value, "step time")


def _step_metadata(value: object) -> dict[str, Any]:
    return require_json_mapping(value, "step.metadata")


@frozen
class Step:
    """One executed step of an agent request, as the agent reports it.

    `eligible=False` steps (bookkeeping, retries the agent wants hidden) are not
    recorded.
    """

    action: str = field(validator=lambda _i, _a, v: require_text(v, "step.action"))
    outcome: str = field(default="success", validator=lambda _i, _a, v: require_text(v, "outcome"))
    response: str = field(default="", validator=lambda _i, _a, v: require_text(v, "response"))
    failure_cause: str | None = None
    started_at: datetime | None = field(default=None, converter=_opt_utc)
    ended_at: datetime | None = field(default=None, converter=_opt_utc)
    metadata: dict[str, Any] = field(factory=dict, converter=_step_metadata)
    importance: float = 0.5
    eligible: bool = True
    id: str | None = None


@frozen
class StepSummary:
    """What the model said about one step."""

    summary: str
    entities: tuple[Entity, ...] = ()


@frozen
class EntityCounts:
    """How the entity fields of the recorded steps looked."""

    missing: int = 0
    empty: int = 0
    valid: int = 0
    invalid: int = 0

    def __add__(self, other: EntityCounts) -> EntityCounts:
        return EntityCounts(
            self.missing + other.missing,
            self.empty + other.empty,
            self.valid + other.valid,
            self.invalid + other.invalid,
        )


def event_time(step: Step, recorded_at: datetime) -> tuple[datetime, TimeBasis]:
    if step.ended_at is not None:
        return step.ended_at, TimeBasis.STEP_END
    if step.started_at is not None:
        return step.started_at, TimeBasis.STEP_START
    return recorded_at, TimeBasis.RECORDED


def shorten_utf8(text: str, max_bytes: int) -> tuple[str, bool]:
    """(text cut to `max_bytes` UTF-8 bytes + `[shortened]` beyond them, was it cut)."""
    cut = shorten_text(text, max_bytes, separator="")
    return cut, cut is not text


def entity_from_json(raw: object) -> Entity | None:
    """`{"type": ..., "id": ...}` as an Entity, or None when it is not a valid one."""
    if not isinstance(raw, Mapping):
        return None
    etype, eid = raw.get("type"), raw.get("id")
    if not isinstance(etype, str) or not isinstance(eid, str):
        return None
    try:
        return Entity(type=etype, id=eid)
    except InvalidInput:
        return None


def metadata_entities(metadata: Mapping[str, Any]) -> tuple[tuple[Entity, ...], EntityCounts]:
    """Entities declared in step metadata, with counts of what the fields held."""
    found: list[Entity] = []
    counts = EntityCounts()
    has_pair = "entity_type" in metadata or "entity_id" in metadata
    if has_pair:
        etype, eid = metadata.get("entity_type"), metadata.get("entity_id")
        if etype in (None, "") and eid in (None, ""):
            counts += EntityCounts(empty=1)
        else:
            ent = entity_from_json({"type": etype, "id": eid})
            if ent is None:
                counts += EntityCounts(invalid=1)
            else:
                found.append(ent)
                counts += EntityCounts(valid=1)
    if "entities" in metadata:
        raw = metadata["entities"]
        if raw in (None, "", []):
            counts += EntityCounts(empty=1)
        elif not isinstance(raw, list):
            counts += EntityCounts(invalid=1)
        else:
            for item in raw:
                ent = entity_from_json(item)
                if ent is None:
                    counts += EntityCounts(invalid=1)
                else:
                    found.append(ent)
                    counts += EntityCounts(valid=1)
    if not has_pair and "entities" not in metadata:
        counts += EntityCounts(missing=1)
    return tuple(found), counts


def _unique(entities: Sequence[Entity]) -> tuple[Entity, ...]:
    return tuple(dict.fromkeys(entities))


def step_payload(
    step: Step, allowance: int, cause_max_bytes: int = CAUSE_MAX_BYTES
) -> dict[str, Any]:
    """What the summariser sees of one step: failure facts first (at most
    `cause_max_bytes`), then the response, together at most `allowance` UTF-8
    bytes of text."""
    cause = step.failure_cause or ""
    cause_text, cause_cut = shorten_utf8(cause, min(allowance, cause_max_bytes))
    used = len(cause_text.encode("utf-8")) if cause else 0
    response, response_cut = shorten_utf8(step.response, max(allowance - used, 0))
    payload: dict[str, Any] = {"action": step.action, "outcome": step.outcome}
    if cause:
        payload["failure_cause"] = cause_text
    if step.response:
        payload["response"] = response
    if cause_cut or response_cut:
        payload["shortened"] = True
    return payload


HEURISTIC_DETAIL_BYTES = 160


def heuristic_summary(step: Step, cause_max_bytes: int = CAUSE_MAX_BYTES) -> str:
    """A deterministic one-line summary: action, outcome, and the failure cause
    (at most `cause_max_bytes`; or the start of the response)."""
    # An arrow, not "->": views escape ">" (it could close a tag), which would
    # show the model an escaped `\u003e` in every heuristic summary.
    text = f"{step.action} → {step.outcome}"
    if step.failure_cause:
        cause, _ = shorten_utf8(step.failure_cause, cause_max_bytes)
        text += f": {cause}"
    elif step.response.strip():
        first_line = step.response.strip().splitlines()[0]
        detail, _ = shorten_utf8(first_line, HEURISTIC_DETAIL_BYTES)
        text += f": {detail}"
    return text


def build_event(
    step: Step,
    *,
    event_id: str,
    domain: str,
    agent: str,
    request_id: str,
    user_id: str | None,
    recorded_at: datetime,
    summary: str,
    summary_source: SummarySource,
    fallback_reason: FallbackReason | None,
    request_entities: Sequence[Entity],
    model_entities: Sequence[Entity],
    extracted_entities: Sequence[Entity] = (),
    cause_max_bytes: int = CAUSE_MAX_BYTES,
) -> tuple[Event, EntityCounts]:
    """The event for one step, with the entity counts of its metadata.
    `extracted_entities` (from an application's entity extractor) count as
    explicit, like the step metadata's."""
    occurred, basis = event_time(step, recorded_at)
    meta_entities, counts = metadata_entities(step.metadata)
    meta_entities = _unique([*meta_entities, *extracted_entities])
    sources = [
        name
        for name, found in (
            (EntitySource.REQUEST, request_entities),
            (EntitySource.METADATA, meta_entities),
            (EntitySource.MODEL, model_entities),
        )
        if found
    ]
    source = (
        EntitySource.NONE
        if not sources
        else sources[0]
        if len(sources) == 1
        else EntitySource.MIXED
    )
    entities = _unique([*request_entities, *meta_entities, *model_entities])
    metadata = {
        k: v for k, v in step.metadata.items() if k not in ("entity_type", "entity_id", "entities")
    }
    if step.failure_cause:
        cause, cut = shorten_utf8(step.failure_cause, cause_max_bytes)
        metadata["failure_cause"] = cause
        if cut:
            metadata["failure_cause_shortened"] = True
    event = Event(
        id=event_id,
        domain=domain,
        agent=agent,
        action=step.action,
        outcome=step.outcome,
        summary=summary,
        occurred_at=occurred,
        recorded_at=recorded_at,
        origin_request_id=request_id,
        summary_source=summary_source,
        fallback_reason=None if fallback_reason is None else str(fallback_reason),
        time_basis=basis,
        entities=entities,
        entity_source=source,
        user_id=user_id,
        importance=step.importance,
        metadata=metadata,
    )
    return event, counts

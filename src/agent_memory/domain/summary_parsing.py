"""Robust parsing of the summariser's answer: a JSON array of per-step objects.

Accepted: prose before or after a complete array; one outer fenced code block.
A truncated array keeps its complete entries only when the answer is the bare
array or one outer fence around it; a truncated array with prose around it is
not salvaged (the prose may have cut or reframed it). Rejected as ambiguous:
more than one JSON value, or more than one fenced block.
Each entry: `{"index": <int>, "summary": <str>, "entities": [{"type", "id"}]}`.

The entity field of every retained summary is classified (missing, empty,
valid, invalid or mixed) and its entries counted as accepted or rejected;
duplicate or unusable summaries are left out of those counts.
"""

from __future__ import annotations

import re
from typing import Any

from attrs import field, frozen

from agent_memory.domain.json_answers import extract_json_array
from agent_memory.domain.records import Entity
from agent_memory.domain.steps import StepSummary, entity_from_json

__all__ = ["ParsedSummaries", "SummaryEntityFields", "parse_summaries"]

_OUTER_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)(?:\n```\s*)?", re.DOTALL)


@frozen
class SummaryEntityFields:
    """How the `entities` fields of the retained model summaries looked."""

    missing: int = 0
    empty: int = 0
    valid: int = 0
    invalid: int = 0
    mixed: int = 0
    accepted: int = 0
    rejected: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "missing": self.missing,
            "empty": self.empty,
            "valid": self.valid,
            "invalid": self.invalid,
            "mixed": self.mixed,
            "accepted_entities": self.accepted,
            "rejected_entities": self.rejected,
        }


@frozen
class ParsedSummaries:
    """Summaries by step index; `error` says why the answer (or part) was unusable;
    `truncated` when the array was cut and only its complete entries were kept."""

    items: dict[int, StepSummary]
    error: str | None = None
    truncated: bool = False
    entity_fields: SummaryEntityFields = field(factory=SummaryEntityFields)


def _bare_or_fenced(text: str) -> bool:
    """Whether the answer is nothing but the array, or one fence around it."""
    stripped = text.strip()
    if stripped.startswith("["):
        return True
    match = _OUTER_FENCE.fullmatch(stripped)
    return match is not None and match.group(1).lstrip().startswith("[")


def _entities(raw: dict[str, Any]) -> tuple[tuple[Entity, ...], str, int]:
    """(accepted entities, field class, rejected count) of one summary."""
    if "entities" not in raw or raw["entities"] is None:
        return (), "missing", 0
    value = raw["entities"]
    if not isinstance(value, list):
        return (), "invalid", 1
    if not value:
        return (), "empty", 0
    accepted = [e for e in map(entity_from_json, value) if e is not None]
    rejected = len(value) - len(accepted)
    kind = "valid" if not rejected else "invalid" if not accepted else "mixed"
    return tuple(accepted), kind, rejected


def _entry(raw: Any, position: int, n: int) -> tuple[int, StepSummary, str, int] | None:
    if not isinstance(raw, dict):
        return None
    summary = raw.get("summary")
    index = raw.get("index", position)
    if not isinstance(summary, str) or not summary.strip():
        return None
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
        return None
    entities, kind, rejected = _entities(raw)
    return index, StepSummary(summary=summary.strip(), entities=entities), kind, rejected


def parse_summaries(text: str, n: int) -> ParsedSummaries:
    """Parse the model's answer for `n` steps (indices 0..n-1)."""
    array, truncated, error = extract_json_array(text)
    if array is None:
        return ParsedSummaries({}, error=error)
    if truncated and not _bare_or_fenced(text):
        return ParsedSummaries({}, error="truncated array wrapped in prose is not salvaged")
    items: dict[int, StepSummary] = {}
    kinds = {"missing": 0, "empty": 0, "valid": 0, "invalid": 0, "mixed": 0}
    accepted = rejected = 0
    bad = 0
    for position, raw in enumerate(array):
        entry = _entry(raw, position, n)
        if entry is None or entry[0] in items:
            bad += 1
            continue
        index, summary, kind, rejected_here = entry
        items[index] = summary
        kinds[kind] += 1
        accepted += len(summary.entities)
        rejected += rejected_here
    error = f"{bad} unusable entr{'y' if bad == 1 else 'ies'}" if bad else None
    fields = SummaryEntityFields(**kinds, accepted=accepted, rejected=rejected)
    return ParsedSummaries(items, error=error, truncated=truncated, entity_fields=fields)

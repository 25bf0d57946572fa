"""Robust parsing of the summariser's answer: a JSON array of per-step objects.

Accepted: prose before or after the array; one outer fenced code block; a
truncated array (the complete entries before the cut are kept). Rejected as
ambiguous: more than one JSON value, or more than one fenced block.
Each entry: `{"index": <int>, "summary": <str>, "entities": [{"type", "id"}]}`.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen

from agent_memory.domain.json_answers import extract_json_array
from agent_memory.domain.records import Entity
from agent_memory.domain.steps import StepSummary, entity_from_json

__all__ = ["ParsedSummaries", "parse_summaries"]


@frozen
class ParsedSummaries:
    """Summaries by step index; `error` says why the answer (or part) was unusable;
    `truncated` when the array was cut and only its complete entries were kept."""

    items: dict[int, StepSummary]
    error: str | None = None
    truncated: bool = False


def _entry(raw: Any, position: int, n: int) -> tuple[int, StepSummary] | None:
    if not isinstance(raw, dict):
        return None
    summary = raw.get("summary")
    index = raw.get("index", position)
    if not isinstance(summary, str) or not summary.strip():
        return None
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
        return None
    entities: list[Entity] = []
    raw_entities = raw.get("entities") or []
    for item in raw_entities if isinstance(raw_entities, list) else []:
        entity = entity_from_json(item)
        if entity is not None:
            entities.append(entity)
    return index, StepSummary(summary=summary.strip(), entities=tuple(entities))


def parse_summaries(text: str, n: int) -> ParsedSummaries:
    """Parse the model's answer for `n` steps (indices 0..n-1)."""
    array, truncated, error = extract_json_array(text)
    if array is None:
        return ParsedSummaries({}, error=error)
    items: dict[int, StepSummary] = {}
    bad = 0
    for position, raw in enumerate(array):
        entry = _entry(raw, position, n)
        if entry is None or entry[0] in items:
            bad += 1
            continue
        items[entry[0]] = entry[1]
    error = f"{bad} unusable entr{'y' if bad == 1 else 'ies'}" if bad else None
    return ParsedSummaries(items, error=error, truncated=truncated)

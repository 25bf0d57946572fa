"""Robust parsing of the summariser's answer: a JSON array of per-step objects.

Accepted: prose before or after the array; one outer fenced code block; a
truncated array (the complete entries before the cut are kept). Rejected as
ambiguous: more than one JSON value, or more than one fenced block.
Each entry: `{"index": <int>, "summary": <str>, "entities": [{"type", "id"}]}`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from attrs import frozen

from agent_memory.domain.records import Entity
from agent_memory.domain.steps import StepSummary, entity_from_json

__all__ = ["ParsedSummaries", "parse_summaries"]

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)(?:\n```|\Z)", re.DOTALL)
_DECODER = json.JSONDecoder()


@frozen
class ParsedSummaries:
    """Summaries by step index; `error` says why the answer (or part) was unusable;
    `truncated` when the array was cut and only its complete entries were kept."""

    items: dict[int, StepSummary]
    error: str | None = None
    truncated: bool = False


def _unfence(text: str) -> tuple[str, str | None]:
    fences = _FENCE.findall(text)
    if len(fences) > 1:
        return text, "more than one fenced block"
    if len(fences) == 1:
        return fences[0], None
    return text, None


_ARRAY_START = re.compile(r"\[\s*[{\]]")


def _other_json(text: str) -> bool:
    """Whether `text` holds any further JSON array or object."""
    for match in re.finditer(r"[\[{]", text):
        try:
            _DECODER.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        return True
    return False


def _find_array(text: str) -> tuple[list[Any] | None, bool, str | None]:
    """(entries, truncated, error) for the first array of objects in `text`."""
    match = _ARRAY_START.search(text)
    if match is None:
        return None, False, "no JSON array in the answer"
    try:
        value, end = _DECODER.raw_decode(text, match.start())
    except json.JSONDecodeError:
        partial = _truncated_items(text[match.start() :])
        if not partial:
            return None, False, "the answer's JSON array is malformed"
        return partial, True, None
    if _other_json(text[end:]) or _other_json(text[: match.start()]):
        return None, False, "ambiguous answer: more than one JSON value"
    assert isinstance(value, list)
    return value, False, None


def _truncated_items(text: str) -> list[Any] | None:
    """The complete elements of an array that was cut off, or None."""
    start = text.find("[")
    if start == -1:
        return None
    items: list[Any] = []
    pos = start + 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return items if pos >= len(text) else None
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            return items
        items.append(value)


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
    body, fence_error = _unfence(text)
    if fence_error is not None:
        return ParsedSummaries({}, error=f"ambiguous answer: {fence_error}")
    array, truncated, error = _find_array(body)
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

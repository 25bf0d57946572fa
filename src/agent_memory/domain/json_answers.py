"""Finding the JSON a language model was asked for inside what it answered.

Accepted: prose before or after the value; one outer fenced code block; a
truncated array (the complete elements before the cut are kept). Rejected as
ambiguous: more than one JSON value, or more than one fenced block.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["extract_json_array", "extract_json_object"]

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)(?:\n```|\Z)", re.DOTALL)
_DECODER = json.JSONDecoder()


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


def extract_json_array(text: str) -> tuple[list[Any] | None, bool, str | None]:
    """(elements, truncated, error): the one JSON array of objects in `text`."""
    body, fence_error = _unfence(text)
    if fence_error is not None:
        return None, False, f"ambiguous answer: {fence_error}"
    return _find_array(body)


def extract_json_object(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """(object, error): the one top-level JSON object in `text`."""
    body, fence_error = _unfence(text)
    if fence_error is not None:
        return None, f"ambiguous answer: {fence_error}"
    found: list[Any] = []
    for match in re.finditer(r"{", body):
        if found and match.start() < found[-1][1]:
            continue
        try:
            value, end = _DECODER.raw_decode(body, match.start())
        except json.JSONDecodeError:
            continue
        found.append((value, end))
    if not found:
        return None, "no JSON object in the answer"
    if len(found) > 1:
        return None, "ambiguous answer: more than one JSON value"
    value = found[0][0]
    if not isinstance(value, dict):
        return None, "the answer's JSON value is not an object"
    return value, None

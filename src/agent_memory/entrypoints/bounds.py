"""The bounds every network entry point enforces on what a client sends (the
HTTP service's bodies and the MCP server's tools share them), as strict pydantic
types: one definition, so the two cannot drift apart.

Besides sizes, the wire types apply the library's own text rules at the wire,
where the offending argument is still known by its path (`facts.0.content`):
no NUL and no lone surrogate in any text (neither can be stored alike as UTF-8
by every backend), ids not blank and at most `MAX_ID_BYTES` of UTF-8. A value
the library would refuse deep inside a fail-open stage (a step's event, a
reconciled fact) is refused here instead, naming its field. `describe` turns a
pydantic error into that field and a message, for both entry points."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Field, StrictStr
from pydantic_core import PydanticCustomError

from agent_memory.domain.validation import MAX_ID_BYTES, json_strings

__all__ = [
    "MAX_BATCH",
    "REFUSED_TEXT",
    "Action",
    "Doing",
    "FactContent",
    "Id",
    "IdChecks",
    "Instant",
    "Limit",
    "Outcome",
    "Query",
    "Text",
    "Unit",
    "describe",
    "storable_json",
]

#: The pydantic error types of a value the library itself refuses (its
#: `InvalidInput`): text that cannot be stored, a blank or over-long id.
REFUSED_TEXT = frozenset(
    {"string_unicode", "text_nul", "text_surrogate", "text_blank", "id_blank", "id_bytes"}
)
_SURROGATE = "text must be valid Unicode (no lone surrogates)"


def _storable(value: str) -> str:
    """Text without NUL (a lone surrogate already fails the str type itself)."""
    if "\x00" in value:
        raise PydanticCustomError("text_nul", "text must not contain NUL (\\x00)")
    return value


def _non_blank(value: str) -> str:
    """Text that is not only whitespace: a fact the library refuses as blank
    (refused here where its field, `facts.0.content`, is known), a step's
    action (a blank one records nothing an agent can read)."""
    if not value.strip():
        raise PydanticCustomError("text_blank", "must not be blank")
    return value


def _id(value: str) -> str:
    """An id as the library takes it: not blank, at most MAX_ID_BYTES of UTF-8."""
    if not value.strip():
        raise PydanticCustomError("id_blank", "a non-blank id is required")
    if len(value) * 4 > MAX_ID_BYTES and len(value.encode("utf-8")) > MAX_ID_BYTES:
        raise PydanticCustomError(
            "id_bytes", "at most {limit} bytes of UTF-8 are allowed", {"limit": MAX_ID_BYTES}
        )
    return value


def storable_json(value: Any) -> Any:
    """A JSON value (free-form metadata) whose strings and keys hold no NUL and
    no lone surrogate."""
    for item in json_strings(value):
        _storable(item)
        if not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise PydanticCustomError("text_surrogate", _SURROGATE) from None
    return value


_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def _iso_text(value: Any) -> Any:
    """A date-time as the ISO-8601 text it is documented as: pydantic's lax
    mode read a number, a bool or a string of digits as a Unix time, so
    `"started_at": 1700000000` (a client's epoch seconds, or milliseconds:
    another date altogether) was taken without a word."""
    if isinstance(value, datetime):
        return value  # a Python caller's own value
    if not isinstance(value, str) or _NUMBER.fullmatch(value):
        raise PydanticCustomError(
            "datetime_type", "an ISO-8601 date-time string with a time zone is required"
        )
    return value


_Text = AfterValidator(_storable)
#: The checks of an id without its type and sizes (for HTTP query parameters,
#: whose sizes their `Query(...)` gives).
IdChecks = Annotated[str, _Text, AfterValidator(_id)]
Id = Annotated[StrictStr, Field(min_length=1, max_length=1024), _Text, AfterValidator(_id)]
Text = Annotated[StrictStr, Field(max_length=1_000_000), _Text]
FactContent = Annotated[
    StrictStr, Field(min_length=1, max_length=100_000), _Text, AfterValidator(_non_blank)
]
Query = Annotated[StrictStr, Field(min_length=1, max_length=65_536), _Text]
Action = Annotated[
    StrictStr, Field(min_length=1, max_length=10_000), _Text, AfterValidator(_non_blank)
]
Outcome = Annotated[StrictStr, Field(max_length=1_000), _Text]
Doing = Annotated[StrictStr, Field(max_length=10_000), _Text]
#: At most this many facts, steps or knowledge items in one request.
MAX_BATCH = 100
#: A page or result size (`limit`): a JSON integer, never "5", 5.0 or true.
Limit = Annotated[int, Field(strict=True, ge=1, le=200)]
#: A confidence or importance: a JSON number in [0, 1], never "0.9" or true.
Unit = Annotated[float, Field(strict=True, ge=0.0, le=1.0)]
#: An instant: ISO-8601 text with a time zone, never a number read as Unix time.
Instant = Annotated[AwareDatetime, BeforeValidator(_iso_text)]


def describe(
    error: Mapping[str, Any], *, skip: Sequence[str] = (), whole: str = "body"
) -> tuple[str, str, bool]:
    """`(field, message, refused)` of one pydantic error: the dotted path of the
    argument (`facts.0.content`; leading parts in `skip` dropped, e.g. the
    HTTP `body`/`query`; `whole` when the whole input is at fault), a message
    without the offending value, and whether it is a value the library refuses
    (`REFUSED_TEXT`: its `InvalidInput`) rather than a schema mismatch."""
    loc = [str(part) for part in error.get("loc", ())]
    path = loc[1:] if loc and loc[0] in skip else loc
    field = ".".join(path) or (loc[0] if loc else whole)
    kind = str(error.get("type", ""))
    message = _SURROGATE if kind == "string_unicode" else str(error.get("msg", "invalid value"))
    return field, message, kind in REFUSED_TEXT

"""Page cursors bound to the listing that made them.

The library's cursors are keyset positions (`created_at` and id of the last
record, `at` and id of the last audit entry): they name no owner, so a cursor
of one listing passed to another would be read as a position in it, and the
answer a page of the other listing that silently skips everything newer than
that position. Over HTTP a cursor is the library's prefixed with a tag of its
listing (tenant, user, namespace, ...): passed to another listing it is the
`422 invalid-input` problem naming the argument, never a wrong page. The tag
is a digest, not a secret: a forged one reaches nothing but the caller's own
listing, which the stored scope already decides."""

from __future__ import annotations

import hashlib
import json

from agent_memory.domain.errors import InvalidInput

__all__ = ["bind", "unbind"]

_SEP = "."  # never in a library cursor (URL-safe base64)


def _tag(scope: tuple[str | None, ...]) -> str:
    return hashlib.sha256(json.dumps(scope).encode()).hexdigest()[:16]


def bind(cursor: str | None, *scope: str | None) -> str | None:
    """The cursor to give the caller for a page of the listing `scope`."""
    return None if cursor is None else f"{_tag(scope)}{_SEP}{cursor}"


def unbind(cursor: str | None, field: str, *scope: str | None) -> str | None:
    """The library's cursor inside one the caller sent for the listing
    `scope`; `InvalidInput` naming `field` when it is not a cursor of that
    listing (another user, namespace or tenant, or no cursor of ours)."""
    if cursor is None:
        return None
    tag, sep, inner = cursor.partition(_SEP)
    if not sep or tag != _tag(scope):
        raise InvalidInput(
            field,
            "not a cursor of this listing: pass the cursor a page of the same "
            "listing (tenant, user, namespace) returned, or none to start again",
        )
    return inner

"""Names derived from ids that must themselves fit an id (MAX_ID_BYTES): a
derived name is kept when it fits, else replaced by a SHA-256 under a prefix no
kept name starts with. One rule for every such name (a user's cache scope,
coordination lease keys and owners, the LangGraph layout's names), so they
cannot drift apart. These names key data already stored: each caller's output
must stay byte-identical for every input."""

from __future__ import annotations

import hashlib

from agent_memory.domain.validation import MAX_ID_BYTES

__all__ = ["fit_or_digest"]


def fit_or_digest(name: str, hashed_prefix: str, digested: str | None = None) -> str:
    """`name` when it takes at most MAX_ID_BYTES of UTF-8, else `hashed_prefix`
    and the hex SHA-256 of the UTF-8 of `digested` (by default `name` itself).
    The caller picks a `hashed_prefix` no kept name of its own starts with, so a
    hashed name never equals a kept one."""
    if len(name.encode("utf-8")) <= MAX_ID_BYTES:
        return name
    material = name if digested is None else digested
    return hashed_prefix + hashlib.sha256(material.encode("utf-8")).hexdigest()

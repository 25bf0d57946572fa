"""Whole-user forgets in progress, marked where an import looks.

A `UserMemory.forget(user)` writes a mark (one cache entry holding the stored
owner id, scope `FORGETTING_SCOPE`, a random key, a ttl) before it reads or
deletes anything, and removes it after its audit entry is written. An import
(`portability.transfer.import_data`) reads the marks, then the audit trail,
after its last write: a forget it finds in neither started after that read, so
it deletes everything the import wrote; one it finds by either is treated as
done and what the import wrote of that user is removed. (Read in that order: a
forget unmarks only after its entry is written, so it is in one of the two.)

A mark outlives a forget that never ends (a killed process) by its ttl at most;
meanwhile imports leave that user's items out as if the forget had completed.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from agent_memory.ports.storage import Cache, CacheListing

__all__ = ["FORGETTING_SCOPE", "MARK_TTL", "being_forgotten", "mark_forgetting", "unmark"]

FORGETTING_SCOPE = "agent-memory/forgetting"
#: How long a mark lasts when its forget never removes it.
MARK_TTL = timedelta(hours=1)


async def mark_forgetting(cache: Cache, user_id: str) -> str:
    """Mark a forget of `user_id` in progress; the mark's key (for `unmark`)."""
    key = secrets.token_hex(8)
    await cache.put(FORGETTING_SCOPE, key, user_id.encode("utf-8"), ttl=MARK_TTL)
    return key


async def unmark(cache: Cache, key: str) -> None:
    await cache.delete(FORGETTING_SCOPE, key)


async def being_forgotten(cache: Cache | None) -> frozenset[str]:
    """The users whose forget is marked in progress in `cache` (none without a
    cache, or one that cannot list its entries)."""
    if cache is None or not isinstance(cache, CacheListing):
        return frozenset()
    entries = await cache.entries(FORGETTING_SCOPE)
    return frozenset(e.value.decode("utf-8", "replace") for e in entries)

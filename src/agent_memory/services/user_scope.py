"""Where data derived from one user's data is kept, so that forgetting the user
finds it: the user's cache scope."""

from __future__ import annotations

import json

from agent_memory.domain.bounded_names import fit_or_digest

__all__ = ["user_cache_scope"]


def user_cache_scope(user_id: str) -> str:
    """The cache scope of entries derived from one user's data: `user:` and the
    id as JSON, or `user:sha256:<hex of the id>` when that would pass
    MAX_ID_BYTES (a valid user id takes up to 512 bytes, its JSON more; no JSON
    string starts with `s`, so the two forms never meet)."""
    return fit_or_digest("user:" + json.dumps(user_id, ensure_ascii=False), "user:sha256:", user_id)

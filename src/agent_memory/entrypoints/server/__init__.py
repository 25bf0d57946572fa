"""The HTTP service (`agent-memory serve`, extra `server`): the memory services
for callers in any language. See docs/server.md.

The names below are imported on first use, so `agent-memory --help` (which
imports `.cli`) never loads the web framework, and `import agent_memory` never does.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["ApiKey", "KeyRing", "ServerConfig", "Tenant", "create_app", "hash_key", "new_key"]

_WHERE = {
    "ServerConfig": "app",
    "create_app": "app",
    "ApiKey": "keys",
    "KeyRing": "keys",
    "hash_key": "keys",
    "new_key": "keys",
    "Tenant": "tenancy",
}

if TYPE_CHECKING:
    from agent_memory.entrypoints.server.app import ServerConfig, create_app
    from agent_memory.entrypoints.server.keys import ApiKey, KeyRing, hash_key, new_key
    from agent_memory.entrypoints.server.tenancy import Tenant


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)

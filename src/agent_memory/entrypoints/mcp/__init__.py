"""The MCP server (extra `mcp`): `agent-memory mcp`, or `build_server(url)`.

`build_server` is imported on first use, so `agent-memory --help` (which
imports `.cli`) never loads the MCP SDK or the web framework under it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["build_server"]

if TYPE_CHECKING:
    from agent_memory.entrypoints.mcp.server import build_server


def __getattr__(name: str) -> Any:
    if name != "build_server":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.server").build_server

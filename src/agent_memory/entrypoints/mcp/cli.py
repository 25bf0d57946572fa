"""`agent-memory mcp`: serve one store URL over stdio (default) or streamable HTTP."""

from __future__ import annotations

import logging
import sys

from agent_memory.domain.errors import UnsupportedBackend

__all__ = ["run_mcp"]


def run_mcp(url: str | None, transport: str, host: str, port: int) -> int:
    """Run until the client disconnects (stdio) or SIGINT/SIGTERM (HTTP). Logs
    go to stderr: stdout belongs to the protocol on stdio."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise UnsupportedBackend(
            "agent-memory mcp needs the 'mcp' extra: pip install 'agent-memory[mcp]'"
        ) from None
    from agent_memory.bootstrap import scheme_of
    from agent_memory.entrypoints.mcp.server import build_server

    if url is not None:
        scheme_of(url)  # an unknown scheme is a usage error before anything starts
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    server = build_server(url)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
    return 0

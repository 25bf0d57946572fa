"""The MCP server (extra `mcp`): `agent-memory mcp`, or `build_server(url)`."""

from agent_memory.entrypoints.mcp.server import build_server

__all__ = ["build_server"]

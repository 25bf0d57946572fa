"""`agent-memory mcp`: serve one store URL over stdio (default) or streamable HTTP.

Over stdio the server has one local user (the process that launched it) and
uses `user_id` as given. Over HTTP it needs the API keys of `agent-memory
serve` (`--keys FILE`, else `AGENT_MEMORY_SERVER_KEYS_FILE`, else the JSON in
`AGENT_MEMORY_SERVER_KEYS`), and refuses to start without them: a
network-reachable server that trusts `user_id` is never started by accident.
`--no-auth` is the explicit exception, for a loopback host only.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from agent_memory.domain.errors import ConfigurationError, UnsupportedBackend

__all__ = ["LOOPBACK", "add_arguments", "run_mcp"]

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
# The HTTP service's key variables, which the library's settings (that refuse
# unknown AGENT_MEMORY_* names) do not know.
_KEY_VARIABLES = ("AGENT_MEMORY_SERVER_KEYS", "AGENT_MEMORY_SERVER_KEYS_FILE")


def add_arguments(parser: Any) -> None:
    from agent_memory.entrypoints.options import choice, integer, seconds, text

    parser.add_argument(
        "--url",
        type=text("--url"),
        help="storage URL (default: AGENT_MEMORY_URL or the SQLite file)",
    )
    parser.add_argument(
        "--transport",
        choices=["stdio", "http"],
        type=choice("--transport", ("stdio", "http")),
        default="stdio",
    )
    parser.add_argument("--host", default="127.0.0.1", help="HTTP host (default: 127.0.0.1)")
    parser.add_argument(
        "--port", type=integer("--port", 0, 65535), default=8000, help="HTTP port (default: 8000)"
    )
    parser.add_argument(
        "--keys",
        metavar="FILE",
        type=text("--keys"),
        help="with --transport http: the API key file of `agent-memory serve` (default: "
        "AGENT_MEMORY_SERVER_KEYS_FILE, else the JSON in AGENT_MEMORY_SERVER_KEYS); "
        "required unless --no-auth",
    )
    parser.add_argument(
        "--no-auth",
        action="store_true",
        help="with --transport http on a loopback host: no keys, one local user whose "
        "user_id is trusted (as over stdio)",
    )
    parser.add_argument(
        "--call-timeout",
        type=seconds("--call-timeout"),
        default=30.0,
        metavar="SECONDS",
        help="a tool call that has not answered after this many seconds answers a "
        "DeadlineExceeded tool error and its work is cancelled (default: 30)",
    )


def run_mcp(args: Any, load_keys: Callable[[str | None], Any]) -> int:
    """Run until the client disconnects (stdio) or SIGINT/SIGTERM (HTTP). Logs
    go to stderr: stdout belongs to the protocol on stdio. `load_keys(path)`
    reads the key file (the HTTP service's `KeyRing.from_env`)."""
    keys = _check(args, load_keys)
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise UnsupportedBackend(
            "agent-memory mcp needs the 'mcp' extra: pip install 'agent-memory[mcp]'"
        ) from None
    from agent_memory.bootstrap import Settings, scheme_of
    from agent_memory.entrypoints.mcp.server import build_server

    if args.url is not None:
        scheme_of(args.url)  # an unknown scheme is a usage error before anything starts
    env = {k: v for k, v in os.environ.items() if k not in _KEY_VARIABLES}
    settings = Settings.from_env(env)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    server = build_server(args.url, keys=keys, settings=settings, call_timeout=args.call_timeout)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port)
    return 0


def _check(args: Any, load_keys: Callable[[str | None], Any]) -> Any:
    """The keys to serve with (None: one local user), or a usage error."""
    if args.transport == "stdio":
        if args.keys is not None or args.no_auth:
            raise ConfigurationError(
                "--keys and --no-auth are for --transport http: over stdio the server "
                "has one local user"
            )
        return None
    if args.no_auth:
        if args.keys is not None:
            raise ConfigurationError("give --keys or --no-auth, not both")
        if args.host not in LOOPBACK:
            raise ConfigurationError(
                f"--no-auth serves on a loopback host only ({', '.join(sorted(LOOPBACK))}), "
                f"not {args.host!r}: use API keys (--keys) on any other address"
            )
        return None
    return load_keys(args.keys)  # ConfigurationError when none is configured

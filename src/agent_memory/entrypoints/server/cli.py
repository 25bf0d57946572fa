"""`agent-memory serve`: run the HTTP service under uvicorn (one process).

SIGTERM or SIGINT: stop accepting, let in-flight requests finish (at most
`--drain-timeout` seconds), finish every open agent request (claims released),
close the backend, exit 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from typing import Any

from agent_memory.domain.errors import ConfigurationError

__all__ = ["MAX_BODY_BYTES", "MAX_BURST", "MAX_RATE", "add_arguments", "run_serve"]

#: The largest --max-body-bytes (1 GiB), --burst and --rate the CLI accepts.
MAX_BODY_BYTES = 1024**3
MAX_BURST = 1_000_000
MAX_RATE = 1_000_000.0


def add_arguments(parser: Any) -> None:
    from agent_memory.entrypoints.options import integer, seconds, text

    parser.add_argument(
        "--url",
        type=text("--url"),
        help="storage URL (default: AGENT_MEMORY_URL or the SQLite file)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=integer("--port", 0, 65535),
        default=8080,
        help="port (default 8080; 0: any free)",
    )
    parser.add_argument(
        "--keys",
        type=text("--keys"),
        help="API key file (JSON, digests only; default: AGENT_MEMORY_SERVER_KEYS_FILE, "
        "else the JSON in AGENT_MEMORY_SERVER_KEYS)",
    )
    parser.add_argument(
        "--max-body-bytes", type=integer("--max-body-bytes", 1, MAX_BODY_BYTES), default=1024 * 1024
    )
    parser.add_argument(
        "--rate",
        type=seconds("--rate", maximum=MAX_RATE, what="a number of requests/s"),
        default=50.0,
        help="requests/s per key (average)",
    )
    parser.add_argument(
        "--burst",
        type=integer("--burst", 1, MAX_BURST),
        default=100,
        help="requests per key in a burst",
    )
    parser.add_argument(
        "--idle-timeout",
        type=seconds("--idle-timeout"),
        default=600.0,
        help="finish agent requests idle this long (s)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=seconds("--drain-timeout", zero=True),
        default=30.0,
        help="shutdown drain (s)",
    )
    parser.add_argument(
        "--request-timeout",
        type=seconds("--request-timeout"),
        default=30.0,
        help="answer 503 deadline-exceeded when a response has not started in this long (s)",
    )
    parser.add_argument(
        "--ui", action="store_true", help="also serve the inspector page at /ui (same API keys)"
    )
    parser.add_argument(
        "--new-key",
        metavar="TENANT",
        help="print a new API key for TENANT and its key-file entry, then exit",
    )
    parser.add_argument("--read-only", action="store_true", help="with --new-key: a read-only key")
    parser.add_argument(
        "--admin", action="store_true", help="with --new-key: may read the tenant's audit trail"
    )
    parser.add_argument(
        "--bind-user",
        metavar="USER_ID",
        help="with --new-key: bind the key to this one user id of the tenant",
    )
    parser.add_argument("--openapi", action="store_true", help="print the OpenAPI schema and exit")


def run_serve(args: Any) -> int:
    try:
        import uvicorn  # noqa: F401 (the extra is checked here, used in _serve)

        from agent_memory.entrypoints.server.app import ServerConfig, create_app
        from agent_memory.entrypoints.server.keys import KeyRing, hash_key, new_key
        from agent_memory.entrypoints.server.tenancy import Tenant
    except ImportError as exc:
        raise ConfigurationError(
            f"`serve` needs the 'server' extra: pip install 'agent-memory[server]' ({exc.name})"
        ) from None
    if args.new_key is not None:
        tenant = Tenant(args.new_key)
        key = new_key()
        entry = {"id": f"{tenant.name}-{hash_key(key)[:8]}", "tenant": tenant.name,
                 "sha256": hash_key(key), "read_only": bool(args.read_only)}  # fmt: skip
        if args.admin:
            entry["admin"] = True
        if args.bind_user is not None:
            from agent_memory.domain.validation import require_id

            entry["user"] = require_id(args.bind_user, "--bind-user")
        print(f"key (shown once, give it to the caller): {key}")
        print(f"key-file entry: {json.dumps(entry)}")
        return 0
    if args.openapi:
        app = create_app(ServerConfig(), KeyRing(text='{"keys": []}'))
        print(json.dumps(app.openapi(), indent=2, sort_keys=True))
        return 0
    for name in ("max_body_bytes", "burst"):
        if getattr(args, name) < 1:
            raise ConfigurationError(f"--{name.replace('_', '-')} must be at least 1")
    if (
        not args.rate > 0
        or not args.idle_timeout > 0
        or not args.request_timeout > 0
        or args.drain_timeout < 0
    ):
        raise ConfigurationError(
            "--rate, --idle-timeout and --request-timeout must be > 0, --drain-timeout >= 0"
        )
    keys = KeyRing.from_env(args.keys)
    config = ServerConfig(
        url=args.url,
        max_body_bytes=args.max_body_bytes,
        rate=args.rate,
        burst=args.burst,
        idle_timeout=args.idle_timeout,
        request_timeout=args.request_timeout,
        ui=bool(args.ui),
    )
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    return asyncio.run(_serve(args, config, keys))


async def _serve(args: Any, config: Any, keys: Any) -> int:
    """Open the backend first (a bad URL or an unreachable backend is the CLI's
    one-line error, not a traceback from inside the server), then serve."""
    import uvicorn

    from agent_memory.bootstrap import Settings, connect
    from agent_memory.entrypoints.server.app import create_app
    from agent_memory.entrypoints.server.keys import ENV_KEYS, ENV_KEYS_FILE

    # The key variables are the server's, not the library's settings (which
    # refuse unknown AGENT_MEMORY_* names).
    env = {k: v for k, v in os.environ.items() if k not in (ENV_KEYS, ENV_KEYS_FILE)}
    memory = await connect(args.url, settings=Settings.from_env(env))

    async def opened() -> Any:
        return memory

    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config, keys, open_memory=opened),
            host=args.host,
            port=args.port,
            access_log=False,  # ours is structured and carries no ids (middleware)
            log_config=None,
            lifespan="on",
            timeout_graceful_shutdown=args.drain_timeout,
            server_header=False,
        )
    )
    try:
        await server.serve()
    finally:
        await memory.close()  # idempotent: normally closed by the app's shutdown
    return 0 if server.started else 1

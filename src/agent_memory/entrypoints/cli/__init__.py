"""The `agent-memory` command: demo, doctor, conformance, reflect, processor, audit.

Every subcommand validates configuration first (`AGENT_MEMORY_*`). Exit codes:
0 success; 1 a runtime failure (a backend unreachable, a failed stage), shown as
one line, never a traceback; 2 a usage error (bad arguments, bad configuration
or URL; a bare `agent-memory` prints the help). `conformance` documents its own.
An option value is checked as it is parsed (`options.py`): a bad one is one
line, `agent-memory COMMAND: InvalidInput: --option: ...`, exit 2.

A one-shot command (all but `serve`, `mcp` and `processor`, which are services
with their own logs) reports a failure as that one line only: client libraries
that log every failed connection attempt themselves (`psycopg.pool`) are set to
ERROR while the command runs, unless a level was set for them already; the
library itself never touches logging, so an application that configured it
still sees those warnings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import select
import sys
from collections.abc import Iterator, Sequence

from agent_memory.domain.errors import ConfigurationError, InvalidInput, UnsupportedBackend

__all__ = ["main"]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agent-memory")
    except PackageNotFoundError:
        return "0+unknown"


def _parser() -> argparse.ArgumentParser:
    from agent_memory.entrypoints.options import text

    _url = text("--url")
    parser = argparse.ArgumentParser(
        prog="agent-memory",
        description="Shared memory for LLM agents.",
        epilog="exit codes: 0 success; 1 runtime failure; 2 usage or configuration error",
    )
    parser.add_argument("--version", action="version", version=f"agent-memory {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="play the two-agent scenario offline and print the views",
        description="Two agents share memory about an OOMKilled pod, then a user's "
        "preferences are learnt, recalled and forgotten. Offline (hashing embedder, "
        "rule-based summaries) on a temporary SQLite file unless --url names another.",
    )
    demo.add_argument("--url", type=_url, help="storage URL (default: a temporary SQLite file)")
    demo.add_argument("--json", action="store_true", help="also print every stage report as JSON")

    doctor = sub.add_parser(
        "doctor",
        help="show configuration, reachability and server versions",
        description="Check the configuration and every storage port of a URL without "
        "changing anything: a SQLite file that does not exist yet is reported as "
        "'would create', not created. Exit 0 when every part is usable.",
    )
    doctor.add_argument(
        "--url", type=_url, help="storage URL (default: AGENT_MEMORY_URL or the SQLite file)"
    )
    doctor.add_argument(
        "--config", action="store_true", help="print every setting and its source, then exit"
    )

    reflect = sub.add_parser(
        "reflect",
        help="run one reflection pass now (distil old events)",
        description="One reflection pass: events older than AGENT_MEMORY_REFLECTION_AGE_"
        "THRESHOLD_DAYS about entities with enough of them become knowledge fragments. "
        "Says why when nothing was processed.",
    )
    reflect.add_argument(
        "--url", type=_url, help="storage URL (default: AGENT_MEMORY_URL or the SQLite file)"
    )
    reflect.add_argument(
        "--domain",
        action="append",
        required=True,
        type=text("--domain"),
        help="a domain to reflect on (repeatable)",
    )

    proc = sub.add_parser(
        "processor",
        help="run the graph memory processor on NATS JetStream (extra: nats)",
        description="Consume events from NATS JetStream, extract fact triples and keep "
        "checkpoints (docs/graph.md). Runs until SIGINT/SIGTERM.",
    )
    proc.add_argument(
        "--nats", type=text("--nats"), help="NATS URL (default: the config's nats_url)"
    )
    proc.add_argument(
        "--config", type=text("--config"), help="JSON configuration document (see docs/graph.md)"
    )
    proc.add_argument(
        "--url", type=_url, help="storage URL (default: AGENT_MEMORY_URL or the SQLite file)"
    )

    conf = sub.add_parser(
        "conformance",
        help="run the shipped contract suite against a backend or your own store",
        description="Preflight (protocol check and ping), then the contract suite, then a "
        "verdict per port. Needs the 'conformance' extra.",
        epilog="exit codes: 0 PASS (every claimed port ran tests, none failed); 1 FAIL (a test "
        "failed or a claimed port ran no test); 2 bad arguments or configuration; 3 preflight "
        "failed (missing/misnamed methods, missing extra, unreachable backend; no test ran); "
        "4 the 'conformance' extra is not installed",
    )
    target = conf.add_mutually_exclusive_group(required=True)
    target.add_argument("url", nargs="?", help="backend URL, e.g. sqlite:///tmp/x.db")
    target.add_argument(
        "--factory",
        help="package.module:callable returning EMPTY store(s) (one port, or a mapping "
        "with keys store/events/leases/cache/audit); it may carry `capabilities` and `reopen(obj)`",
    )
    conf.add_argument(
        "--keep",
        action="store_true",
        help="keep the generated tests and the test data (files, schemas, keys) for inspection",
    )
    conf.add_argument("-k", dest="keyword", help="only tests matching this pytest -k expression")
    conf.add_argument("-q", "--quiet", action="store_true", help="less output")

    serve = sub.add_parser(
        "serve",
        help="run the HTTP service for callers in any language (extra: server)",
        description="Serve the memory over HTTP with tenant-bound API keys (docs/server.md). "
        "Runs until SIGINT/SIGTERM, then drains in-flight requests and releases claims.",
    )
    from agent_memory.entrypoints.server.cli import add_arguments as add_serve_arguments

    add_serve_arguments(serve)

    mcp = sub.add_parser(
        "mcp",
        help="run the MCP server for one store URL (extra: mcp)",
        description="Serve user memory (remember, recall, forget, search_memories), agent "
        "steps and planning context as MCP tools, and the user profile as a resource "
        "(docs/integrations.md). stdio by default (one local user); --transport http for "
        "streamable HTTP with the API keys of `serve` (tenant from the key, optionally bound "
        "to one user).",
    )
    from agent_memory.entrypoints.mcp.cli import add_arguments as add_mcp_arguments

    add_mcp_arguments(mcp)

    from agent_memory.entrypoints.cli.portability import add_parsers

    add_parsers(sub)  # export, import, migrate, reembed

    from agent_memory.entrypoints.cli.audit import add_parser as add_audit_parser

    add_audit_parser(sub)
    return parser


# Errors that mean "you asked for something invalid" (exit 2), not "it failed" (exit 1).
_USAGE_ERRORS = (ConfigurationError, InvalidInput, UnsupportedBackend)
# Loggers of client libraries that warn on every failed connection attempt (a
# pool retrying until its timeout): the typed error that follows says it once.
_CHATTY_LOGGERS = ("psycopg.pool",)
# Long-running services: their logs are theirs to keep.
_SERVICES = frozenset({"serve", "mcp", "processor"})


@contextlib.contextmanager
def _quiet_clients(command: str) -> Iterator[None]:
    """While a one-shot command runs, the chatty client loggers log errors only
    (a level already set for one is left alone); restored afterwards, so an
    in-process caller's logging is as it was."""
    changed: list[logging.Logger] = []
    if command not in _SERVICES:
        for name in _CHATTY_LOGGERS:
            logger = logging.getLogger(name)
            if logger.level == logging.NOTSET:
                logger.setLevel(logging.ERROR)
                changed.append(logger)
    try:
        yield
    finally:
        for logger in changed:
            logger.setLevel(logging.NOTSET)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; its output is flushed here, so stdout closed early
    (`agent-memory ... | head -1`) ends in the one line of `_closed_output`, not
    in Python's "Exception ignored ... BrokenPipeError" at exit (status 120)."""
    command: list[str] = []
    try:
        try:
            return _main(argv, command)
        finally:
            if sys.stdout is not None:
                sys.stdout.flush()  # what a block-buffered pipe still holds
    except BrokenPipeError:
        return _closed_output(command[0] if command else None)


def _closed_output(command: str | None) -> int:
    """stdout's reader is gone: say so once on stderr, exit 1 (the output is
    incomplete), and point stdout at /dev/null so that nothing fails again at
    exit (its buffer still holds what could not be written)."""
    _to_devnull(sys.stdout)
    where = f"agent-memory {command}" if command else "agent-memory"
    try:
        print(f"{where}: BrokenPipeError: the output was closed before it ended", file=sys.stderr)
        sys.stderr.flush()
    except OSError:  # stderr went with it (`2>&1 | head`): nothing left to tell
        _to_devnull(sys.stderr)
    return 1


def _to_devnull(stream: object) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = stream.fileno()  # type: ignore[attr-defined]
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
        finally:
            os.close(devnull)


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (the write end polls as
    an error), as opposed to a BrokenPipeError from a backend's socket."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return False
    if not hasattr(select, "poll"):  # pragma: no cover - not on Linux/macOS
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _main(argv: Sequence[str] | None, command: list[str]) -> int:
    from agent_memory.entrypoints.options import BadOption

    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except BadOption as exc:  # a checked option value (options.py): one typed line
        given = sys.argv[1:] if argv is None else list(argv)
        name = next((a for a in given if not a.startswith("-")), None)
        where = f"agent-memory {name}" if name else "agent-memory"
        print(f"{where}: {type(exc.error).__name__}: {exc.error}", file=sys.stderr)
        return 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    command.append(args.command)
    try:
        with _quiet_clients(args.command):
            return _dispatch(args)
    except BrokenPipeError as exc:
        if _stdout_gone():
            raise  # stdout closed early: `main` says so once
        print(f"agent-memory {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("agent-memory: interrupted", file=sys.stderr)
        return 130
    except _USAGE_ERRORS as exc:
        print(f"agent-memory {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a runtime failure: one line, no traceback
        print(f"agent-memory {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        from agent_memory.entrypoints.cli.demo import run_demo

        return asyncio.run(run_demo(args.url, as_json=args.json))
    if args.command == "doctor":
        from agent_memory.entrypoints.cli.doctor import run_doctor

        return asyncio.run(run_doctor(args.url, config_only=args.config))
    if args.command == "reflect":
        from agent_memory.entrypoints.cli.reflect import run_reflect

        return asyncio.run(run_reflect(args.url, args.domain))
    if args.command in ("export", "import", "migrate", "reembed"):
        from agent_memory.entrypoints.cli.portability import run

        return run(args)
    if args.command == "audit":
        from agent_memory.entrypoints.cli.audit import run_audit

        return asyncio.run(run_audit(args))
    if args.command == "serve":
        from agent_memory.entrypoints.server.cli import run_serve

        return run_serve(args)
    if args.command == "mcp":
        from agent_memory.entrypoints.mcp.cli import run_mcp

        def load_keys(path: str | None) -> object:
            from agent_memory.entrypoints.server.keys import KeyRing

            return KeyRing.from_env(path)

        return run_mcp(args, load_keys)
    if args.command == "processor":
        from agent_memory.entrypoints.processor.cli import run_processor

        return asyncio.run(run_processor(args.nats, args.config, args.url))
    from agent_memory.entrypoints.cli.conformance import run_conformance

    return run_conformance(
        url=args.url, factory=args.factory, keyword=args.keyword, quiet=args.quiet, keep=args.keep
    )

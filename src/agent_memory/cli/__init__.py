"""The `agent-memory` command: demo, doctor, conformance, reflect, processor.

Every subcommand validates configuration first (`AGENT_MEMORY_*`), and exits
non-zero with a one-line reason on bad input instead of a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from agent_memory.domain.errors import AgentMemoryError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-memory", description="Shared memory for LLM agents."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser("demo", help="play the two-agent scenario offline and print the views")
    demo.add_argument("--url", help="storage URL (default: a temporary SQLite file)")

    doctor = sub.add_parser("doctor", help="show configuration, reachability and server versions")
    doctor.add_argument("--url", help="storage URL (default: AGENT_MEMORY_URL or the SQLite file)")
    doctor.add_argument(
        "--config", action="store_true", help="print every setting and its source, then exit"
    )

    reflect = sub.add_parser("reflect", help="run one reflection pass now (distil old events)")
    reflect.add_argument("--url", help="storage URL (default: AGENT_MEMORY_URL or the SQLite file)")
    reflect.add_argument(
        "--domain", action="append", required=True, help="a domain to reflect on (repeatable)"
    )

    proc = sub.add_parser(
        "processor", help="run the graph memory processor on NATS JetStream (extra: nats)"
    )
    proc.add_argument("--nats", help="NATS URL (default: the config's nats_url)")
    proc.add_argument("--config", help="JSON configuration document (see docs/graph.md)")
    proc.add_argument("--url", help="storage URL (default: AGENT_MEMORY_URL or the SQLite file)")

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
        "with keys store/events/leases/cache); it may carry `capabilities` and `reopen(obj)`",
    )
    conf.add_argument(
        "--keep",
        action="store_true",
        help="keep the generated tests and the test data (files, schemas, keys) for inspection",
    )
    conf.add_argument("-k", dest="keyword", help="only tests matching this pytest -k expression")
    conf.add_argument("-q", "--quiet", action="store_true", help="less output")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            from agent_memory.cli.demo import run_demo

            return asyncio.run(run_demo(args.url))
        if args.command == "doctor":
            from agent_memory.cli.doctor import run_doctor

            return asyncio.run(run_doctor(args.url, config_only=args.config))
        if args.command == "reflect":
            from agent_memory.cli.reflect import run_reflect

            return asyncio.run(run_reflect(args.url, args.domain))
        if args.command == "processor":
            from agent_memory.entrypoints.processor.cli import run_processor

            return asyncio.run(run_processor(args.nats, args.config, args.url))
        if args.command == "conformance":
            from agent_memory.cli.conformance import run_conformance

            return run_conformance(
                url=args.url,
                factory=args.factory,
                keyword=args.keyword,
                quiet=args.quiet,
                keep=args.keep,
            )
    except AgentMemoryError as exc:
        print(f"agent-memory: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    parser.print_help()
    return 0

"""`agent-memory audit`: list or export the audit trail (docs/audit.md), a thin
wrapper over `Memory.audit` (`agent_memory.services.audit.AuditTrail`)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any, TextIO

from agent_memory.domain.audit import AuditEntry
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.validation import MAX_LIMIT
from agent_memory.entrypoints.options import integer, text

__all__ = ["add_parser", "run_audit"]


def add_parser(sub: Any) -> None:
    """Register `audit` on the main parser's subparsers."""
    aud = sub.add_parser(
        "audit",
        help="list or export the audit trail of forgets, imports, re-embeds, migrations",
        description="One entry per forget (user, namespace, fact), delete_scope, import with "
        "--replace, re-embed switch and migration: when, which operation, tenant and data "
        "subject, the receipt's counts and the caller (an API key id or 'library'); never "
        "user content. Newest first. See docs/audit.md.",
    )
    aud.add_argument(
        "--url",
        type=text("--url"),
        help="storage URL (default: AGENT_MEMORY_URL or the SQLite file)",
    )
    aud.add_argument(
        "--limit",
        type=integer("--limit", 1, MAX_LIMIT),
        metavar="N",
        help="at most this many entries (default: 50 listed, all exported)",
    )
    aud.add_argument(
        "--since", metavar="ISO", help="only entries at or after this ISO-8601 instant"
    )
    aud.add_argument("--tenant", help="only this tenant's entries ('' for the library's own)")
    out = aud.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON Lines, one entry a line")
    out.add_argument(
        "--export",
        metavar="FILE",
        type=text("--export"),
        help="write every entry to FILE as JSON Lines",
    )


def _since(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput("--since", f"an ISO-8601 instant is required, got {text!r}") from None
    if moment.tzinfo is None:
        raise InvalidInput("--since", f"give a time zone (e.g. {text}Z), got {text!r}")
    return moment


def _shown(text: str) -> str:
    """An id as a table cell: printable characters as they are, every other one
    (newline, carriage return, terminal escape, line separator...) escaped, so an
    adversarial user id can neither forge a row nor drive the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _line(entry: AuditEntry) -> str:
    counts = " ".join(f"{k}={v}" for k, v in entry.counts.items())
    caller = _shown(entry.caller)
    who = caller if not entry.tenant else f"{caller}@{_shown(entry.tenant)}"
    subject = "-" if entry.subject is None else _shown(entry.subject)
    return f"{entry.as_json()['at']}  {entry.operation:<16} {subject:<20} {who:<20} {counts}"


async def run_audit(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    from agent_memory.bootstrap.connect import connect

    limit = args.limit
    if limit is not None and not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput("--limit", f"between 1 and {MAX_LIMIT}, got {limit}")
    if limit is None and args.export is None:
        limit = 50
    since = _since(args.since)
    async with connect(args.url) as memory:
        memory.audit_log  # noqa: B018 - a backend without an audit log is a usage error
        entries = memory.audit.entries(tenant=args.tenant, since=since, limit=limit)
        if args.export is not None:
            from agent_memory.services.portability.format import replaced_atomically

            n = 0
            with replaced_atomically(args.export) as stream:
                async for entry in entries:
                    line = json.dumps(entry.as_json(), ensure_ascii=False) + "\n"
                    stream.write(line.encode("utf-8"))
                    n += 1
            print(f"exported {n} audit entries to {args.export}", file=sys.stderr)
            return 0
        n = 0
        async for entry in entries:
            if args.json:
                out.write(json.dumps(entry.as_json(), ensure_ascii=False) + "\n")
            else:
                out.write(_line(entry) + "\n")
            n += 1
        if not args.json:
            print(f"{n} audit entries" + (" (newest first)" if n else ""), file=sys.stderr)
    return 0

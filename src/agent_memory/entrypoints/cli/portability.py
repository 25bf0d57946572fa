"""`agent-memory export | import | migrate | reembed`: thin wrappers over
`agent_memory.portability`. Progress is a bar on stderr only on a terminal; a
summary line ends every run (stderr for `export` to stdout, else stdout)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import Any, TextIO

from agent_memory.domain.records import MAX_DIMENSION
from agent_memory.entrypoints.options import MAX_BATCH, choice, integer, text

__all__ = ["COMMANDS", "add_parsers", "run"]

COMMANDS = ("export", "import", "migrate", "reembed")
_URL_HELP = "storage URL (default: AGENT_MEMORY_URL or the SQLite file)"
_PORTS = ("events", "triples", "cache", "leases", "audit")
_SKIP_HELP = "leave this port out (repeatable: events, triples, cache, leases, audit)"
_SKIP = choice("--skip", _PORTS)
_BATCH = integer("--batch-size", 1, MAX_BATCH)
_REPLACE_HELP = "overwrite stored records whose content differs (else refused, nothing written)"


def add_parsers(sub: Any) -> None:
    """Register the four subcommands on the main parser's subparsers."""
    exp = sub.add_parser(
        "export",
        help="export memory to a versioned JSON Lines file (gzip with .gz)",
        description="Write every port's durable data (memory records with vectors, events, "
        "triples, checkpoints and live cache entries; leases with --leases) to a versioned "
        "JSON Lines file that ends with counts and a checksum. --user writes a data-subject "
        "export of one user's data. See docs/portability.md.",
    )
    exp.add_argument("--url", type=text("--url"), help=_URL_HELP)
    exp.add_argument(
        "-o", "--output", type=text("--output"), help="file to write (.gz: gzip; default: stdout)"
    )
    exp.add_argument(
        "--user", type=text("--user"), help="export only this user's data (data-subject export)"
    )
    exp.add_argument(
        "--namespace", type=text("--namespace"), help="only memory records of this namespace"
    )
    exp.add_argument("--leases", action="store_true", help="include live leases")
    exp.add_argument("--no-cache", action="store_true", help="leave cache entries out")
    exp.add_argument(
        "--skip", action="append", default=[], choices=_PORTS, type=_SKIP, help=_SKIP_HELP
    )

    imp = sub.add_parser(
        "import",
        help="import an export file (idempotent, resumable)",
        description="Verify the whole file first (version, every line, counts, checksum), "
        "then write it in batches. Re-running duplicates nothing; an interrupted import "
        "resumes after its last stored batch (kept in FILE.progress).",
    )
    imp.add_argument("--url", type=text("--url"), help=_URL_HELP)
    imp.add_argument("file", type=text("file"), help="the export file")
    imp.add_argument("--batch-size", type=_BATCH, default=500, help="items per write (500)")
    imp.add_argument("--restart", action="store_true", help="ignore saved progress")
    imp.add_argument(
        "--skip", action="append", default=[], choices=_PORTS, type=_SKIP, help=_SKIP_HELP
    )
    imp.add_argument("--replace", action="store_true", help=_REPLACE_HELP)
    imp.add_argument(
        "--restore-forgotten",
        action="store_true",
        help="import the items of users the target forgot after the file was written "
        "(left out by default, so restoring an old export does not undo a forget)",
    )

    mig = sub.add_parser(
        "migrate",
        help="copy memory from one backend to another and verify it",
        description="Export --from into a temporary file, import it into --to in batches, "
        "then verify counts per port and a sample of records field by field.",
    )
    mig.add_argument(
        "--from", dest="source", required=True, type=text("--from"), help="source storage URL"
    )
    mig.add_argument(
        "--to", dest="target", required=True, type=text("--to"), help="target storage URL"
    )
    mig.add_argument("--batch-size", type=_BATCH, default=500, help="items per write (500)")
    mig.add_argument(
        "--sample",
        type=integer("--sample", 0, MAX_BATCH),
        default=50,
        help="records compared field by field",
    )
    mig.add_argument("--leases", action="store_true", help="copy live leases too")
    mig.add_argument(
        "--skip", action="append", default=[], choices=_PORTS, type=_SKIP, help=_SKIP_HELP
    )
    mig.add_argument("--replace", action="store_true", help=_REPLACE_HELP)

    emb = sub.add_parser(
        "reembed",
        help="build a new embedding space from stored content, then switch reads to it",
        description="Embed every stored record with --to-model ('hashing' for the built-in "
        "embedder, 'minilm' for the bundled MiniLM, else a model of "
        "AGENT_MEMORY_EMBEDDINGS_URL) into a new space, in "
        "batches and resumably. Reads switch to the new space only once it is complete; "
        "the old space stays until --drop-old.",
    )
    emb.add_argument("--url", type=text("--url"), help=_URL_HELP)
    emb.add_argument(
        "--to-model",
        required=True,
        type=text("--to-model"),
        help="'hashing', 'minilm' or an embedding model name",
    )
    emb.add_argument(
        "--dimension",
        type=integer("--dimension", 1, MAX_DIMENSION),
        help="the new space's dimension",
    )
    emb.add_argument("--batch-size", type=_BATCH, default=64, help="texts per embedding call (64)")
    emb.add_argument("--drop-old", action="store_true", help="delete the old space when done")


def _bar(stream: TextIO) -> Callable[[str, int, int | None], None] | None:
    """A bar redrawn in place, only on a terminal (logs and pipes get no progress)."""
    if not stream.isatty():
        return None

    def draw(stage: str, done: int, total: int | None) -> None:
        width = 30
        filled = int(width * done / total) if total else 0
        line = "#" * filled + "-" * (width - filled)
        count = f"{done}/{total}" if total else str(done)
        print(f"\r{stage:<8} [{line}] {count:<20}", end="", file=stream, flush=True)

    return draw


def _clear(stream: TextIO) -> None:
    if stream.isatty():
        print("\r" + " " * 70 + "\r", end="", file=stream, flush=True)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}{'s' if n != 1 else ''}" for k, n in counts.items() if n) or "nothing"


def _skipped(ports: tuple[str, ...]) -> str:
    return f" (skipped: {', '.join(ports)})" if ports else ""


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    from agent_memory import portability as p
    from agent_memory.bootstrap.settings import Settings, default_sqlite_url

    settings = Settings.from_env()
    url = getattr(args, "url", None) or settings.url or default_sqlite_url()
    err = sys.stderr
    progress = _bar(err)
    if args.command == "export":
        to_stdout = args.output in (None, "-")
        output = sys.stdout.buffer if to_stdout else args.output
        summary = await p.export(
            url, output, user=args.user, namespace=args.namespace,
            include_cache=not args.no_cache, include_leases=args.leases,
            settings=settings, progress=progress, skip=args.skip,
        )  # fmt: skip
        _clear(err)
        where = "stdout" if to_stdout else args.output
        print(
            f"exported {_counts(summary.counts)} to {where}{_skipped(summary.skipped)}",
            file=err if to_stdout else None,
        )
        for port, why in summary.unexported.items():
            print(f"agent-memory export: {port} NOT exported: {why}", file=err)
        return 1 if summary.unexported else 0
    if args.command == "import":
        try:
            result = await p.import_file(
                url, args.file, batch_size=args.batch_size, resume=not args.restart,
                settings=settings, progress=progress, skip=args.skip, replace=args.replace,
                restore_forgotten=args.restore_forgotten,
            )  # fmt: skip
        except p.ImportFailed as exc:
            _clear(err)
            print(exc.summary.describe())
            raise
        _clear(err)
        print(result.describe())
        return 0
    if args.command == "migrate":
        moved = await p.migrate(
            args.source, args.target, batch_size=args.batch_size, sample=args.sample,
            include_leases=args.leases, settings=settings, progress=progress,
            skip=args.skip, replace=args.replace,
        )  # fmt: skip
        _clear(err)
        phases = ", ".join(f"{k} {v:.1f} s" for k, v in moved.seconds.items() if v)
        print(
            f"migrated {_counts(moved.exported)}{_skipped(moved.skipped)}; "
            f"{moved.imported.describe()}; verified counts per port and {moved.sampled} "
            f"sampled records ({phases})"
        )
        return 0
    done = await p.reembed(
        url, to_model=args.to_model, dimension=args.dimension, batch_size=args.batch_size,
        drop_old=args.drop_old, settings=settings, progress=progress,
    )  # fmt: skip
    _clear(err)
    state = "complete: reads now use the new space" if done.complete else "incomplete: re-run"
    dropped = ""
    if done.complete and args.drop_old:
        dropped = (
            f" ({done.dropped} old records dropped; the old space keeps records written "
            "since the copy: run reembed again to copy them, then drop)"
            if done.old_kept
            else " (old space emptied; still listed, so a forget reaches a late write to it)"
        )
    print(
        f"re-embedded {done.embedded} records ({done.already} already there) of "
        f"{done.owners} owners; {state}{dropped}"
    )
    return 0 if done.complete else 1

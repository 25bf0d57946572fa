"""`agent-memory reflect`: one reflection pass on demand, with progress on stderr
(a redrawn bar on a terminal, one plain line per entity otherwise)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import timedelta
from typing import TextIO

from agent_memory.bootstrap import connect, reflection_job

__all__ = ["progress_printer", "run_reflect"]


def progress_printer(stream: TextIO) -> Callable[[int, int, str], None]:
    """A progress callback: a bar redrawn in place on a TTY; plain lines otherwise
    (a log file gets no carriage returns)."""
    if stream.isatty():

        def bar(done: int, total: int, label: str) -> None:
            width = 30
            filled = int(width * done / total) if total else width
            line = "#" * filled + "-" * (width - filled)
            end = "\n" if done >= total else ""
            print(f"\r[{line}] {done}/{total} {label[:50]:<50}", end=end, file=stream, flush=True)

        return bar

    def lines(done: int, total: int, label: str) -> None:
        print(f"{done}/{total} {label}", file=stream, flush=True)

    return lines


def _age(age: timedelta) -> str:
    if age % timedelta(days=1) == timedelta(0):
        days = age.days
        return f"{days} day{'s' if days != 1 else ''}"
    return str(age)


async def run_reflect(url: str | None, domains: list[str]) -> int:
    """Run one pass over `domains`; 0 when it ran (or another replica holds the
    lock), 1 when a part of it failed."""
    async with connect(url) as memory:
        job = reflection_job(memory)
        result = await job.run_once(domains, progress=progress_printer(sys.stderr))
    failures = result.report.failures
    if not result.ran and result.lock_held_by is not None:
        print(f"another replica ({result.lock_held_by}) holds the reflection lock; skipped")
        return 0
    if result.ran:
        print(
            f"entities discovered={result.entities_discovered} "
            f"processed={result.entities_processed} fragments stored={result.fragments_stored} "
            f"embedding tokens={result.embedding_tokens}"
        )
        if result.entities_discovered == 0 and not failures:
            print(
                f"nothing to reflect on in {', '.join(domains)}: no entity with "
                f">= {job.options.min_events} events older than "
                f"{_age(job.options.age_threshold)} that an earlier pass has not covered"
            )
    else:
        print("reflection did not run: the reflection lock could not be taken")
    for failure in failures:
        print(f"  failed: {failure.operation}: {failure.error_type}: {failure.message}")
    return 0 if result.report.ok and (result.ran or result.lock_held_by) else 1

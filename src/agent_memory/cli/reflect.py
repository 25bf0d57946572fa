"""`agent-memory reflect`: one reflection pass on demand, with a progress bar."""

from __future__ import annotations

import sys

from agent_memory.bootstrap import connect, reflection_job

__all__ = ["run_reflect"]


def _progress(done: int, total: int, label: str) -> None:
    width = 30
    filled = int(width * done / total) if total else width
    bar = "#" * filled + "-" * (width - filled)
    print(f"\r[{bar}] {done}/{total} {label[:50]:<50}", end="", file=sys.stderr, flush=True)


async def run_reflect(url: str | None, domains: list[str]) -> int:
    """Run one pass over `domains`; 0 when it ran (or another replica holds the lock)."""
    async with await connect(url) as memory:
        job = reflection_job(memory)
        result = await job.run_once(domains, progress=_progress)
    print(file=sys.stderr)
    if not result.ran:
        print(f"reflection lock held by {result.lock_held_by}; skipped this pass")
        return 0
    print(
        f"entities discovered={result.entities_discovered} "
        f"processed={result.entities_processed} fragments stored={result.fragments_stored} "
        f"embedding tokens={result.embedding_tokens}"
    )
    for failure in result.report.failures:
        print(f"  failed: {failure.operation}: {failure.error_type}: {failure.message}")
    return 0 if result.report.ok else 1

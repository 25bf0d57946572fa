"""`agent-memory doctor`: configuration, reachability, server versions and the
modules a backend needs (Search module on Redis, pgvector on PostgreSQL).

`agent-memory doctor --config` prints every setting's effective value and its
source (environment, default, code), secrets redacted, and exits."""

from __future__ import annotations

import sys
import time

from agent_memory.bootstrap import ENV_VARS, Settings, connect, default_sqlite_url
from agent_memory.domain.errors import AgentMemoryError
from agent_memory.ports.storage import Cache, EventLog, LeaseStore, MemoryStore

__all__ = ["run_doctor"]


def _line(label: str, value: object, ok: bool | None = None) -> None:
    mark = "" if ok is None else ("ok   " if ok else "FAIL ")
    print(f"  {mark:<5}{label:<24} {value}")


def print_settings(settings: Settings) -> None:
    """One line per setting: variable, effective value, source (and what an
    unset purpose model falls back to). Secrets are redacted by `explain`."""
    rows = settings.explain()
    width = max(len(row.variable) for row in rows)
    for row in rows:
        value = "-" if row.value is None else str(row.value)
        note = f"  ({row.note})" if row.note else ""
        print(f"  {row.variable:<{width}}  {value:<24} {row.source}{note}")


async def run_doctor(url: str | None, *, config_only: bool = False) -> int:
    """Print a report; exit 0 only when every configured part is reachable.
    With `config_only`, print the settings and their sources and stop."""
    print("configuration")
    try:
        settings = Settings.from_env()
    except AgentMemoryError as exc:
        _line("environment", exc, ok=False)
        return 1
    target = url or settings.url or default_sqlite_url()
    print_settings(settings)
    _line("variables", f"{len(ENV_VARS)} AGENT_MEMORY_* settings (docs/configuration.md)")
    if config_only:
        sys.stdout.flush()
        return 0
    print("storage")
    failures = 0
    try:
        memory = await connect(target, settings=settings)
    except AgentMemoryError as exc:
        _line("connect", f"{type(exc).__name__}: {exc}", ok=False)
        return 1
    async with memory:
        _line("url", memory.url)
        _line("embedding space", memory.embedder.space.identity)
        parts: dict[str, MemoryStore | EventLog | LeaseStore | Cache] = {
            "memory store": memory.store,
            "event log": memory.events,
            "lease store": memory.leases,
            "cache": memory.cache,
        }
        for label, port in parts.items():
            started = time.perf_counter()
            try:
                await port.ping()
            except Exception as exc:
                failures += 1
                _line(label, f"{type(exc).__name__}: {exc}", ok=False)
            else:
                _line(
                    label, f"reachable ({(time.perf_counter() - started) * 1000:.1f} ms)", ok=True
                )
        for stores in (memory.stores, memory.coordination):
            if stores is None:
                continue
            for key, value in sorted(stores.details.items()):
                _line(key, value)
        print("models")
        _line("embedder", memory.embedder.space.model)
        _line("language model", memory.llm.fingerprint if memory.llm else "none (offline rules)")
        for purpose, model in sorted(memory.models.items()):
            _line(f"model: {purpose}", model.fingerprint)
    print("result:", "healthy" if failures == 0 else f"{failures} problem(s)")
    sys.stdout.flush()
    return 0 if failures == 0 else 1

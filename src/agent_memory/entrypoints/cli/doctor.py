"""`agent-memory doctor`: configuration, reachability, server versions and the
modules a backend needs (Search module on Redis, pgvector on PostgreSQL).
It changes nothing: a SQLite file (or Qdrant local directory) that does not
exist yet is reported as "would create", and its ports are not pinged.

`agent-memory doctor --config` prints every setting's effective value and its
source (environment, default, code), secrets redacted, and exits."""

from __future__ import annotations

import os
import sys
import time
from urllib.parse import unquote, urlsplit

from agent_memory.bootstrap import (
    ENV_VARS,
    Settings,
    Stores,
    connect,
    coordination_url,
    default_sqlite_url,
    scheme_of,
)
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


def _would_create(url: str, settings: Settings) -> list[str]:
    """The files and directories that opening `url` (and, for Qdrant, its
    coordination URL) would create: what doctor reports instead of creating."""
    urls = [url]
    coord_url = coordination_url(url, settings)
    if coord_url is not None:
        urls.append(coord_url)
    out = []
    for each in urls:
        if scheme_of(each) == "sqlite":
            from agent_memory.adapters.sqlite import path_from_url

            path = os.path.abspath(path_from_url(each)[0])
        elif each.lower().startswith("qdrant+local:"):
            path = unquote(urlsplit(each).path)
        else:
            continue
        if not os.path.exists(path):
            out.append(path)
    return out


def _cannot_create(path: str) -> str | None:
    """Why `path` could not be created (its nearest existing ancestor is not a
    writable directory), or None."""
    parent = os.path.dirname(path)
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        return f"{path}: cannot be created ({parent} is not a writable directory)"
    return None


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
        pending = _would_create(target, settings)
    except AgentMemoryError as exc:
        _line("connect", f"{type(exc).__name__}: {exc}", ok=False)
        return 1
    for path in pending:
        problem = _cannot_create(path)
        failures += problem is not None
        _line(
            "would create",
            problem or f"{path} (on first use; doctor creates nothing)",
            ok=False if problem else None,
        )
    if target.lower().startswith("qdrant+local:") and pending:
        print("result:", "healthy (nothing created)" if failures == 0 else f"{failures} problem(s)")
        return 0 if failures == 0 else 1
    try:
        memory = await connect(target, settings=settings)
    except AgentMemoryError as exc:
        _line("connect", f"{type(exc).__name__}: {exc}", ok=False)
        return 1
    async with memory:
        _line("url", memory.url)
        _line("embedding space", memory.embedder.space.identity)
        coordination = memory.coordination or memory.stores
        parts: dict[str, tuple[MemoryStore | EventLog | LeaseStore | Cache, Stores]] = {
            "memory store": (memory.store, memory.stores),
            "event log": (memory.events, coordination),
            "lease store": (memory.leases, coordination),
            "cache": (memory.cache, coordination),
        }
        for label, (port, owner) in parts.items():
            if owner.details.get("path") in pending:
                _line(label, "not pinged: its file does not exist yet")
                continue
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
        _line("embedder", memory.embedder_reason or memory.embedder.space.model)
        _line("embedding model", memory.embedder.space.model)
        _line("language model", memory.llm.fingerprint if memory.llm else "none (offline rules)")
        for purpose, model in sorted(memory.models.items()):
            _line(f"model: {purpose}", model.fingerprint)
    verdict = "healthy" if failures == 0 else f"{failures} problem(s)"
    if pending:
        verdict += f"; {len(pending)} path(s) would be created on first use, none was"
    print("result:", verdict)
    sys.stdout.flush()
    return 0 if failures == 0 else 1

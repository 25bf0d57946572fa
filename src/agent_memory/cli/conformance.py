"""`agent-memory conformance`: the shipped contract suite against a live backend
(given by URL) or a team's own store (`--factory package.module:callable`).

Each test gets EMPTY stores: a fresh in-process namespace for `memory://`, a
fresh file next to the given one for `sqlite:///`, and a fresh deployment name
(key prefix / schema) for server backends. A factory is called once per test
and must return empty stores: one port object, or a mapping with any of the
keys `store`, `events`, `leases`, `cache`. A factory may carry a
`capabilities` attribute (a `Capabilities`); otherwise the defaults apply
without `reopen`. Progress is pytest's; a summary table per port follows, with
the clause ids of every failure. Exit code 0 only when everything passed.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import os
import re
import sys
import tempfile
import textwrap
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agent_memory.bootstrap import Settings, open_stores, scheme_of
from agent_memory.domain.errors import ConfigurationError
from agent_memory.domain.records import EmbeddingSpace

__all__ = ["Target", "run_conformance"]

PORTS = {
    "store": ("MemoryStoreContract", "store"),
    "events": ("EventLogContract", "event_log"),
    "leases": ("LeaseStoreContract", "leases"),
    "cache": ("CacheContract", "cache"),
}

#: What each of our backends declares (the same values its own test suite uses).
BACKEND_CAPABILITIES: dict[str, dict[str, Any]] = {
    "memory": {"keyword_search": True},
    "sqlite": {"keyword_search": True},
    "redis": {"keyword_search": True, "ttl_resolution_ms": 20},
    "postgres": {"keyword_search": True, "ttl_resolution_ms": 20},
    "qdrant": {"keyword_search": True, "concurrent_duplicate_rejection": False},
}

_SPACE = EmbeddingSpace(model="agent-memory/conformance", dimension=16)
_CLAUSE = re.compile(r"\[([A-Z]{1,4}-[A-Z0-9]+(?:-[A-Z0-9]+)*)\]")
_counter = itertools.count()


def _load_factory(spec: str) -> Callable[[], Any]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"--factory must look like package.module:callable, got {spec!r}")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"--factory: cannot import {module_name!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigurationError(f"--factory: {module_name!r} has no callable {attr!r}")
    return factory  # type: ignore[no-any-return]


class Target:
    """Opens empty stores of one kind for each test, from a URL or a factory."""

    def __init__(self, url: str | None = None, factory: str | None = None) -> None:
        if (url is None) == (factory is None):
            raise ConfigurationError("give either a backend URL or --factory")
        self.url = url
        self.factory = _load_factory(factory) if factory is not None else None
        self.family = scheme_of(url) if url is not None else "factory"
        self._settings = Settings()
        self._handles: dict[int, tuple[str, str]] = {}

    # -- what the suite should expect -----------------------------------------
    def ports(self) -> list[str]:
        if self.factory is not None:
            return list(PORTS)  # narrowed at first use: absent ports skip
        return ["store"] if self.family == "qdrant" else list(PORTS)

    def capabilities(self, port: str) -> dict[str, Any]:
        if self.factory is not None:
            declared = getattr(self.factory, "capabilities", None)
            if declared is not None:
                import attrs

                return attrs.asdict(declared)
            return {"reopen": False}
        declared = dict(BACKEND_CAPABILITIES.get(self.family, {}))
        if port != "store":
            declared.pop("keyword_search", None)
            declared.pop("concurrent_duplicate_rejection", None)
        if self.url is not None and self.url.startswith("qdrant+memory"):
            declared["reopen"] = False  # each in-process client holds its own data
        return declared

    # -- opening ---------------------------------------------------------------
    def _fresh_url(self) -> tuple[str, str]:
        assert self.url is not None
        n = next(_counter)
        deployment = f"conformance-{uuid.uuid4().hex[:12]}"
        if self.family == "memory":
            return f"memory://conformance-{deployment}", deployment
        if self.family == "sqlite":
            from agent_memory.adapters.sqlite import path_from_url

            given = Path(path_from_url(self.url)[0]).absolute()
            folder = given.parent / f"{given.stem}.conformance"
            folder.mkdir(parents=True, exist_ok=True)
            return f"sqlite:///{folder / f'{n}-{deployment}.db'}", deployment
        return self.url, deployment

    async def _open_url(self, url: str, deployment: str, port: str) -> Any:
        settings = Settings(deployment=deployment)
        stores = await open_stores(url, space=_SPACE, settings=settings)
        chosen = getattr(stores, port)
        for other in ("store", "events", "leases", "cache"):
            part = getattr(stores, other)
            if other != port and part is not None and part is not chosen:
                await part.close()
        return chosen

    async def open(self, port: str) -> Any:
        if self.factory is not None:
            made = self.factory()
            if inspect.isawaitable(made):
                made = await made
            if isinstance(made, dict):
                obj = made.get(port)
            else:
                obj = made if _serves(made, port) else None
            if obj is None:
                import pytest

                pytest.skip(f"the factory provides no {port}")
            return obj
        url, deployment = self._fresh_url()
        obj = await self._open_url(url, deployment, port)
        self._handles[id(obj)] = (url, deployment)
        return obj

    def reopener(self, port: str, obj: Any) -> Callable[[], Awaitable[Any]] | None:
        if self.factory is not None:
            return None
        url, deployment = self._handles[id(obj)]

        async def reopen() -> Any:
            return await self._open_url(url, deployment, port)

        return reopen

    async def cleanup(self, port: str, obj: Any) -> None:
        await obj.close()
        self._handles.pop(id(obj), None)


def _serves(obj: Any, port: str) -> bool:
    from agent_memory.ports.storage import Cache, EventLog, LeaseStore, MemoryStore

    proto = {"store": MemoryStore, "events": EventLog, "leases": LeaseStore, "cache": Cache}[port]
    return isinstance(obj, proto)


_MODULE = """
import pytest
from agent_memory.contract_tests import Capabilities
from agent_memory.contract_tests import {contract}
from agent_memory.cli import conformance as _c

TARGET = _c.current_target()


class Test_{port}({contract}):
    capabilities = Capabilities(**TARGET.capabilities({port!r}))

    @pytest.fixture
    async def {fixture}(self):
        obj = await TARGET.open({port!r})
        yield obj
        await TARGET.cleanup({port!r}, obj)

    @pytest.fixture
    async def reopen(self, {fixture}):
        return TARGET.reopener({port!r}, {fixture})
"""

_TARGET: Target | None = None


def current_target() -> Target:
    if _TARGET is None:
        raise RuntimeError("no conformance target configured")
    return _TARGET


class _Summary:
    """pytest plugin: per-port counts and the clause ids of failures."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.clauses: dict[str, set[str]] = defaultdict(set)

    def pytest_runtest_logreport(self, report: Any) -> None:
        port = report.nodeid.split("::")[1].removeprefix("Test_") if "::" in report.nodeid else "?"
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = report.outcome
            self.counts[port][outcome] += 1
            if report.failed:
                self.clauses[port].update(_CLAUSE.findall(str(report.longrepr)))

    def table(self) -> str:
        rows = [f"{'port':<8} {'passed':>7} {'failed':>7} {'skipped':>8}  failed clauses"]
        for port in PORTS:
            c = self.counts.get(port)
            if c is None:
                continue
            clauses = ", ".join(sorted(self.clauses[port])) or "-"
            rows.append(f"{port:<8} {c['passed']:>7} {c['failed']:>7} {c['skipped']:>8}  {clauses}")
        return "\n".join(rows)


def run_conformance(
    *, url: str | None, factory: str | None, keyword: str | None = None, quiet: bool = False
) -> int:
    """Run the suite; print a summary table; 0 only when nothing failed."""
    import pytest

    global _TARGET
    _TARGET = Target(url=url, factory=factory)
    workdir = Path(tempfile.mkdtemp(prefix="agent-memory-conformance-tests-"))
    for port in _TARGET.ports():
        contract, fixture = PORTS[port]
        source = _MODULE.format(contract=contract, port=port, fixture=fixture)
        (workdir / f"test_conformance_{port}.py").write_text(textwrap.dedent(source))
    (workdir / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    summary = _Summary()
    args = [str(workdir), "-c", str(workdir / "pytest.ini"), "-p", "no:cacheprovider"]
    args += ["-q", "--tb=line"] if quiet else ["-v", "--tb=short"]
    if keyword:
        args += ["-k", keyword]
    target_name = url if url is not None else f"--factory {factory}"
    print(f"agent-memory conformance: {target_name}")
    code = pytest.main(args, plugins=[summary])
    print()
    print(summary.table())
    total_failed = sum(c["failed"] for c in summary.counts.values())
    ran = sum(sum(c.values()) for c in summary.counts.values())
    ok = code == 0 and total_failed == 0 and ran > 0
    print("conformance:", "PASS" if ok else "FAIL")
    return 0 if ok else 1

"""The conformance runner behind `agent-memory conformance`: the shipped contract
suite against a live backend (given by URL) or a team's own store (a factory,
`package.module:callable`).

A run has three stages:

1. Preflight, before any test: the factory is called once (or the URL opened
   once, on a throw-away deployment), every object is checked against its port
   Protocol (missing or misnamed methods are named), and every port is pinged
   the way `agent-memory doctor` pings it. A missing extra prints its
   `pip install` line, an unreachable server its connection error; either
   ends the run within seconds (exit code 3).
2. The tests: one contract class per port the factory returns (or the URL
   implies), each test on EMPTY stores: a fresh in-process namespace for
   `memory://`, a fresh file next to the given one for `sqlite:///`, a fresh
   deployment (key prefix / schema / collection prefix) for server backends.
3. The verdict: a table per port; every failure under the clause its test exists
   for (primary) and, apart from those, tests that failed on an incidental check
   of another clause (secondary); every skip with its reason. PASS only when
   every claimed port ran at least one test and none failed.

Everything the run creates (the generated test files, SQLite files, PostgreSQL
schemas, Redis keys, Qdrant collections) is removed at the end unless `--keep`.
A URL's throw-away deployments come from a `Deployments` the caller passes in
(the composition root's `agent_memory.bootstrap.throwaway`): this package sees
ports, domain and the memory oracle only.

A factory is called once per test and must return EMPTY stores: one port
object, or a mapping with any of the keys `store`, `events`, `leases`, `cache`,
`audit` (with `events` and `store` beside it, the audit log's erasure clauses
run through them).
It may carry `capabilities` (a `Capabilities`, or a mapping port ->
`Capabilities`) and `reopen(obj)`, which returns (or awaits to) a second handle
on the data of `obj`; without `reopen` the close-race clauses skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import importlib
import importlib.util
import inspect
import os
import re
import shutil
import sys
import tempfile
import textwrap
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from agent_memory.domain.errors import AgentMemoryError, ConfigurationError
from agent_memory.domain.records import EmbeddingSpace

__all__ = [
    "EXIT_CODES",
    "EXIT_FAILED",
    "EXIT_NOT_INSTALLED",
    "EXIT_PASSED",
    "EXIT_PREFLIGHT",
    "EXIT_USAGE",
    "Deployments",
    "PreflightError",
    "Target",
    "port_problems",
    "run_conformance",
]

EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PREFLIGHT = 3
EXIT_NOT_INSTALLED = 4

#: Exit codes, as the CLI help and docs/writing-a-backend.md list them.
EXIT_CODES = {
    EXIT_PASSED: "PASS: every claimed port ran tests and none failed",
    EXIT_FAILED: "FAIL: a test failed, or a claimed port ran no test",
    EXIT_USAGE: "bad arguments or configuration (unknown URL scheme, unloadable --factory)",
    EXIT_PREFLIGHT: "preflight failed: missing/misnamed methods, missing extra, "
    "unreachable backend or a factory that raises (no test ran)",
    EXIT_NOT_INSTALLED: "the 'conformance' extra is not installed (no test ran)",
}

#: port -> (contract class, fixture name, label)
PORTS = {
    "store": ("MemoryStoreContract", "store", "memory store"),
    "events": ("EventLogContract", "event_log", "event log"),
    "leases": ("LeaseStoreContract", "leases", "lease store"),
    "cache": ("CacheContract", "cache", "cache"),
    "audit": ("AuditLogContract", "audit_log", "audit log"),
}

#: What each of our backends declares (the same values its own test suite uses).
BACKEND_CAPABILITIES: dict[str, dict[str, Any]] = {
    "memory": {"keyword_search": True, "versioned_writes": True},
    "sqlite": {"keyword_search": True, "versioned_writes": True},
    "redis": {"keyword_search": True, "versioned_writes": True, "ttl_resolution_ms": 20},
    "postgres": {"keyword_search": True, "versioned_writes": True, "ttl_resolution_ms": 20},
    "qdrant": {"keyword_search": True, "concurrent_duplicate_rejection": False},
    "milvus": {"keyword_search": True, "concurrent_duplicate_rejection": False},
}

_REQUIRED = ("pytest", "pytest_asyncio", "hypothesis")
INSTALL_LINE = "pip install 'agent-memory[conformance]'"
_SPACE = EmbeddingSpace(model="agent-memory/conformance", dimension=16)
_CLAUSE = re.compile(r"\[([A-Z]{1,4}-[A-Z0-9]+(?:-[A-Z0-9]+)*)\]")
#: preflight: how long opening and pinging may take before the backend counts as unreachable
PREFLIGHT_TIMEOUT_S = 8.0
#: this many setup errors with one message stop the run (a broken fixture/factory)
_SAME_SETUP_ERROR_LIMIT = 3


class PreflightError(Exception):
    """The target cannot be tested: the message says why and what to do."""


class Deployments(Protocol):
    """Fresh, empty deployments of one storage URL, each removable again."""

    #: the URL's backend family ("memory", "sqlite", "redis", ...)
    family: str
    #: where fresh SQLite files go (None until one is made, and for servers)
    sqlite_dir: Path | None

    def fresh(self, deployment: str) -> str:
        """The URL to open deployment `deployment` at."""
        ...

    async def open(self, url: str, deployment: str, *, space: EmbeddingSpace) -> Any:
        """The stores (`store`, `events`, `leases`, `cache`, `audit`, `close()`) of one
        deployment (`audit` may be None)."""
        ...

    async def drop(self, url: str, deployment: str) -> None:
        """Remove one deployment's data."""
        ...

    def finish(self) -> None:
        """Remove what holds every deployment (the SQLite directory)."""
        ...


# ----------------------------------------------------------------- protocols


def _protocols() -> dict[str, type]:
    from agent_memory.ports.storage import AuditLog, Cache, EventLog, LeaseStore, MemoryStore

    return {
        "store": MemoryStore,
        "events": EventLog,
        "leases": LeaseStore,
        "cache": Cache,
        "audit": AuditLog,
    }


def _members(proto: type) -> dict[str, bool]:
    """Public members of a port Protocol -> whether it is an async method."""
    out: dict[str, bool] = {}
    for name, value in vars(proto).items():
        if name.startswith("_"):
            continue
        out[name] = inspect.iscoroutinefunction(value)
    return out


def _distinctive() -> dict[str, set[str]]:
    """Members only one port has (ping/close/get/delete are shared)."""
    members = {port: set(_members(proto)) for port, proto in _protocols().items()}
    out: dict[str, set[str]] = {}
    for port, names in members.items():
        others = set().union(*(m for p, m in members.items() if p != port))
        out[port] = names - others
    return out


def port_problems(obj: Any, port: str) -> list[str]:
    """What keeps `obj` from serving `port`: missing, misnamed, non-callable and
    non-async members (an empty list when it matches the Protocol)."""
    proto = _protocols()[port]
    public = [n for n in dir(obj) if not n.startswith("_")]
    problems: list[str] = []
    missing: list[str] = []
    for name, is_async in _members(proto).items():
        try:
            value = getattr(obj, name)
        except AttributeError:
            value = _MISSING
        except Exception as exc:  # a property that raises still exists
            value = exc
        if value is _MISSING:
            near = [n for n in difflib.get_close_matches(name, public, n=1, cutoff=0.6)]
            extra = [n for n in near if not hasattr(proto, n)]
            if extra:
                problems.append(f"missing {name} (found {extra[0]!r}: misnamed?)")
            else:
                missing.append(name)
        elif is_async and not callable(value):
            problems.append(f"{name} is not a method")
        elif is_async and not _is_async(value):
            problems.append(f"{name} is not async (the port's methods are `async def`)")
    if missing:
        problems.insert(0, "missing " + ", ".join(missing))
    return problems


_MISSING = object()


def _is_async(value: Any) -> bool:
    func = getattr(value, "__func__", value)
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__wrapped__", None)
    )


def claimed_ports(made: Any) -> dict[str, Any]:
    """The port objects a factory result claims to serve. A mapping claims its
    keys; a single object claims every port it has a distinctive method of.
    Raises `PreflightError` naming what is missing."""
    protos = _protocols()
    if isinstance(made, Mapping):
        unknown = sorted(set(made) - set(PORTS))
        if unknown:
            raise PreflightError(
                f"the factory's mapping has unknown keys {unknown}; use any of {list(PORTS)}"
            )
        chosen = {p: made[p] for p in PORTS if p in made and made[p] is not None}
        if not chosen:
            raise PreflightError("the factory returned an empty mapping: no port to test")
    else:
        distinctive = _distinctive()
        public = {n for n in dir(made) if not n.startswith("_")}
        chosen = {p: made for p in PORTS if public & distinctive[p]}
        if not chosen:
            lines = [
                f"the factory returned {type(made).__module__}.{type(made).__qualname__}, "
                "which serves none of the ports:"
            ]
            for port in PORTS:
                lines.append(
                    f"  {protos[port].__name__} ({port}): " + "; ".join(port_problems(made, port))
                )
            raise PreflightError("\n".join(lines))
    bad = []
    for port, obj in chosen.items():
        problems = port_problems(obj, port)
        if problems:
            bad.append(f"  {protos[port].__name__} ({port}): " + "; ".join(problems))
    if bad:
        raise PreflightError(
            "the factory's objects do not match the port Protocols "
            "(agent_memory.ports.storage):\n" + "\n".join(bad)
        )
    return chosen


# ------------------------------------------------------------------- factory


def _load_factory(spec: str) -> Any:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"--factory must look like package.module:callable, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"--factory: cannot import {module_name!r}: {exc}") from None
    factory: Any = module
    for part in attr.split("."):
        factory = getattr(factory, part, None)
    if not callable(factory):
        raise ConfigurationError(f"--factory: {module_name!r} has no callable {attr!r}")
    return factory


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _with_timeout(what: str, op: Awaitable[Any]) -> Any:
    try:
        return await asyncio.wait_for(op, PREFLIGHT_TIMEOUT_S)
    except TimeoutError:
        raise PreflightError(
            f"{what}: no answer within {PREFLIGHT_TIMEOUT_S:.0f} s (is the server reachable?)"
        ) from None


# -------------------------------------------------------------------- target


class Target:
    """Opens empty stores of one kind for each test, from a URL or a factory,
    and removes what it created."""

    def __init__(
        self,
        url: str | None = None,
        factory: str | None = None,
        *,
        keep: bool = False,
        deployments: Callable[[str], Deployments] | None = None,
    ) -> None:
        if (url is None) == (factory is None):
            raise ConfigurationError("give either a backend URL or --factory")
        if url is not None and deployments is None:
            raise ConfigurationError("a backend URL needs `deployments` to open it")
        self.url = url
        self.factory = _load_factory(factory) if factory is not None else None
        self._backend = deployments(url) if url is not None and deployments else None
        self.family = self._backend.family if self._backend is not None else "factory"
        self.keep = keep
        self.ports: list[str] = []
        self._handles: dict[int, tuple[str, str]] = {}
        self._neighbours: dict[int, tuple[Any, Any]] = {}
        self._deployments: set[tuple[str, str]] = set()
        self._declared = self._declared_capabilities()

    @property
    def _sqlite_dir(self) -> Path | None:
        return self._backend.sqlite_dir if self._backend is not None else None

    def _url_backend(self) -> Deployments:
        assert self._backend is not None
        return self._backend

    # -- what the suite should expect -----------------------------------------
    def _declared_capabilities(self) -> Any:
        if self.factory is None:
            return None
        return getattr(self.factory, "capabilities", None)

    def _factory_reopen(self) -> Callable[[Any], Any] | None:
        reopen = getattr(self.factory, "reopen", None)
        return reopen if callable(reopen) else None

    def capabilities(self, port: str) -> dict[str, Any]:
        if self.factory is not None:
            import attrs

            declared = self._declared
            if isinstance(declared, Mapping):
                declared = declared.get(port)
            values = dict(attrs.asdict(declared)) if declared is not None else {}
            values.setdefault("reopen", self._factory_reopen() is not None)
            return values
        declared_url = dict(BACKEND_CAPABILITIES.get(self.family, {}))
        if port != "store":
            declared_url.pop("keyword_search", None)
            declared_url.pop("versioned_writes", None)
            declared_url.pop("concurrent_duplicate_rejection", None)
        if self.url is not None and self.url.startswith("qdrant+memory"):
            declared_url["reopen"] = False  # each in-process client holds its own data
        return declared_url

    # -- preflight -------------------------------------------------------------
    async def preflight(self) -> list[str]:
        """Open once, check the Protocols, ping every port; returns report lines.
        Raises `PreflightError` when the target cannot be tested."""
        lines: list[str] = []
        if self.factory is not None:
            self._check_declared()
            try:
                made = await _with_timeout("the factory", _maybe_await(self.factory()))
            except PreflightError:
                raise
            except Exception as exc:
                raise PreflightError(
                    f"the factory raised {type(exc).__name__}: {exc}\n" + _short_traceback(exc)
                ) from None
            chosen = claimed_ports(made)
            self.ports = list(chosen)
            missing_reopen = [
                p
                for p in self.ports
                if self.capabilities(p).get("reopen") and not self._factory_reopen()
            ]
            if missing_reopen:
                raise PreflightError(
                    f"capabilities.reopen is declared for {missing_reopen} but the factory has no "
                    "reopen(obj) returning a second handle on obj's data: give the factory a "
                    "`reopen` attribute or declare Capabilities(reopen=False)"
                )
            await self._ping_all(chosen, lines)
            return lines
        assert self.url is not None
        url, deployment = self._fresh_url()
        try:
            stores = await _with_timeout(
                f"opening {_redact(self.url)}",
                self._url_backend().open(url, deployment, space=_SPACE),
            )
        except PreflightError:
            raise
        except AgentMemoryError as exc:
            raise PreflightError(f"{type(exc).__name__}: {exc}") from None
        except Exception as exc:
            raise PreflightError(
                f"opening {_redact(self.url)}: {type(exc).__name__}: {exc}"
            ) from None
        parts = {p: getattr(stores, p, None) for p in PORTS}
        parts = {p: obj for p, obj in parts.items() if obj is not None}
        self.ports = list(parts)
        reached = False
        try:
            for port, obj in parts.items():
                problems = port_problems(obj, port)
                if problems:
                    raise PreflightError(f"{PORTS[port][2]}: " + "; ".join(problems))
            await self._ping_all(parts, lines, close=False)
            reached = True
        finally:
            with contextlib.suppress(Exception):
                await stores.close()
            if reached:
                await self._drop(url, deployment)
            else:  # nothing was created on a server that cannot be reached
                self._deployments.discard((url, deployment))
        return lines

    def _check_declared(self) -> None:
        # capabilities.py only: the contract modules must first be imported by
        # pytest (after its assertion rewriting is installed).
        from agent_memory.contract_tests.capabilities import Capabilities

        declared = self._declared
        values = declared.values() if isinstance(declared, Mapping) else [declared]
        for value in values:
            if value is not None and not isinstance(value, Capabilities):
                raise PreflightError(
                    "the factory's `capabilities` must be an agent_memory.contract_tests."
                    f"Capabilities (or a mapping port -> Capabilities), got {value!r}"
                )
        if isinstance(declared, Mapping):
            unknown = sorted(set(declared) - set(PORTS))
            if unknown:
                raise PreflightError(f"`capabilities` has unknown ports {unknown}")

    async def _ping_all(
        self, parts: Mapping[str, Any], lines: list[str], *, close: bool = True
    ) -> None:
        failures: list[str] = []
        closed: set[int] = set()
        for port, obj in parts.items():
            label = PORTS[port][2]
            started = time.perf_counter()
            try:
                await _with_timeout(f"{label} ping", obj.ping())
            except PreflightError as exc:
                failures.append(f"{label}: {exc}")
            except Exception as exc:
                failures.append(f"{label}: {type(exc).__name__}: {exc}")
            else:
                ms = (time.perf_counter() - started) * 1000
                lines.append(f"  ok   {label:<14} reachable ({ms:.1f} ms)")
        if close:
            for obj in parts.values():
                if id(obj) not in closed:
                    closed.add(id(obj))
                    with contextlib.suppress(Exception):
                        await obj.close()
        if failures:
            reasons = {f.split(": ", 1)[1] for f in failures}
            if len(failures) > 1 and len(reasons) == 1:
                failures = [f"every port: {reasons.pop()}"]
            raise PreflightError("ping failed:\n" + "\n".join(f"  {f}" for f in failures))

    # -- opening ---------------------------------------------------------------
    def _fresh_url(self) -> tuple[str, str]:
        assert self.url is not None
        deployment = f"conformance-{uuid.uuid4().hex[:12]}"
        url = self._url_backend().fresh(deployment)
        self._deployments.add((url, deployment))
        return url, deployment

    async def _open_url(
        self, url: str, deployment: str, port: str, *, neighbours: bool = True
    ) -> Any:
        stores = await self._url_backend().open(url, deployment, space=_SPACE)
        chosen = getattr(stores, port)
        # The audit log's contract erases users through its deployment's event
        # log and store (its `neighbours`): those stay open until cleanup.
        keep = ("events", "store") if port == "audit" and neighbours else ()
        for other in PORTS:
            part = getattr(stores, other, None)
            if other in keep and part is not None:
                continue
            if other != port and part is not None and part is not chosen:
                await part.close()
        if keep:
            self._neighbours[id(chosen)] = (stores.events, stores.store)
        return chosen

    async def open(self, port: str) -> Any:
        if self.factory is not None:
            made = await _maybe_await(self.factory())
            obj = made.get(port) if isinstance(made, Mapping) else made
            if obj is None:  # the preflight saw this port: the factory changed its mind
                raise PreflightError(f"the factory returned no {port} this time")
            beside = made if isinstance(made, Mapping) else {}
            if port == "audit" and None not in (beside.get("events"), beside.get("store")):
                self._neighbours[id(obj)] = (beside["events"], beside["store"])
            return obj
        url, deployment = self._fresh_url()
        obj = await self._open_url(url, deployment, port)
        self._handles[id(obj)] = (url, deployment)
        return obj

    def reopener(self, port: str, obj: Any) -> Callable[[], Awaitable[Any]] | None:
        if self.factory is not None:
            reopen = self._factory_reopen()
            if reopen is None:
                return None

            async def factory_reopen() -> Any:
                return await _maybe_await(reopen(obj))

            return factory_reopen
        url, deployment = self._handles[id(obj)]

        async def url_reopen() -> Any:
            return await self._open_url(url, deployment, port, neighbours=False)

        return url_reopen

    def neighbours(self, obj: Any) -> Any:
        """The `AuditNeighbours` (event log and store of the same deployment) of an
        audit log, or None when the target gave none (those clauses then skip)."""
        found = self._neighbours.get(id(obj))
        if found is None:
            return None
        from agent_memory.contract_tests.audit_log import AuditNeighbours

        return AuditNeighbours(events=found[0], store=found[1])

    async def cleanup(self, port: str, obj: Any) -> None:
        await obj.close()
        kept = self._neighbours.pop(id(obj), None)
        if kept is not None and self.factory is None:
            for part in dict.fromkeys(kept):  # one object may serve both
                await part.close()
        handle = self._handles.pop(id(obj), None)
        if handle is not None:
            await self._drop(*handle)

    # -- removing what the run created ----------------------------------------
    async def _drop(self, url: str, deployment: str) -> None:
        """Remove one deployment's data (best effort; `--keep` keeps it)."""
        if self.keep:
            return
        self._deployments.discard((url, deployment))
        try:
            await self._url_backend().drop(url, deployment)
        except Exception as exc:  # cleanup must not turn a verdict into a crash
            print(
                f"agent-memory conformance: could not remove deployment {deployment!r}: "
                f"{type(exc).__name__}: {exc}",
                file=sys.stderr,
            )

    async def finish(self) -> None:
        for url, deployment in sorted(self._deployments):
            await self._drop(url, deployment)
        if not self.keep and self._backend is not None:
            self._backend.finish()


def _redact(url: str) -> str:
    """`url` without its credentials (the library's one redaction rule)."""
    from agent_memory.adapters._common.urls import redact_url

    return redact_url(url)


def _short_traceback(exc: BaseException, frames: int = 3) -> str:
    import traceback

    tb = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
    tb = tb[-frames:]
    return "".join(traceback.format_list(tb)).rstrip()


# ------------------------------------------------------------ generated tests

_MODULE = """
import pytest
from agent_memory.contract_tests import Capabilities
from agent_memory.contract_tests import {contract}
from agent_memory.contract_tests import runner as _c

TARGET = _c.current_target()


class Test_{port}({contract}):
    capabilities = Capabilities(**TARGET.capabilities({port!r}))

    @pytest.fixture
    async def {fixture}(self):
        obj = await TARGET.open({port!r})
        yield obj
        await TARGET.cleanup({port!r}, obj)

    @pytest.fixture
    def reopen(self, {fixture}):
        return TARGET.reopener({port!r}, {fixture})
{extra}"""

#: Fixtures only one port's contract has.
_EXTRA_FIXTURES = {
    "audit": """
    @pytest.fixture
    def neighbours(self, audit_log):
        return TARGET.neighbours(audit_log)
""",
}

# The suite's own timing rules (per-port deadlines, no endless shrinking) come
# from the contract modules; this only keeps hypothesis from writing a
# database into the user's working directory.
_CONFTEST = """
from pathlib import Path

from hypothesis import configuration, settings

configuration.set_hypothesis_home_dir(Path(__file__).parent / ".hypothesis")
settings.register_profile("agent-memory-conformance", database=None)
settings.load_profile("agent-memory-conformance")
"""

_TARGET: Target | None = None


def current_target() -> Target:
    if _TARGET is None:
        raise RuntimeError("no conformance target configured")
    return _TARGET


class _Failure:
    def __init__(self, port: str, test: str, primaries: tuple[str, ...], message: str) -> None:
        self.port = port
        self.test = test
        self.message = message
        found = _CLAUSE.findall(message.split("\n", 1)[0]) or _CLAUSE.findall(message)
        self.clause = found[0] if found else None
        self.incidental = (
            self.clause is not None and bool(primaries) and (self.clause not in primaries)
        )
        #: the clause this failure is reported under: the one the test exists for
        self.primary: str | None = (
            primaries[0] if self.incidental else (self.clause or (primaries or (None,))[0])
        )

    @property
    def headline(self) -> str:
        first = self.message.strip().splitlines()[0] if self.message.strip() else "(no message)"
        return first[:300]


class _Summary:
    """pytest plugin: per-port counts, failures under their primary clause, skip
    reasons; stops a run whose fixture setup keeps failing the same way."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.failures: list[_Failure] = []
        self.skips: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        self.primary: dict[str, tuple[str, ...]] = {}
        self._setup_errors: dict[str, int] = defaultdict(int)
        self.stopped: str | None = None
        self._session: Any = None

    def pytest_sessionstart(self, session: Any) -> None:
        self._session = session

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        from agent_memory.contract_tests._support import primary_clauses

        for item in items:
            fn = getattr(item, "function", None)
            self.primary[item.nodeid] = primary_clauses(fn) if fn is not None else ()

    @staticmethod
    def _port(nodeid: str) -> str:
        parts = nodeid.split("::")
        return parts[1].removeprefix("Test_") if len(parts) > 1 else "?"

    def pytest_runtest_logreport(self, report: Any) -> None:
        port = self._port(report.nodeid)
        test = report.nodeid.split("::")[-1]
        if report.skipped and report.when in ("setup", "call"):
            self.counts[port]["skipped"] += 1
            reason = _skip_reason(report)
            self.skips[port][reason].append(test)
            return
        if report.when == "call" and report.passed:
            self.counts[port]["passed"] += 1
            return
        if not report.failed:
            return
        self.counts[port]["failed"] += 1
        message = _crash_message(report)
        self.failures.append(_Failure(port, test, self.primary.get(report.nodeid, ()), message))
        if report.when == "setup":
            self._setup_errors[message] += 1
            if self._setup_errors[message] >= _SAME_SETUP_ERROR_LIMIT and self._session is not None:
                self.stopped = (
                    f"stopped: {_SAME_SETUP_ERROR_LIMIT} tests failed to set up with the same "
                    f"error:\n  {message.strip().splitlines()[0] if message.strip() else message}"
                )
                self._session.shouldstop = self.stopped

    # -- the verdict -----------------------------------------------------------
    def report(self, ports: list[str]) -> tuple[bool, list[str]]:
        out = [f"{'port':<8} {'passed':>7} {'failed':>7} {'skipped':>8}  failed clauses"]
        primaries = [f for f in self.failures if not f.incidental]
        secondaries = [f for f in self.failures if f.incidental]
        for port in ports:
            c = self.counts.get(port, {})
            first = sorted({f.primary or "?" for f in primaries if f.port == port})
            second = sorted({f.primary or "?" for f in secondaries if f.port == port} - set(first))
            cell = ", ".join(first) or "-"
            if second:
                cell += f" (secondary: {', '.join(second)})"
            out.append(
                f"{port:<8} {c.get('passed', 0):>7} {c.get('failed', 0):>7} "
                f"{c.get('skipped', 0):>8}  {cell}"
            )
        if primaries:
            out += ["", "failed clauses (each under the clause its test exists for):"]
            for f in sorted(primaries, key=lambda f: (f.port, f.primary or "", f.test)):
                out.append(f"  [{f.primary or '?'}] {f.port} {f.test}: {f.headline}")
        if secondaries:
            primary_ids = {f.primary for f in primaries}
            out += [
                "",
                "secondary (a test for one clause failed on an incidental check of another):",
            ]
            for f in sorted(secondaries, key=lambda f: (f.port, f.primary or "", f.test)):
                note = " (see above)" if f.clause in primary_ids else ""
                out.append(
                    f"  [{f.primary}] {f.port} {f.test} failed on [{f.clause}]{note}: {f.headline}"
                )
        skipped_any = any(self.skips.get(p) for p in ports)
        if skipped_any:
            out += ["", "skipped:"]
            for port in ports:
                for reason, tests in sorted(self.skips.get(port, {}).items()):
                    names = ", ".join(sorted(set(t.split("[")[0] for t in tests)))
                    out.append(f"  {port}: {len(tests)} x {reason} ({names})")
        problems: list[str] = []
        for port in ports:
            c = self.counts.get(port, {})
            if c.get("failed", 0):
                problems.append(f"{port}: {c['failed']} failed")
            elif not c.get("passed", 0):
                why = "every test was skipped" if c.get("skipped") else "no test ran"
                problems.append(f"{port}: {why}: the port is not proven")
        if self.stopped:
            out += ["", self.stopped]
            problems.append("the run was stopped early")
        return not problems, out + [""] + ([f"not PASS: {p}" for p in problems])


def _skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _crash_message(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return str(crash.message)
    return str(report.longrepr)[-2000:]


# ------------------------------------------------------------------------ run


def missing_requirements() -> list[str]:
    """The `conformance` extra's modules that cannot be imported."""
    return [name for name in _REQUIRED if importlib.util.find_spec(name) is None]


def run_conformance(
    *,
    url: str | None,
    factory: str | None,
    keyword: str | None = None,
    quiet: bool = False,
    keep: bool = False,
    deployments: Callable[[str], Deployments] | None = None,
) -> int:
    """Preflight, run the suite, print the verdict; returns an `EXIT_*` code.
    A `url` target is opened through `deployments(url)`."""
    missing = missing_requirements()
    if missing:
        print(
            f"agent-memory conformance needs the 'conformance' extra ({', '.join(missing)} "
            f"missing): {INSTALL_LINE}",
            file=sys.stderr,
        )
        return EXIT_NOT_INSTALLED
    global _TARGET
    target = Target(url=url, factory=factory, keep=keep, deployments=deployments)
    target_name = url if url is not None else f"--factory {factory}"
    print(f"agent-memory conformance: {target_name}")
    print("preflight")
    try:
        lines = asyncio.run(target.preflight())
    except PreflightError as exc:
        print(f"preflight failed: {exc}", file=sys.stderr)
        print("no test ran.", file=sys.stderr)
        asyncio.run(target.finish())
        return EXIT_PREFLIGHT
    print("\n".join(lines))
    sys.stdout.flush()
    _TARGET = target
    workdir = Path(tempfile.mkdtemp(prefix="agent-memory-conformance-"))
    try:
        return _run_pytest(target, workdir, keyword=keyword, quiet=quiet, name=target_name)
    finally:
        _TARGET = None
        asyncio.run(target.finish())
        if keep:
            print(
                f"kept: the generated tests in {workdir}"
                + (f" and the SQLite files in {target._sqlite_dir}" if target._sqlite_dir else "")
            )
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _run_pytest(
    target: Target, workdir: Path, *, keyword: str | None, quiet: bool, name: str
) -> int:
    import pytest

    for port in target.ports:
        contract, fixture, _ = PORTS[port]
        source = _MODULE.format(
            contract=contract, port=port, fixture=fixture, extra=_EXTRA_FIXTURES.get(port, "")
        )
        (workdir / f"test_conformance_{port}.py").write_text(textwrap.dedent(source))
    (workdir / "conftest.py").write_text(textwrap.dedent(_CONFTEST))
    (workdir / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    summary = _Summary()
    args = [
        str(workdir),
        "-c",
        str(workdir / "pytest.ini"),
        "--rootdir",
        str(workdir),
        "-p",
        "no:cacheprovider",
        "-p",
        "agent_memory.contract_tests.plugin",
        # Only the plugins the suite needs: whatever else is installed (a
        # tracing or reporting plugin, say) must not slow the run or change it.
        "--disable-plugin-autoload",
        "-p",
        "pytest_asyncio.plugin",
        "-p",
        "_hypothesis_pytestplugin",
    ]
    args += ["-q", "--tb=line"] if quiet else ["-v", "--tb=short"]
    if keyword:
        args += ["-k", keyword]
    dont_write = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        code = pytest.main(args, plugins=[summary])
    finally:
        sys.dont_write_bytecode = dont_write
    print()
    ok, lines = summary.report(target.ports)
    print("\n".join(lines))
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED):
        ok = False
        print(f"pytest could not run the suite (exit {int(code)})")
    print(f"conformance: {'PASS' if ok else 'FAIL'} ({name})")
    return EXIT_PASSED if ok else EXIT_FAILED

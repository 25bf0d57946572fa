"""Backends failing mid-flight: every write of every port, and the services that
compose them, while a server is hung (SIGSTOP), killed (SIGKILL) and restarted.

Checked on a Redis (valkey) and a PostgreSQL server of this module's own (so the
session's shared servers are never disturbed), and on SQLite with a writer
process killed with SIGKILL:

1. every failure is a typed error of the library (`AgentMemoryError`), never a
   raw driver exception, an `OSError`, or a hang longer than the configured bound;
2. nothing acknowledged is lost (PostgreSQL and SQLite; Redis runs without
   persistence here, so only a hang keeps its data);
3. the handles opened before the outage work again once the server is back;
4. a forget that failed part-way says so in its receipt and a retry completes;
5. the services fail open (a report, never an exception into the agent).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from agent_memory import connect
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Settings
from agent_memory.bootstrap.memory import Memory
from agent_memory.domain.audit import AuditEntry
from agent_memory.domain.errors import AgentMemoryError, AuditNotRecorded
from agent_memory.domain.records import Entity, Event, MemoryRecord
from agent_memory.domain.steps import Step
from agent_memory.domain.user_facts import FactCandidate
from retrying import eventually
from servers.postgres_server import EmbeddedPostgres, start_postgres
from servers.redis_server import RedisServer, launch_redis

EMB = HashingEmbedder(32)
BOUND = 1.0  # the socket / call timeout configured in the URLs below
SLACK = 4.0  # what a call against a hung server may take at most, all told


# -- servers of our own --------------------------------------------------------------


@attrs.define
class Outage:
    """How to hang, resume, kill and restart one backend's server."""

    name: str
    url: str
    hang: Callable[[], None]
    resume: Callable[[], None]
    kill: Callable[[], None]
    start: Callable[[], None]
    durable: bool


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = launch_redis()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def pg_server() -> Iterator[EmbeddedPostgres]:
    server = start_postgres()
    try:
        yield server
    finally:
        server.destroy()


def _redis_outage(server: RedisServer) -> Outage:
    def kill() -> None:
        server.signal(signal.SIGCONT)
        server.signal(signal.SIGKILL)
        assert server._proc is not None
        server._proc.wait()
        server._proc = None

    return Outage(
        "redis",
        f"{server.url}?socket_timeout={BOUND}&socket_connect_timeout={BOUND}",
        hang=lambda: server.signal(signal.SIGSTOP),
        resume=lambda: server.signal(signal.SIGCONT),
        kill=kill,
        start=lambda: server.start(),
        durable=False,
    )


def _pg_outage(server: EmbeddedPostgres) -> Outage:
    sep = "&" if "?" in server.uri else "?"
    return Outage(
        "postgres",
        f"{server.uri}{sep}call_timeout={BOUND}&connect_timeout=1",
        hang=lambda: server.signal_all(signal.SIGSTOP),
        resume=lambda: server.signal_all(signal.SIGCONT),
        kill=server.kill,
        start=lambda: server.start(),
        durable=True,
    )


@pytest.fixture(params=["redis", "postgres"])
def outage(request: pytest.FixtureRequest) -> Outage:
    if request.param == "redis":
        return _redis_outage(request.getfixturevalue("redis_server"))
    return _pg_outage(request.getfixturevalue("pg_server"))


@pytest.fixture
async def memory(outage: Outage) -> AsyncIterator[Memory]:
    settings = Settings(deployment=f"outage-{uuid.uuid4().hex[:10]}")
    mem = await connect(outage.url, settings=settings, embedder=EMB)
    try:
        yield mem
    finally:
        outage.resume()
        await asyncio.wait_for(mem.close(), 30)


# -- the writes ---------------------------------------------------------------------

NOW = datetime.now(UTC).replace(microsecond=0)


def _record(i: int, owner: str = "alice", text: str = "") -> MemoryRecord:
    return MemoryRecord(
        id=f"r{i}",
        owner=owner,
        namespace="facts",
        kind="fact",
        content=text or f"fact number {i}",
        vector=np.linspace(1.0, 2.0 + i, EMB.space.dimension, dtype=np.float32),
        created_at=NOW,
        updated_at=NOW,
    )


def _event(i: int, user: str | None = "alice") -> Event:
    at = NOW - timedelta(seconds=i)
    return Event(
        id=f"e{i}",
        domain="ops",
        agent="agent-1",
        action="restart",
        outcome="ok",
        summary=f"event {i}",
        occurred_at=at,
        recorded_at=at,
        entities=(Entity("pod", f"web-{i}"),),
        user_id=user,
    )


def _audit_entry(i: int) -> AuditEntry:
    return AuditEntry(
        id=f"a{i}",
        at=NOW,
        operation="forget_user",
        tenant="",
        subject="alice",
        counts={"facts": i},
        caller="library",
    )


HOUR = timedelta(hours=1)


def _writes(mem: Memory, n: int) -> list[tuple[str, Callable[[], Awaitable[object]]]]:
    """One call of every port write; `n` makes ids fresh."""
    store, events, leases, cache, audit = (
        mem.store,
        mem.events,
        mem.leases,
        mem.cache,
        mem.audit_log,
    )
    return [
        ("store.add", lambda: store.add([_record(n)])),
        ("store.update", lambda: store.update(_record(0, text="updated"))),
        ("store.delete_scope", lambda: store.delete_scope("bob")),
        ("events.append", lambda: events.append([_event(n)])),
        ("events.erase_user", lambda: events.erase_user("bob")),
        ("leases.acquire", lambda: leases.acquire("jobs", f"k{n}", "w", HOUR, b"p")),
        ("leases.renew", lambda: leases.renew("jobs", "held", "w", HOUR, b"q")),
        ("leases.release", lambda: leases.release("jobs", "other", "w")),
        ("cache.put", lambda: cache.put("c", f"k{n}", b"v")),
        ("cache.delete_prefix", lambda: cache.delete_prefix("bob-cache", "")),
        ("audit.append", lambda: audit.append(_audit_entry(n))),
    ]


async def _seed(mem: Memory) -> None:
    await mem.store.add([_record(0)])
    await mem.events.append([_event(0)])
    assert await mem.leases.acquire("jobs", "held", "w", HOUR, b"p") is not None
    assert await mem.leases.acquire("jobs", "other", "w", HOUR, b"p") is not None
    await mem.cache.put("c", "k0", b"v0")
    await mem.audit_log.append(_audit_entry(0))


async def _typed_failure(name: str, op: Callable[[], Awaitable[object]]) -> float:
    """Run `op` against a server that is down: it must fail with one of the
    library's errors (or succeed, for a server that already answers) within the
    bound; the time it took."""
    started = time.monotonic()
    try:
        await asyncio.wait_for(op(), SLACK + 6)
    except AgentMemoryError:
        pass
    except TimeoutError:
        pytest.fail(f"{name}: hung past {SLACK + 6} s")
    except BaseException as exc:
        pytest.fail(f"{name}: raw {type(exc).__module__}.{type(exc).__name__}: {exc}")
    else:
        pytest.fail(f"{name}: succeeded against a server that is down")
    took = time.monotonic() - started
    assert took < SLACK, f"{name}: took {took:.1f} s (bound {BOUND} s)"
    return took


async def _all_present(mem: Memory) -> None:
    """What _seed wrote is there (the acknowledged writes)."""
    got = await mem.store.get("alice", "r0")
    assert got is not None
    since = NOW - timedelta(days=1)
    window = await mem.events.window("ops", since=since, limit=50)
    assert "e0" in {e.id for e in window.events}
    lease = await mem.leases.get("jobs", "held")
    assert lease is not None
    assert lease.owner == "w"
    assert await mem.cache.get("c", "k0") == b"v0"
    page = await mem.audit_log.list(limit=50)
    assert "a0" in {e.id for e in page.entries}


# -- 1 to 3: the ports --------------------------------------------------------------


async def test_writes_while_hung_fail_typed_and_fast(outage: Outage, memory: Memory) -> None:
    """When this fails, a write against a server that answers nothing leaked a
    raw driver error or waited longer than the configured bound, or the same
    handles did not work again once the server ran (or the seeded data went)."""
    await _seed(memory)
    outage.hang()
    try:
        for name, op in _writes(memory, 1):
            await _typed_failure(name, op)
    finally:
        outage.resume()
    await eventually(memory.store.ping, timeout=30, pause=0.1)
    await _all_present(memory)
    for name, op in _writes(memory, 2):
        try:
            await op()
        except AgentMemoryError as exc:  # pragma: no cover - the message says which
            pytest.fail(f"{name} failed after the server came back: {exc!r}")


async def test_writes_while_killed_then_restart(outage: Outage, memory: Memory) -> None:
    """When this fails, a write against a killed server leaked a raw driver
    error or hung, the handles opened before did not recover without
    reopening, or an acknowledged write was lost across a kill -9."""
    await _seed(memory)
    outage.kill()
    try:
        took = [await _typed_failure(name, op) for name, op in _writes(memory, 1)]
    finally:
        outage.start()
    # a server that refuses connections fails calls at once (not one connect
    # timeout each: 11 s for these eleven writes, a minute at the default 5 s)
    assert sum(took) < SLACK, f"{sum(took):.1f} s for {len(took)} writes"
    await eventually(memory.store.ping, timeout=30, pause=0.1)
    if outage.durable:
        await _all_present(memory)
    else:
        await _seed(memory)  # no persistence: put the state the writes expect back
    for name, op in _writes(memory, 2):
        await eventually(op, timeout=10, pause=0.1)
        del name


# -- 4 and 5: the services ----------------------------------------------------------


async def _services_during(mem: Memory, label: str) -> None:
    """Every service call against a server that is down: none raises into the
    caller, each reports what failed, and none takes longer than a bound."""
    users = mem.users
    timings: dict[str, float] = {}

    async def timed(name: str, coro: Awaitable[Any]) -> Any:
        started = time.monotonic()
        try:
            return await asyncio.wait_for(coro, 60)
        except AuditNotRecorded as exc:  # documented: the forget happened, the entry did not
            return exc
        except BaseException as exc:
            pytest.fail(f"{label} {name} raised {type(exc).__module__}.{type(exc).__name__}: {exc}")
        finally:
            timings[name] = time.monotonic() - started

    report = await timed(
        "extract",
        users.extract(user_id="carol", namespace="travel", conversation="I'm vegan.", wait=True),
    )
    assert not report.ok, f"{label} extract reported no failure"
    report = await timed(
        "reconcile",
        users.reconcile(
            user_id="carol",
            namespace="travel",
            candidates=[FactCandidate(content="I live in Lisbon", category="context")],
        ),
    )
    assert not report.ok, f"{label} reconcile reported no failure"
    got = await timed("forget", users.forget("alice"))
    receipt = got.result if isinstance(got, AuditNotRecorded) else got
    assert not receipt.complete, f"{label} forget said complete: {receipt}"
    assert any(f.startswith("store: ") for f in receipt.failures), receipt.failures
    async with mem.agents.request(
        agent="a", domain="ops", request_id="req-1", user_id="alice", entities=[Entity("pod", "p")]
    ) as req:
        ctx = await timed("planning_context", req.planning_context())
        assert not ctx.report.ok
        rec = await timed("record", req.record([Step(action="restart pod p", response="done")]))
        assert not rec.ok
    assert not req.reports["activity-announcement"].ok
    slow = {k: round(v, 1) for k, v in timings.items() if v > 2 * SLACK}
    assert not slow, f"{label}: service calls too slow against a server that is down: {slow}"


async def _forget_completes(mem: Memory) -> None:
    """A retried forget, the server back, completes and leaves nothing of alice."""
    deadline = time.monotonic() + 20
    while True:  # the server is back: within a few bounds a forget completes
        try:
            receipt = await mem.users.forget("alice")
        except AuditNotRecorded as exc:
            receipt = exc.result
        if receipt.complete or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert receipt.complete, receipt.failures
    assert await mem.store.get("alice", "r0") is None
    since = NOW - timedelta(days=1)
    window = await mem.events.window("ops", since=since, limit=50)
    assert not any(e.user_id == "alice" for e in window.events)


async def test_services_fail_open_while_hung(outage: Outage, memory: Memory) -> None:
    """When this fails, a service raised into the agent (or took several
    bounds) while the server answered nothing, or a forget that failed
    part-way called itself complete, or its retry did not complete."""
    await _seed(memory)
    outage.hang()
    try:
        await _services_during(memory, f"{outage.name} hung")
    finally:
        outage.resume()
    await _forget_completes(memory)


async def test_services_fail_open_while_killed(outage: Outage, memory: Memory) -> None:
    """As above, with the server killed (then restarted)."""
    await _seed(memory)
    outage.kill()
    try:
        await _services_during(memory, f"{outage.name} killed")
    finally:
        outage.start()
    if not outage.durable:
        await eventually(memory.store.ping, timeout=30, pause=0.1)
        await _seed(memory)
    await _forget_completes(memory)


# -- SQLite: a writer process killed with SIGKILL -------------------------------------

_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from datetime import UTC, datetime, timedelta
    import numpy as np
    from agent_memory import connect
    from agent_memory.adapters.memory import HashingEmbedder
    from agent_memory.bootstrap import Settings
    from agent_memory.domain.records import Event, MemoryRecord

    async def main(url, deployment):
        emb = HashingEmbedder(32)
        async with connect(url, settings=Settings(deployment=deployment), embedder=emb) as m:
            now = datetime.now(UTC)
            vec = np.linspace(1.0, 3.0, 32, dtype=np.float32)
            n = 0
            while True:
                n += 1
                batch = [MemoryRecord(id=f"w{n}-{j}", owner="alice", namespace="facts",
                         kind="fact", content=f"writer fact {n} {j}", vector=vec,
                         created_at=now, updated_at=now) for j in range(50)]
                await m.store.add(batch)
                print(f"record w{n}-0", flush=True)
                await m.events.append([Event(id=f"we{n}", domain="ops", agent="w",
                    action="a", outcome="ok", summary="s", occurred_at=now,
                    recorded_at=now, user_id="alice")])
                print(f"event we{n}", flush=True)
                await m.cache.put("c", f"w{n}", b"v")
                print(f"cache w{n}", flush=True)
                await m.leases.acquire("jobs", f"w{n}", "writer", timedelta(hours=1), b"p")
                print(f"lease w{n}", flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def _spawn_writer(url: str, deployment: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, url, deployment],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def _start_writer(
    url: str, deployment: str, acks: int
) -> tuple[subprocess.Popen[str], list[str]]:
    """A writer process on the same file, once it acknowledged `acks` writes."""
    proc = _spawn_writer(url, deployment)
    assert proc.stdout is not None
    lines: list[str] = []
    loop = asyncio.get_running_loop()
    while len(lines) < acks:
        line = await asyncio.wait_for(loop.run_in_executor(None, proc.stdout.readline), 60)
        assert line, f"the writer died: {proc.stderr.read() if proc.stderr else ''}"
        lines.append(line.strip())
    return proc, lines


async def _acknowledged_present(mem: Memory, lines: list[str]) -> None:
    since = NOW - timedelta(days=2)
    window = await mem.events.window("ops", since=since, limit=1000)
    event_ids = {e.id for e in window.events}
    for line in lines:
        kind, key = line.split()
        if kind == "record":
            assert await mem.store.get("alice", key) is not None, line
        elif kind == "event":
            assert key in event_ids, line
        elif kind == "cache":
            assert await mem.cache.get("c", key) == b"v", line
        else:
            lease = await mem.leases.get("jobs", key)
            assert lease is not None, line
            assert lease.owner == "writer"


@pytest.mark.parametrize("stop_first", [False, True], ids=["killed", "stopped-then-killed"])
async def test_sqlite_writer_killed(tmp_path: Path, stop_first: bool) -> None:
    """When this fails, a SQLite handle opened before another process died
    mid-write (or hung holding the write lock) leaked a raw sqlite3 error,
    waited past busy_timeout, did not work again once the writer was gone, or an
    acknowledged write of the dead writer was lost."""
    deployment = f"outage-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'm.db'}?busy_timeout=1"
    mem = await connect(url, settings=Settings(deployment=deployment), embedder=EMB)
    try:
        await _seed(mem)
        proc, lines = await _start_writer(url, deployment, 24)
        try:
            if stop_first:
                os.kill(proc.pid, signal.SIGSTOP)  # perhaps inside a transaction
                for name, op in _writes(mem, 1):
                    started = time.monotonic()
                    try:
                        await asyncio.wait_for(op(), 15)
                    except AgentMemoryError:
                        pass
                    except BaseException as exc:
                        pytest.fail(f"{name}: raw {type(exc).__module__}.{type(exc).__name__}")
                    assert time.monotonic() - started < SLACK, name
                report = await mem.users.extract(
                    user_id="carol", namespace="travel", conversation="I'm vegan.", wait=True
                )
                assert report.details.get("candidates") == 1
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            assert proc.stdout is not None
            lines += [line.strip() for line in proc.stdout.read().splitlines() if line.strip()]
            proc.stdout.close()
            if proc.stderr is not None:
                proc.stderr.close()
        # the same handles, the writer gone: every write works, nothing acknowledged lost
        for name, op in _writes(mem, 2):
            try:
                await asyncio.wait_for(op(), 15)
            except BaseException as exc:
                pytest.fail(f"{name} after the writer died: {type(exc).__name__}: {exc}")
        await _all_present(mem)
        await _acknowledged_present(mem, lines)
        await _forget_completes(mem)
        page = await mem.store.list("alice", limit=10)
        assert page.records == ()
    finally:
        await mem.close()

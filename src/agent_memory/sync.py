"""The blocking facade, for scripts and notebooks:

    from agent_memory.sync import connect

    with connect("sqlite:memory.db") as memory:
        with memory.agents.request(agent="bot", domain="k8s", request_id="r-1") as req:
            print(req.planning_context().text)
            req.record([Step(action="kubectl get pods", outcome="ok")])
        print(memory.events.window("k8s", since=..., limit=20))
        memory.users.forget("u1")

Every method has the signature of the async one it wraps, returning its result
rather than an awaitable (each class below is written out, so a type checker
sees real types). The async stores and services run on one private event loop
on a helper thread, so clients keep their connections between calls, a
request's signal and claims keep being renewed while the script does other
work, and the facade also works where an event loop is already running
(Jupyter). Inside async code, prefer the async API: a blocking call holds up
the caller's loop until it returns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
import weakref
from collections.abc import Coroutine, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from agent_memory.bootstrap import Memory, Settings
from agent_memory.bootstrap import connect as _connect
from agent_memory.domain.audit import AuditEntry, AuditPage
from agent_memory.domain.errors import ConfigurationError, StoreClosed
from agent_memory.domain.records import (
    EmbeddingSpace,
    Entity,
    Event,
    EventWindow,
    Lease,
    MemoryRecord,
    Page,
    ScoredRecord,
)
from agent_memory.domain.steps import Step
from agent_memory.domain.user_facts import FactCandidate
from agent_memory.domain.views import Fact, KnowledgeItem, RenderedView
from agent_memory.ports.models import Clock, Embedder, LanguageModel
from agent_memory.ports.storage import Cache, EventLog, LeaseStore, MemoryStore
from agent_memory.services.audit import AuditTrail
from agent_memory.services.coordination import ClaimResult
from agent_memory.services.observability import Observability
from agent_memory.services.planning import PlanningContext
from agent_memory.services.reports import StageReport
from agent_memory.services.request import AgentMemory, MemoryRequest
from agent_memory.services.user_memory import ForgetReceipt, UserMemory

__all__ = [
    "ConnectionClosed",
    "SyncAgents",
    "SyncCache",
    "SyncEventLog",
    "SyncLeaseStore",
    "SyncMemory",
    "SyncMemoryStore",
    "SyncRequest",
    "SyncUsers",
    "connect",
]

T = TypeVar("T")


class ConnectionClosed(StoreClosed, ConfigurationError):
    """An `agent_memory.sync` connection used after (or while) `close()` ran: a
    `StoreClosed`, as the stores raise to a call that lost the race with their
    close, and a `ConfigurationError`, as this facade raised before."""

    def __init__(self) -> None:
        super().__init__("this agent_memory.sync connection")


class _LoopThread:
    """A private event loop running on a daemon helper thread.

    Calls from any thread are submitted under a lock that `close()` takes too, so
    none is left waiting on a loop that has stopped: a call either runs before
    `close()` stops the loop or raises `ConnectionClosed`. A process forked after
    the connection was opened has the loop but not its thread: its calls raise a
    `ConfigurationError` at once instead of waiting forever."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=_serve, args=(self._loop,), name="agent-memory-sync", daemon=True
        )
        self._thread.start()

    def close_when_dropped(self, memory: Memory) -> None:
        """Once nothing references this loop thread any more (the `SyncMemory`
        and every object it handed out, which all hold it, were dropped without
        `close()`), close `memory` on the loop and stop the thread, without
        waiting: the finalizer may run on any thread, this loop's own included.
        Not at interpreter exit, where the daemon thread simply ends."""
        finalizer = weakref.finalize(self, _abandon, self._loop, memory, self._pid)
        finalizer.atexit = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def forked(self) -> bool:
        """True in a child process forked after this connection was opened."""
        return os.getpid() != self._pid

    def _refuse_fork(self) -> None:
        if self.forked:
            raise ConfigurationError(
                f"this agent_memory.sync connection was opened in process {self._pid}, "
                f"and process {os.getpid()} is a fork of it: its helper thread and its "
                "clients are not usable here; call agent_memory.sync.connect() again in "
                "this process (e.g. in a multiprocessing worker's initializer)"
            )

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the helper loop (`ConnectionClosed` once closed)."""
        try:
            self._refuse_fork()  # before the lock: a fork may have copied it held
            if threading.current_thread() is self._thread:
                raise ConfigurationError(
                    "a blocking agent_memory.sync call from its own event loop"
                )
            with self._lock:
                if self._closed:
                    raise ConnectionClosed()
                return asyncio.run_coroutine_threadsafe(coro, self._loop)
        except BaseException:
            coro.close()
            raise

    def _outcome(self, done: concurrent.futures.Future[T]) -> T:
        try:
            return done.result()
        except concurrent.futures.CancelledError:
            if self._closed:  # close() cancelled it
                raise ConnectionClosed() from None
            raise
        except BaseException:
            # the wait itself was interrupted (Ctrl-C: KeyboardInterrupt, or what
            # a signal handler raised): the call is cancelled on the loop rather
            # than left running there after its caller gave up on it
            if not done.done():
                done.cancel()
            raise

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the helper loop and block until it finishes."""
        return self._outcome(self.submit(coro))

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` on the helper loop from another event loop."""
        done = self.submit(coro)
        try:
            return await asyncio.wrap_future(done)
        except asyncio.CancelledError:
            if done.cancelled() and self._closed:  # close() cancelled it, not our caller
                raise ConnectionClosed() from None
            raise

    def close(self) -> None:
        """Cancel what is left, stop the loop and join the thread (idempotent).
        In a forked child it only marks the connection closed: the loop and its
        clients belong to the parent."""
        if self.forked:
            self._closed = True
            return
        if threading.current_thread() is self._thread:
            raise ConfigurationError("closing an agent_memory.sync connection from its own loop")
        with self._lock:
            if self._closed:
                return
            self._closed = True  # no call is submitted from here on
        asyncio.run_coroutine_threadsafe(self._cancel_rest(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    @staticmethod
    async def _cancel_rest() -> None:
        current = asyncio.current_task()
        rest = [t for t in asyncio.all_tasks() if t is not current]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)
        await asyncio.get_running_loop().shutdown_asyncgens()


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The helper thread: run the loop until stopped, then close it (a loop
    stopped by `_abandon` has no `close()` caller to close it; closing twice is
    harmless)."""
    loop.run_forever()
    if not loop.is_closed():
        loop.close()


def _abandon(loop: asyncio.AbstractEventLoop, memory: Memory, pid: int) -> None:
    """`_LoopThread.close_when_dropped`'s finalizer: close the memory and what
    is left on the loop, then stop it (the thread then ends). Never blocks."""
    if os.getpid() != pid or loop.is_closed():  # a fork's copy, or closed already
        return

    async def shutdown() -> None:
        try:
            # nobody is left to tell of a failure (nor, when the process is
            # exiting meanwhile, anything left to close it with)
            with contextlib.suppress(Exception):
                await memory.close()
        finally:
            await _LoopThread._cancel_rest()
            asyncio.get_running_loop().stop()

    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        asyncio.run_coroutine_threadsafe(shutdown(), loop)


class SyncMemoryStore:
    """Blocking `MemoryStore`."""

    def __init__(self, store: MemoryStore, loop: _LoopThread) -> None:
        self.wrapped = store
        self._run = loop.run

    @property
    def space(self) -> EmbeddingSpace:
        return self.wrapped.space

    def add(self, records: Sequence[MemoryRecord]) -> None:
        self._run(self.wrapped.add(records))

    def get(self, owner: str, id: str) -> MemoryRecord | None:
        return self._run(self.wrapped.get(owner, id))

    def update(self, record: MemoryRecord) -> None:
        self._run(self.wrapped.update(record))

    def delete(self, owner: str, id: str) -> bool:
        return self._run(self.wrapped.delete(owner, id))

    def search(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[ScoredRecord]:
        return self._run(
            self.wrapped.search(
                owner, vector, limit=limit, namespace=namespace, kinds=kinds, min_score=min_score
            )
        )

    def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        return self._run(
            self.wrapped.list(owner, namespace=namespace, kinds=kinds, limit=limit, cursor=cursor)
        )

    def delete_scope(
        self, owner: str, *, namespace: str | None = None, kinds: Sequence[str] | None = None
    ) -> int:
        return self._run(self.wrapped.delete_scope(owner, namespace=namespace, kinds=kinds))

    def ping(self) -> None:
        self._run(self.wrapped.ping())


class SyncEventLog:
    """Blocking `EventLog`."""

    def __init__(self, events: EventLog, loop: _LoopThread) -> None:
        self.wrapped = events
        self._run = loop.run

    @property
    def retention(self) -> timedelta:
        return self.wrapped.retention

    def append(self, events: Sequence[Event]) -> int:
        return self._run(self.wrapped.append(events))

    def window(
        self,
        domain: str,
        *,
        since: datetime,
        limit: int,
        entity: Entity | None = None,
        until: datetime | None = None,
    ) -> EventWindow:
        return self._run(
            self.wrapped.window(domain, since=since, limit=limit, entity=entity, until=until)
        )

    def erase_user(self, user_id: str) -> int:
        return self._run(self.wrapped.erase_user(user_id))

    def user_events(self, user_id: str) -> list[Event]:
        return self._run(self.wrapped.user_events(user_id))

    def domains(self) -> list[str]:
        return self._run(self.wrapped.domains())

    def purge_expired(self) -> int:
        return self._run(self.wrapped.purge_expired())

    def ping(self) -> None:
        self._run(self.wrapped.ping())


class SyncLeaseStore:
    """Blocking `LeaseStore`."""

    def __init__(self, leases: LeaseStore, loop: _LoopThread) -> None:
        self.wrapped = leases
        self._run = loop.run

    def acquire(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes = b""
    ) -> Lease | None:
        return self._run(self.wrapped.acquire(scope, key, owner, ttl, payload))

    def renew(
        self, scope: str, key: str, owner: str, ttl: timedelta, payload: bytes | None = None
    ) -> Lease:
        return self._run(self.wrapped.renew(scope, key, owner, ttl, payload))

    def release(self, scope: str, key: str, owner: str) -> bool:
        return self._run(self.wrapped.release(scope, key, owner))

    def get(self, scope: str, key: str) -> Lease | None:
        return self._run(self.wrapped.get(scope, key))

    def scan(self, scope: str, prefix: str = "") -> list[Lease]:
        return self._run(self.wrapped.scan(scope, prefix))

    def ping(self) -> None:
        self._run(self.wrapped.ping())


class SyncCache:
    """Blocking `Cache`."""

    def __init__(self, cache: Cache, loop: _LoopThread) -> None:
        self.wrapped = cache
        self._run = loop.run

    def get(self, scope: str, key: str) -> bytes | None:
        return self._run(self.wrapped.get(scope, key))

    def put(self, scope: str, key: str, value: bytes, ttl: timedelta | None = None) -> None:
        self._run(self.wrapped.put(scope, key, value, ttl))

    def delete(self, scope: str, key: str) -> bool:
        return self._run(self.wrapped.delete(scope, key))

    def delete_prefix(self, scope: str, prefix: str) -> int:
        return self._run(self.wrapped.delete_prefix(scope, prefix))

    def ping(self) -> None:
        self._run(self.wrapped.ping())


class SyncUsers:
    """Blocking user memory (`agent_memory.services.user_memory.UserMemory`)."""

    def __init__(self, users: UserMemory, loop: _LoopThread) -> None:
        self.wrapped = users
        self._run = loop.run

    def extract(
        self, *, user_id: str | None, namespace: str, conversation: str, wait: bool = False
    ) -> StageReport:
        return self._run(
            self.wrapped.extract(
                user_id=user_id, namespace=namespace, conversation=conversation, wait=wait
            )
        )

    def drain(self) -> list[StageReport]:
        return self._run(self.wrapped.drain())

    def reconcile(
        self, *, user_id: str, namespace: str, candidates: Sequence[FactCandidate]
    ) -> StageReport:
        return self._run(
            self.wrapped.reconcile(user_id=user_id, namespace=namespace, candidates=candidates)
        )

    def recall(
        self, *, user_id: str, namespace: str, request: str
    ) -> tuple[list[Fact], StageReport]:
        return self._run(self.wrapped.recall(user_id=user_id, namespace=namespace, request=request))

    def profile(self, *, user_id: str | None, namespace: str, request: str) -> RenderedView:
        return self._run(
            self.wrapped.profile(user_id=user_id, namespace=namespace, request=request)
        )

    def forget(self, user_id: str, namespace: str | None = None) -> ForgetReceipt:
        return self._run(self.wrapped.forget(user_id, namespace))

    def forget_fact(self, user_id: str, fact_id: str) -> ForgetReceipt:
        return self._run(self.wrapped.forget_fact(user_id, fact_id))

    def facts(self, *, user_id: str, namespace: str | None = None) -> list[MemoryRecord]:
        return self._run(self.wrapped.facts(user_id=user_id, namespace=namespace))

    def delete_scope(
        self, owner: str, *, namespace: str | None = None, kinds: Sequence[str] | None = None
    ) -> int:
        return self._run(self.wrapped.delete_scope(owner, namespace=namespace, kinds=kinds))


class SyncAudit:
    """Blocking `Memory.audit` (the audit trail): a page at a time, or all entries."""

    def __init__(self, audit: AuditTrail, loop: _LoopThread) -> None:
        self.wrapped = audit
        self._loop = loop

    def page(
        self,
        *,
        tenant: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> AuditPage:
        return self._loop.run(
            self.wrapped.page(tenant=tenant, since=since, limit=limit, cursor=cursor)
        )

    def entries(
        self, *, tenant: str | None = None, since: datetime | None = None, limit: int | None = None
    ) -> list[AuditEntry]:
        """Every entry (or the newest `limit`), newest first."""

        async def collect() -> list[AuditEntry]:
            return [e async for e in self.wrapped.entries(tenant=tenant, since=since, limit=limit)]

        return self._loop.run(collect())


class SyncRequest:
    """Blocking `MemoryRequest`: use it as a (plain) context manager."""

    def __init__(self, request: MemoryRequest, loop: _LoopThread) -> None:
        self.wrapped = request
        self._run = loop.run

    @property
    def agent(self) -> str:
        return self.wrapped.agent

    @property
    def domain(self) -> str:
        return self.wrapped.domain

    @property
    def request_id(self) -> str:
        return self.wrapped.request_id

    @property
    def claims(self) -> list[ClaimResult]:
        return self.wrapped.claims

    @property
    def reports(self) -> dict[str, StageReport]:
        return self.wrapped.reports

    @property
    def suspended(self) -> bool:
        return self.wrapped.suspended

    def __enter__(self) -> SyncRequest:
        self._run(self.wrapped.__aenter__())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._run(self.wrapped.__aexit__(exc_type, exc, tb))

    def planning_context(
        self, *, knowledge: Sequence[KnowledgeItem] = (), digest: str | None = None
    ) -> PlanningContext:
        return self._run(self.wrapped.planning_context(knowledge=knowledge, digest=digest))

    def record(self, steps: Sequence[Step]) -> StageReport:
        return self._run(self.wrapped.record(steps))

    def learn(self, result: str, *, wait: bool = False) -> StageReport:
        return self._run(self.wrapped.learn(result, wait=wait))

    def status(self, status: str) -> None:
        self.wrapped.status(status)

    def suspend(self) -> StageReport:
        return self._run(self.wrapped.suspend())

    def resume(self) -> StageReport:
        return self._run(self.wrapped.resume())


class SyncAgents:
    """Blocking agent-memory service (`agent_memory.services.request.AgentMemory`)."""

    def __init__(self, agents: AgentMemory, loop: _LoopThread) -> None:
        self.wrapped = agents
        self._loop = loop

    def request(
        self,
        *,
        agent: str,
        domain: str,
        request_id: str,
        user_id: str | None = None,
        entities: Sequence[Entity] = (),
        doing: str = "",
    ) -> SyncRequest:
        return SyncRequest(
            self.wrapped.request(
                agent=agent,
                domain=domain,
                request_id=request_id,
                user_id=user_id,
                entities=entities,
                doing=doing,
            ),
            self._loop,
        )


class SyncMemory:
    """Blocking access to the stores (`store`, `events`, `leases`, `cache`) and the
    services (`agents`, `users`, `audit`); `memory` is the async `Memory` underneath."""

    def __init__(self, memory: Memory, loop: _LoopThread) -> None:
        self.memory = memory
        self._loop = loop
        self.store = SyncMemoryStore(memory.store, loop)
        self.events = SyncEventLog(memory.events, loop)
        self.leases = SyncLeaseStore(memory.leases, loop)
        self.cache = SyncCache(memory.cache, loop)
        self.agents = SyncAgents(memory.agents, loop)
        self.users = SyncUsers(memory.users, loop)
        self.audit = SyncAudit(memory.audit, loop)

    @property
    def url(self) -> str:
        return self.memory.url

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop (on the helper thread) that `memory` runs on: async
        code that is handed `memory` schedules onto it (`AgentMemoryStore`)."""
        return self._loop._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` (a coroutine using `memory`) on the memory's loop and block
        until it finishes: how code holding the async API calls it from any other
        thread (`AgentMemoryStore`'s sync API). `ConnectionClosed` after
        `close()`; a `ConfigurationError` in a process forked from this one."""
        return self._loop.run(coro)

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """`run` for async code on another event loop: await `coro` on the
        memory's loop (`AgentMemoryStore`'s async API)."""
        return await self._loop.arun(coro)

    def close(self) -> None:
        """Close the stores and stop the helper thread (idempotent). Calls racing
        it from other threads either finish first or raise `ConnectionClosed`
        (a `StoreClosed`). In a process forked from the one that opened the
        connection it only marks it closed: the clients are the parent's."""
        if self._loop.forked:
            self._loop.close()
            return
        try:
            if not self._loop.closed:
                self._loop.run(self.memory.close())
        except ConnectionClosed:
            pass  # another thread closed it meanwhile
        finally:
            self._loop.close()

    def __enter__(self) -> SyncMemory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def connect(
    url: str | None = None,
    *,
    settings: Settings | None = None,
    embedder: Embedder | Any | None = None,
    llm: LanguageModel | None = None,
    clock: Clock | None = None,
    observability: Observability | None = None,
) -> SyncMemory:
    """Blocking `agent_memory.connect` (same URLs and options); close the result,
    or use it as a context manager."""
    loop = _LoopThread()
    try:
        memory = loop.run(
            _open(
                url,
                settings=settings,
                embedder=embedder,
                llm=llm,
                clock=clock,
                observability=observability,
            )
        )
    except BaseException:
        loop.close()
        raise
    try:
        opened = SyncMemory(memory, loop)
        loop.close_when_dropped(memory)
        return opened
    except BaseException:
        try:
            loop.run(memory.close())
        finally:
            loop.close()
        raise


async def _open(
    url: str | None,
    *,
    settings: Settings | None,
    embedder: Embedder | None,
    llm: LanguageModel | None,
    clock: Clock | None,
    observability: Observability | None,
) -> Memory:
    return await _connect(
        url,
        settings=settings,
        embedder=embedder,
        llm=llm,
        clock=clock,
        observability=observability,
    )

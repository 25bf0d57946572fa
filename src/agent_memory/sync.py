"""A small synchronous facade for scripts and notebooks-free tooling.

    from agent_memory.sync import connect

    with connect("sqlite:///memory.db") as memory:
        print(memory.events.window("k8s", since=..., limit=20))
        memory.users.forget("u1")

Every async method of the wired stores and services runs to completion on one
private event loop (an `asyncio.Runner`), so clients keep their connections
between calls. Not for use inside a running event loop: use the async API there.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from types import TracebackType
from typing import Any

from agent_memory.bootstrap import Memory, agent_memory_service, user_memory_service
from agent_memory.bootstrap import connect as _connect
from agent_memory.domain.errors import ConfigurationError

__all__ = ["SyncMemory", "connect"]


class _Blocking:
    """Proxy that turns every coroutine-returning call into a blocking one."""

    def __init__(self, target: Any, runner: asyncio.Runner) -> None:
        self._target = target
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value

        @functools.wraps(value)
        def call(*args: Any, **kwargs: Any) -> Any:
            result = value(*args, **kwargs)
            if inspect.isawaitable(result):
                return self._runner.run(_await(result))
            return result

        return call

    def __repr__(self) -> str:
        return f"Blocking({self._target!r})"


async def _await(awaitable: Any) -> Any:
    return await awaitable


class SyncMemory:
    """Blocking access to the stores (`store`, `events`, `leases`, `cache`) and the
    user-memory service (`users`)."""

    def __init__(self, memory: Memory, runner: asyncio.Runner) -> None:
        self._memory = memory
        self._runner = runner
        self.store = _Blocking(memory.store, runner)
        self.events = _Blocking(memory.events, runner)
        self.leases = _Blocking(memory.leases, runner)
        self.cache = _Blocking(memory.cache, runner)
        self.users = _Blocking(user_memory_service(memory), runner)
        self.agents = agent_memory_service(memory)  # async context managers stay async

    @property
    def url(self) -> str:
        return self._memory.url

    def close(self) -> None:
        try:
            self._runner.run(self._memory.close())
        finally:
            self._runner.close()

    def __enter__(self) -> SyncMemory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def connect(url: str | None = None, **kwargs: Any) -> SyncMemory:
    """Blocking `agent_memory.connect`; raises `ConfigurationError` inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise ConfigurationError("agent_memory.sync is for code without a running event loop")
    runner = asyncio.Runner()
    try:
        memory = runner.run(_connect(url, **kwargs))
    except BaseException:
        runner.close()
        raise
    return SyncMemory(memory, runner)

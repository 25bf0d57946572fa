"""Agent requests kept open between HTTP calls.

An agent request is a context manager in the library (enter: signal and
claims; exit: release them). Over HTTP it spans calls: `start` enters it and
parks it here under (tenant, request id), `finish` exits it. A request nobody
touches for `idle_timeout` is finished by the reaper (its claims released), and
`close()` finishes every open one on shutdown, so no claim outlives the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from attrs import define

from agent_memory.services.request import MemoryRequest

__all__ = ["OpenRequest", "Sessions"]

_log = logging.getLogger(__name__)


@define
class OpenRequest:
    request: MemoryRequest
    tenant: str
    touched: float
    lock: asyncio.Lock


class Sessions:
    """Open agent requests per tenant (one server process holds its own)."""

    def __init__(self, *, idle_timeout: float, max_per_tenant: int) -> None:
        self.idle_timeout = idle_timeout
        self.max_per_tenant = max_per_tenant
        self._open: dict[tuple[str, str], OpenRequest] = {}
        self._reaper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._open)

    def count(self, tenant: str) -> int:
        return sum(1 for t, _ in self._open if t == tenant)

    def open_of(self, tenant: str) -> list[OpenRequest]:
        return [v for (t, _), v in self._open.items() if t == tenant]

    def has(self, tenant: str, request_id: str) -> bool:
        return (tenant, request_id) in self._open

    def add(self, tenant: str, request_id: str, request: MemoryRequest) -> OpenRequest:
        entry = OpenRequest(request, tenant, time.monotonic(), asyncio.Lock())
        self._open[(tenant, request_id)] = entry
        return entry

    def get(self, tenant: str, request_id: str) -> OpenRequest | None:
        entry = self._open.get((tenant, request_id))
        if entry is not None:
            entry.touched = time.monotonic()
        return entry

    def pop(self, tenant: str, request_id: str) -> OpenRequest | None:
        return self._open.pop((tenant, request_id), None)

    def discard(self, entry: OpenRequest, request_id: str) -> None:
        """Drop `entry` if it is still the one open under its id: while its
        start ran, a `finish` may have taken it and a new start may have
        opened another request under the same id, which stays."""
        if self._open.get((entry.tenant, request_id)) is entry:
            del self._open[(entry.tenant, request_id)]

    def start_reaper(self) -> None:
        self._reaper = asyncio.create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        interval = max(min(self.idle_timeout / 4, 30.0), 0.05)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            stale = [k for k, v in self._open.items() if now - v.touched > self.idle_timeout]
            for key in stale:
                entry = self._open.pop(key, None)
                if entry is not None:
                    _log.info("finishing an agent request idle for %.0fs", self.idle_timeout)
                    await finish(entry, failed=True)

    async def close(self) -> int:
        """Stop the reaper and finish every open request (claims released)."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        entries = list(self._open.values())
        self._open.clear()
        await asyncio.gather(*(finish(e, failed=True) for e in entries))
        return len(entries)


async def finish(entry: OpenRequest, *, failed: bool) -> None:
    """Exit the library's request context (fail-open inside: never raises)."""
    async with entry.lock:
        try:
            if failed:
                await entry.request.__aexit__(RuntimeError, RuntimeError("finished"), None)
            else:
                await entry.request.__aexit__(None, None, None)
        except Exception as exc:  # the library is fail-open; belt and braces
            _log.warning("finishing an agent request failed: %s", type(exc).__name__)

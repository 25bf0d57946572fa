"""Small helpers shared by the contract classes: clause messages, capability
gates, expected errors, the close race, timestamp comparison. Kept small and
stable on purpose."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, TypeVar

import pytest
from hypothesis import HealthCheck, settings

from agent_memory.contract_tests.capabilities import Capabilities
from agent_memory.domain.errors import StoreClosed

__all__ = [
    "BASE_TIME",
    "ShortTtl",
    "clause",
    "expect_closed",
    "expect_raises",
    "ms",
    "property_settings",
    "race_close",
    "require_capability",
    "require_reopen",
    "same_instant",
]

_T = TypeVar("_T")

#: A fixed, millisecond-precise instant the suites build their timestamps from.
BASE_TIME = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def clause(cid: str, rule: str, got: object = None) -> str:
    """An assertion message: `[CID] rule; got <got>` (clause id first, always)."""
    text = f"[{cid}] {rule}"
    return text if got is None else f"{text}; got {got!r}"


def require_capability(declared: bool, capability: str, why: str) -> None:
    """Skip the calling test when the adapter did not declare `capability`."""
    if not declared:
        pytest.skip(f"{capability} not declared: {why}")


class ShortTtl:
    """TTL timing for suites whose entries expire, scaled to the declared
    `ttl_resolution_ms`: a short TTL is 4x the resolution, and outliving it
    waits 3x the resolution past it."""

    capabilities: ClassVar[Capabilities]

    def _res(self) -> timedelta:
        return timedelta(milliseconds=max(self.capabilities.ttl_resolution_ms, 1))

    def _short(self) -> timedelta:
        return self._res() * 4

    async def _outlive_short(self) -> None:
        await asyncio.sleep((self._short() + self._res() * 3).total_seconds())


def require_reopen(capabilities: Capabilities, cid: str, reopen: _T | None) -> _T:
    """The `reopen` fixture's opener; skips when `reopen` is not declared, fails
    under `cid` when it is declared but the fixture was not overridden."""
    require_capability(capabilities.reopen, "reopen", "a second handle is needed to observe this")
    if reopen is None:
        pytest.fail(clause(cid, "capabilities.reopen is declared but the `reopen` fixture is None"))
    return reopen


def property_settings(max_examples: int) -> settings:
    """Hypothesis settings for property tests run on the (function-scoped) fixture."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
            HealthCheck.too_slow,
        ],
    )


async def expect_raises(
    cid: str, rule: str, exc: type[BaseException], op: Awaitable[object]
) -> None:
    """Await `op`; fail under `cid` unless it raises `exc`."""
    try:
        result = await op
    except exc:
        return
    except Exception as other:
        pytest.fail(clause(cid, rule, f"{type(other).__name__}: {other}"))
    pytest.fail(clause(cid, rule, f"no error, returned {result!r}"))


async def expect_closed(cid: str, ops: Mapping[str, Callable[[], Awaitable[object]]]) -> None:
    """Every named operation raises `StoreClosed` (call after close)."""
    for name, op in ops.items():
        await expect_raises(cid, f"{name} after close raises StoreClosed", StoreClosed, op())


async def race_close(
    cid: str,
    verb: str,
    calls: Sequence[tuple[str, Callable[[], Coroutine[Any, Any, _T]]]],
    close: Callable[[], Awaitable[None]],
) -> list[_T | BaseException]:
    """Start every labelled call as a task (yielding to the loop now and then),
    close while they run, and return their results in order. A call failing
    with anything but `StoreClosed` fails under `cid` ("{verb} {label} ...")."""
    tasks: list[asyncio.Task[_T]] = []
    for i, (_, call) in enumerate(calls):
        tasks.append(asyncio.create_task(call()))
        if i % 7 == 6:
            await asyncio.sleep(0)
    await close()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for (label, _), r in zip(calls, results, strict=True):
        if isinstance(r, BaseException) and not isinstance(r, StoreClosed):
            pytest.fail(clause(cid, f"{verb} {label} fails only with StoreClosed", r))
    return results


def ms(n: int) -> timedelta:
    """`n` milliseconds."""
    return timedelta(milliseconds=n)


def same_instant(
    a: datetime, b: datetime, tolerance: timedelta = timedelta(milliseconds=1)
) -> bool:
    """True when both are timezone-aware and at most `tolerance` apart."""
    if a.tzinfo is None or b.tzinfo is None:
        return False
    return abs(a - b) <= tolerance

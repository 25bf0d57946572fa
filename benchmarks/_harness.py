"""The one way every benchmark here compares our code with its baseline.

- Paired, interleaved runs: each round times the baseline and ours back to back
  (the order alternates between rounds), so machine noise hits both sides alike.
- The result is the median of the per-pair ratios (ours / baseline).
- Warm-up rounds run first and are not counted.
- Inputs are built by the caller outside the timed region: a side is a
  zero-argument callable (sync or async) that does only the work being compared.
- GC is left as in production (no forced collections between calls).
- Every comparison ends with one line in a fixed format:

      ratio <name> <value>x (target <= <t>x)

  so that every script reads the same and a tool can collect the lines.
"""

from __future__ import annotations

import asyncio
import inspect
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["Comparison", "compare", "compare_async", "ratio_line", "timed", "timed_async"]

Side = Callable[[], Any]
AsyncSide = Callable[[], Awaitable[Any]]


class Comparison:
    """Paired timings of one comparison."""

    def __init__(self, name: str, target: float | None) -> None:
        self.name = name
        self.target = target
        self.ours: list[float] = []
        self.baseline: list[float] = []

    @property
    def ratios(self) -> list[float]:
        return [o / b for o, b in zip(self.ours, self.baseline, strict=True) if b > 0]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    def line(self) -> str:
        return ratio_line(self.name, self.ratio, self.target)


def ratio_line(name: str, value: float, target: float | None) -> str:
    """The fixed result line (`target` None: reported without a target)."""
    goal = "no target" if target is None else f"target <= {target:g}x"
    return f"ratio {name} {value:.2f}x ({goal})"


def timed(fn: Side) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


async def timed_async(fn: AsyncSide) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


def compare(
    name: str,
    ours: Side,
    baseline: Side,
    *,
    rounds: int = 30,
    warmup: int = 3,
    target: float | None = None,
) -> Comparison:
    """Time two synchronous sides in interleaved pairs."""
    result = Comparison(name, target)
    for i in range(warmup + rounds):
        if i % 2:
            b, o = timed(baseline), timed(ours)
        else:
            o, b = timed(ours), timed(baseline)
        if i >= warmup:
            result.ours.append(o)
            result.baseline.append(b)
    return result


async def compare_async(
    name: str,
    ours: Side | AsyncSide,
    baseline: Side | AsyncSide,
    *,
    rounds: int = 30,
    warmup: int = 3,
    target: float | None = None,
) -> Comparison:
    """Time two sides (each sync or async) in interleaved pairs on the running loop."""

    async def run(fn: Side | AsyncSide) -> float:
        start = time.perf_counter()
        out = fn()
        if inspect.isawaitable(out):
            await out
        return time.perf_counter() - start

    result = Comparison(name, target)
    for i in range(warmup + rounds):
        if i % 2:
            b, o = await run(baseline), await run(ours)
        else:
            o, b = await run(ours), await run(baseline)
        if i >= warmup:
            result.ours.append(o)
            result.baseline.append(b)
        await asyncio.sleep(0)
    return result


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]

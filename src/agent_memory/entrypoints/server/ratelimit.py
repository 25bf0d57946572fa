"""Per-key rate limits: a token bucket per API key, in process.

`rate` requests per second on average, bursts up to `burst`. A refused request
learns how long until a token is back (`Retry-After`, whole seconds, >= 1).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["RateLimiter"]


class RateLimiter:
    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not rate > 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, key: str, rate: float | None = None, burst: int | None = None) -> float | None:
        """None when the request may go ahead, else the seconds to wait. `rate`
        and `burst` override the defaults for this key."""
        rate = self.rate if rate is None else rate
        cap = float(self.burst if burst is None else burst)
        now = self._clock()
        tokens, last = self._buckets.get(key, (cap, now))
        tokens = min(cap, tokens + (now - last) * rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return None
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / rate

    @staticmethod
    def retry_after(wait: float) -> str:
        return str(max(1, math.ceil(wait)))

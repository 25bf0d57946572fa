"""When and how long to wait before retrying a provider call.

Pure policy, no I/O: the HTTP layer asks it which failures are retryable and
how long to sleep. Exponential backoff with jitter spreads retries of many
clients apart; a server's `Retry-After` (or OpenAI's `retry-after-ms`) wins
over the computed backoff, capped so a hostile header cannot stall a caller.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from attrs import field, frozen

from agent_memory.domain.validation import (
    attrs_validator,
    require_non_negative_number,
    require_positive,
)

__all__ = ["RETRYABLE_STATUSES", "RetryPolicy", "is_retryable_status", "parse_retry_after"]

#: Statuses worth another attempt: request timeout, rate limiting, and every 5xx.
RETRYABLE_STATUSES = frozenset({408, 429})


def is_retryable_status(status: int) -> bool:
    """True for 408, 429 and 5xx: the same request may succeed later."""
    return status in RETRYABLE_STATUSES or 500 <= status <= 599


_attempts = attrs_validator(require_positive, "retry.max_attempts")


def _non_negative(name: str) -> Callable[[object, Any, object], None]:
    return attrs_validator(require_non_negative_number, name)


@frozen
class RetryPolicy:
    """Attempts and delays for retryable failures (429, 408, 5xx, transport errors).

    `max_attempts` counts the first try (1 disables retries). The delay after the
    n-th failed attempt is `min(max_delay, base_delay * 2**(n-1))`, jittered into
    its upper half; a `Retry-After` from the server replaces it, capped at
    `retry_after_cap` seconds.
    """

    max_attempts: int = field(default=3, validator=_attempts)
    base_delay: float = field(default=0.5, validator=_non_negative("retry.base_delay"))
    max_delay: float = field(default=8.0, validator=_non_negative("retry.max_delay"))
    retry_after_cap: float = field(
        default=30.0,
        validator=_non_negative("retry.retry_after_cap"),
    )

    def backoff(self, failed_attempts: int, rng: random.Random) -> float:
        """The jittered exponential delay after `failed_attempts` (>= 1) failures."""
        exponent = min(max(failed_attempts - 1, 0), 62)
        ceiling = min(self.max_delay, self.base_delay * (2.0**exponent))
        return ceiling / 2.0 + rng.uniform(0.0, ceiling / 2.0)

    def delay(self, failed_attempts: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait before the next attempt: the server's word, else backoff."""
        if retry_after is not None:
            return min(retry_after, self.retry_after_cap)
        return self.backoff(failed_attempts, rng)


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds the server asked us to wait, or None when it did not say (or said nonsense).

    Reads `retry-after-ms` (OpenAI) first, then `Retry-After` as delta-seconds or
    an HTTP date. Negative or non-finite values are ignored.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = _seconds(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    seconds = _seconds(raw)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now if now is not None else datetime.now(UTC)
    return max(0.0, (when - current).total_seconds())


def _seconds(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value

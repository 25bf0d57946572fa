"""Building and owning the redis.asyncio client (never at import time)."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RConnectionError
from redis.exceptions import TimeoutError as RTimeoutError

__all__ = ["Client", "connect"]

Client = aioredis.Redis


def connect(url: str, **options: Any) -> aioredis.Redis:
    """A client for `url` speaking RESP2 with bytes replies, bounded timeouts and a
    short retry on connection errors (so a restarted server is picked up again)."""
    options.setdefault("socket_timeout", 5.0)
    options.setdefault("socket_connect_timeout", 2.0)
    options.setdefault("retry", Retry(ExponentialBackoff(cap=0.5, base=0.02), 3))
    options.setdefault("retry_on_error", [RConnectionError, RTimeoutError])
    options.setdefault("health_check_interval", 0)
    client: aioredis.Redis = aioredis.Redis.from_url(
        url, protocol=2, decode_responses=False, **options
    )
    return client

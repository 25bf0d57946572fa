"""Building and owning the redis.asyncio client (never at import time)."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

__all__ = ["Client", "connect"]

Client = aioredis.Redis


def connect(url: str, **options: Any) -> aioredis.Redis:
    """A client for `url` speaking RESP2 with bytes replies and bounded timeouts.

    No automatic command retries: a retried script could run twice (a batch add
    would then report its own records as duplicates). A dead pooled connection is
    detected and replaced when it is taken from the pool, so a restarted server is
    picked up again without rebuilding the adapter.
    """
    options.setdefault("encoding_errors", "surrogatepass")  # lone surrogates round-trip
    options.setdefault("socket_timeout", 30.0)
    options.setdefault("socket_connect_timeout", 2.0)
    options.setdefault("retry", Retry(NoBackoff(), 0))
    options.setdefault("health_check_interval", 0)
    client: aioredis.Redis = aioredis.Redis.from_url(
        url, protocol=2, decode_responses=False, **options
    )
    return client

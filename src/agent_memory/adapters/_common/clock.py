"""The system clock, for adapters and bootstrap (the domain never reads it)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["SystemClock"]


class SystemClock:
    """`Clock` on the wall time, timezone-aware UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)

"""Time helpers shared by every layer: the wall clock and microsecond encodings.

`SystemClock` is the one `Clock` on wall time (services and adapters default to
it; the domain's own functions take `now` as an argument and never read it).
`to_micros`/`from_micros` are the exact integer encoding the backends store
(microseconds since the Unix epoch; an aware datetime round-trips unchanged).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["EPOCH", "MICROSECOND", "SystemClock", "from_micros", "to_micros"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


class SystemClock:
    """`Clock` on the wall time, timezone-aware UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


def to_micros(moment: datetime) -> int:
    """Microseconds since the epoch: exact for every aware datetime (fits an i64)."""
    return (moment - EPOCH) // MICROSECOND


def from_micros(micros: int) -> datetime:
    """The aware UTC datetime `to_micros` encoded."""
    return EPOCH + timedelta(microseconds=micros)

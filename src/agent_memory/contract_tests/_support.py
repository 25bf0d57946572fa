"""Small helpers shared by the contract classes: clause messages, capability
gates, timestamp comparison. Kept small and stable on purpose."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

__all__ = [
    "BASE_TIME",
    "clause",
    "ms",
    "require_capability",
    "same_instant",
]

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

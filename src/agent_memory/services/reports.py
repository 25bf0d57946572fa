"""Structured, fail-open stage reports: what a stage did and what failed.

A failure in memory never breaks the agent: each stage catches what its ports
raise (never `CancelledError`) and records it here instead.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from attrs import define, field

from agent_memory.domain.errors import BackendUnavailable, StoreClosed

__all__ = ["StageFailure", "StageReport", "fail_open"]

_log = logging.getLogger(__name__)


@define
class StageFailure:
    """One thing that failed inside a stage."""

    operation: str
    error_type: str
    message: str
    #: the backend could not be reached (`BackendUnavailable` or `StoreClosed`, or
    #: a subclass): nothing was stored, and retrying is the caller's remedy
    unavailable: bool = False


@define
class StageReport:
    """What one stage did (`details`) and what failed (`failures`)."""

    stage: str
    details: dict[str, Any] = field(factory=dict)
    failures: list[StageFailure] = field(factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def fail(self, operation: str, exc: BaseException) -> None:
        self.failures.append(
            StageFailure(
                operation,
                type(exc).__name__,
                str(exc)[:500],
                unavailable=isinstance(exc, BackendUnavailable | StoreClosed),
            )
        )
        _log.warning(
            "agent-memory %s/%s failed: %s: %s", self.stage, operation, type(exc).__name__, exc
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "ok": self.ok,
            "details": dict(self.details),
            "failures": [
                {"operation": f.operation, "error": f.error_type, "message": f.message}
                for f in self.failures
            ],
        }


@asynccontextmanager
async def fail_open(report: StageReport, operation: str) -> AsyncIterator[None]:
    """Run a block; an `Exception` is recorded on `report` and swallowed."""
    try:
        yield
    except Exception as exc:
        report.fail(operation, exc)

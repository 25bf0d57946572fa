"""A stage failure records whether the backend was unreachable from the
exception's class, not its name: the server turns exactly those into
`503 backend-unavailable` (a write that was not stored is never a 200)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_memory.domain.errors import (
    BackendUnavailable,
    InvalidInput,
    StoreClosed,
)
from agent_memory.entrypoints.server.app import _stored
from agent_memory.entrypoints.server.problems import Problem
from agent_memory.services.reports import StageReport


class AdapterOutage(BackendUnavailable):
    """An adapter's own subclass, with a name the server never heard of."""


#: the same class name, an unrelated class: not an outage (matching by name took it for one)
BackendUnavailableLookalike = type("BackendUnavailable", (Exception,), {})


OUTAGES = [
    BackendUnavailable("redis", "down"),
    StoreClosed("closed"),
    AdapterOutage("postgresql", "gone"),
]
OTHERS = [InvalidInput("content", "bad"), BackendUnavailableLookalike("x"), ValueError("v")]


@pytest.mark.parametrize("exc", OUTAGES, ids=lambda e: type(e).__name__)
def test_outages_are_marked_and_answered_503(exc: Exception) -> None:
    report = StageReport("facts")
    report.fail("store.add", exc)
    assert report.failures[0].unavailable
    with pytest.raises(Problem) as raised:
        _stored(report)
    assert raised.value.status == 503


@pytest.mark.parametrize("exc", OTHERS, ids=lambda e: type(e).__name__)
def test_other_failures_are_not_outages(exc: Exception) -> None:
    report = StageReport("facts")
    report.fail("store.add", exc)
    assert not report.failures[0].unavailable
    assert _stored(report) is report


@given(st.lists(st.sampled_from(OUTAGES + OTHERS), max_size=6))
def test_a_report_is_an_outage_iff_one_failure_is(failures: list[Exception]) -> None:
    report = StageReport("steps")
    for exc in failures:
        report.fail("op", exc)
    outage = any(isinstance(e, BackendUnavailable | StoreClosed) for e in failures)
    if outage:
        with pytest.raises(Problem):
            _stored(report)
    else:
        assert _stored(report) is report

"""`<agent_memory>` renders what it rendered before it stopped at the budget.

`old_agent_memory` is the renderer as it was (it read every event of the
window). The new one reads an event section only until the budget is spent
(`LOOKAHEAD_EVENTS` more events after the first one omitted) and takes the
shared entity list and the format estimate from the first `_ESTIMATE_EVENTS`
events. So:

- where those bounds cannot bite (a section of at most `LOOKAHEAD_EVENTS + 1`
  events), the output is byte-identical to the old renderer's;
- on any window, it is byte-identical to the old renderer with exactly those
  two bounds switched on;
- events past the lookahead are never read at all, however long the window.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.contract_tests.view_strategies import (
    VIEW_BASE_TIME,
    agent_memory_inputs,
    budgets,
    hostile_texts,
    view_events,
)
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import Entity, Event
from agent_memory.domain.views import EventFormat, RenderedView, encode_text, render_agent_memory
from agent_memory.domain.views.agent_memory_view import (
    _ESTIMATE_EVENTS,
    LOOKAHEAD_EVENTS,
    _entities_json,
    _event_parts,
    _named_extra,
    event_line,
)
from agent_memory.domain.views.encoding import encode_texts
from views import old_agent_memory
from views.view_checks import PROPERTY

T0 = VIEW_BASE_TIME
_IDS = st.sampled_from([f"e{i}" for i in range(12)]) | st.text("abc0123", min_size=1, max_size=4)


def _same(inputs: dict[str, Any]) -> None:
    new: RenderedView = render_agent_memory(**inputs)
    old: RenderedView = old_agent_memory.render_agent_memory(**inputs)
    assert new.text == old.text
    assert new.report == old.report


def _windows(max_size: int) -> st.SearchStrategy[dict[str, Any]]:
    events = st.lists(view_events(_IDS), max_size=max_size)
    return st.fixed_dictionaries(
        {
            "domain": st.just("payments"),
            "as_of": st.just(T0),
            "digest": st.none() | hostile_texts(300),
            "events": events,
            "entity": st.none() | st.just(Entity("pod", "web-1")),
            "entity_events": events,
            "budget_bytes": budgets(),
            "event_format": st.none() | st.sampled_from(list(EventFormat)),
            "max_summary_bytes": st.sampled_from((24, 120, 400)),
        }
    )


@PROPERTY
@given(agent_memory_inputs())
def test_the_view_properties_inputs_render_as_before(inputs: dict[str, Any]) -> None:
    """Every input the view property tests draw (at most 5 events a section)."""
    _same(inputs)


@PROPERTY
@given(_windows(LOOKAHEAD_EVENTS + 1))
def test_windows_the_bounds_cannot_reach_render_as_before(inputs: dict[str, Any]) -> None:
    _same(inputs)


@settings(PROPERTY, max_examples=min(PROPERTY.max_examples, 200))
@given(_windows(90))
def test_every_window_renders_as_the_old_renderer_with_the_documented_bounds(
    inputs: dict[str, Any],
) -> None:
    old_agent_memory.LOOKAHEAD = LOOKAHEAD_EVENTS
    old_agent_memory.ESTIMATE_WINDOW = _ESTIMATE_EVENTS
    try:
        _same(inputs)
    finally:
        old_agent_memory.LOOKAHEAD = None
        old_agent_memory.ESTIMATE_WINDOW = None


def _event(i: int, summary: str) -> Event:
    return Event(
        id=f"evt-{i:05d}",
        domain="payments",
        agent="deployer",
        action="deploy",
        outcome="ok",
        summary=summary,
        occurred_at=T0 - timedelta(seconds=i),
        recorded_at=T0,
        entities=(Entity("pod", f"web-{i % 3}"),),
    )


class _Unreadable:
    """An event that fails the test if the renderer reads it in any way."""

    def __getattribute__(self, name: str) -> Any:
        raise AssertionError(f"an event past the lookahead was read ({name})")


_LONG = [
    _event(i, f"restarted web-{i % 3} after an OOM kill " * (1 + i % 4)) for i in range(10_000)
]


@given(st.integers(0, 8000), st.integers(0, 100))
def test_events_past_the_lookahead_are_never_read(budget: int, extra: int) -> None:
    """A 10,000-event window costs what its read prefix costs: past the first
    `_ESTIMATE_EVENTS` events, the renderer stops reading `LOOKAHEAD_EVENTS`
    events after the first one it omits, so the rest may be anything: they
    count as omitted, unread."""
    whole = render_agent_memory(domain="payments", as_of=T0, events=_LONG, budget_bytes=budget)
    first_omitted = next(i for i, e in enumerate(_LONG) if f'"{e.id}"' not in whole.text)
    read = max(_ESTIMATE_EVENTS, first_omitted + 1 + LOOKAHEAD_EVENTS + extra)
    trapped: list[Any] = [*_LONG[:read], *(_Unreadable() for _ in range(len(_LONG) - read))]
    view = render_agent_memory(domain="payments", as_of=T0, events=trapped, budget_bytes=budget)
    assert view.text == whole.text
    assert view.report == whole.report


def test_a_non_event_among_the_events_read_is_refused() -> None:
    events: list[Any] = [_event(i, "ok") for i in range(20)]
    events[3] = "not an event"
    with pytest.raises(InvalidInput, match="events"):
        render_agent_memory(domain="payments", as_of=T0, events=events)
    with pytest.raises(InvalidInput, match="entity_events"):
        render_agent_memory(domain="payments", as_of=T0, entity_events=events)


@given(st.lists(hostile_texts(80), max_size=8))
def test_encode_texts_is_encode_text_of_each(texts: list[str]) -> None:
    assert encode_texts(texts) == [encode_text(t) for t in texts]


def test_the_shared_entity_list_comes_from_the_first_estimate_events() -> None:
    """First 32 events: B repeats most; first 64: A; whole window: B again.
    The shared list is A: taken from the first `_ESTIMATE_EVENTS` (64) only."""
    a, b, c = (Entity("pod", "a"),), (Entity("pod", "b"),), (Entity("pod", "c"),)
    lists = [b] * 12 + [c] * 20 + [a] * 32 + [b] * 40
    events = [
        Event(
            id=f"e{i}",
            domain="payments",
            agent="x",
            action="",
            outcome="",
            summary="",
            occurred_at=T0,
            recorded_at=T0,
            entities=ents,
        )
        for i, ents in enumerate(lists)
    ]
    view = render_agent_memory(domain="payments", as_of=T0, events=events)
    assert '\nshared_entities: [["pod","a"]]\n' in view.text
    old = old_agent_memory.render_agent_memory(domain="payments", as_of=T0, events=events)
    assert '\nshared_entities: [["pod","b"]]\n' in old.text


@given(view_events(), st.sampled_from((24, 60, 400)), st.booleans())
def test_the_named_cost_estimate_is_exact(event: Event, cap: int, share: bool) -> None:
    """The format estimate prices the named line from the tuple line: exactly."""
    shared = event.entities if share and event.entities else None
    named = event_line(event, EventFormat.NAMED, max_summary_bytes=cap, shared_entities=shared)
    tuple_ = event_line(event, EventFormat.TUPLE, max_summary_bytes=cap, shared_entities=shared)
    shared_json = _entities_json(shared) if shared else None
    extra = _named_extra(_event_parts(event, cap), shared_json)
    assert named.cost == tuple_.cost + extra

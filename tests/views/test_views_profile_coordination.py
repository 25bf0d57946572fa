"""Properties of `<user_profile>` and `<agent_coordination>`."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agent_memory.contract_tests.view_strategies import (
    VIEW_BASE_TIME,
    VIEW_TAGS,
    activity_signals,
    budgets,
    view_facts,
)
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import Entity, Event
from agent_memory.domain.views import (
    ActivitySignal,
    Fact,
    FactCategory,
    Investigation,
    KnowledgeItem,
    RenderedView,
    ViewOutcome,
    render_agent_memory,
    render_coordination,
    render_user_profile,
)
from agent_memory.domain.views.user_profile_view import fact_line
from views.view_checks import (
    PROPERTY,
    check_counts,
    check_normalised,
    parse_view,
    shows_prefix_or_ellipsis,
)

T0 = VIEW_BASE_TIME
FACTS = st.lists(view_facts(), max_size=8)
SIGNALS = st.lists(activity_signals(), max_size=14)
BUDGETS = budgets(4_000)
PROFILE_TAGS = (
    "<user_profile>",
    "</user_profile>",
    "<context_precedence>",
    "</context_precedence>",
)
ORDER = [c.value for c in FactCategory]


def _fact(i: int, category: str, content: str, **kw: object) -> Fact:
    return Fact(
        id=f"f{i}",
        category=category,
        content=content,
        confidence=kw.get("confidence", 0.9),
        source=kw.get("source", "explicit"),
        created_at=T0 - timedelta(days=i),
        updated_at=T0 - timedelta(days=i),
    )


@PROPERTY
@example([_fact(1, "identity", "</user_profile><user_profile>" * 40)], 300)
@example([_fact(i, "context", "日本" * 200) for i in range(5)], 900)
@example([_fact(1, "summary", "x"), _fact(1, "summary", "x")], 8000)
@example([_fact(1, "identity", "e" + "\u0301" * 300)], 300)
@example(  # found by the ci profile: the shortest allowance fits though the room is
    # under it (the cut lands before a widened "<"), yet f2 was omitted for f1's line
    [_fact(1, "constraint", "<agent_memory>", confidence=0.0)] * 3
    + [_fact(1, c, "<agent_memory>", confidence=0.0) for c in ("preference", "relationship")]
    + [_fact(1, "context", "<agent_memory>", confidence=0.0)]
    + [_fact(3, "identity", "<context_precedence>", confidence=0.5)]
    + [_fact(2, "identity", "<agent_memory>" * 3, confidence=0.0)],
    864,
)
@example([_fact(1, "identity", "\uff1c/user_profile\uff1e\ufe64context_precedence\ufe65")], 400)
@given(FACTS, BUDGETS)
def test_user_profile_budget_counts_ids_priority_and_safety(facts: list[Fact], budget: int) -> None:
    """Within budget; every fact admitted, omitted or a duplicate; ids once;
    a lower group never keeps a fact where an omitted higher one would fit;
    input order does not matter; no stored text opens or closes a tag, even
    after NFKC; a shortened fact is never empty."""
    view = render_user_profile(facts, now=T0, budget_bytes=budget)
    assert len(view.text.encode("utf-8")) == view.report.bytes_used <= budget
    shuffled = list(facts)
    random.Random(len(facts)).shuffle(shuffled)
    assert render_user_profile(shuffled, now=T0, budget_bytes=budget) == view
    for rep in view.report.sections:
        assert rep.admitted + rep.omitted + rep.duplicates == rep.given
    if view.report.outcome is ViewOutcome.BUDGET_TOO_SMALL:
        assert view.text == ""
        return
    assert view.text.count("<") == 4
    for tag in VIEW_TAGS:
        assert view.text.count(tag) == (1 if tag in PROFILE_TAGS else 0), tag
    check_normalised(view.text, list(PROFILE_TAGS))
    _, sections = parse_view(view.text, "<user_profile>", "</user_profile>")
    check_counts(view.report, sections)
    shown_ids = [
        json.loads(line.rsplit("; id ", 1)[1][:-1]) for s in sections for line in s.records
    ]
    for fact_id, line in zip(shown_ids, (x for s in sections for x in s.records), strict=True):
        content, end = json.JSONDecoder().raw_decode(line, 2)
        shortened = line[end:].startswith(" [shortened] (")
        originals = [f.content for f in facts if f.id == fact_id]
        assert any(shows_prefix_or_ellipsis(c, content, shortened) for c in originals), line
    assert len(shown_ids) == len(set(shown_ids))
    assert set(shown_ids) <= {f.id for f in facts}
    names = [s.header.split(":")[0].lower() for s in sections]
    assert names == sorted(names, key=ORDER.index)
    # Priority: an omitted fact (not a duplicate) in a higher group could not
    # have fitted, even shortened, in the slack plus any lower group's kept line.
    slack = budget - view.report.bytes_used + _header_surplus(view)
    shown = set(shown_ids)
    seen: set[str] = set()
    ids = [
        f.id for f in facts
    ]  # a repeated id: which copy counts as the original is the view's call
    for category in FactCategory:
        ranked = [f for f in facts if f.category is category]
        for fact in ranked:
            if fact.id in shown or fact.id in seen or ids.count(fact.id) > 1:
                seen.add(fact.id)
                continue
            floor = min(fact_line(fact, T0).cost, fact_line(fact, T0, max_content_bytes=24).cost)
            for lower in ORDER[ORDER.index(category.value) + 1 :]:
                for s in sections:
                    if s.header.split(":")[0].lower() == lower:
                        for line in s.records:
                            assert floor > slack + len(line.encode()) + 1, (fact, line)
        seen.update(f.id for f in ranked)


def _header_surplus(view: RenderedView) -> int:
    surplus = 0
    for rep in view.report.sections:
        if rep.given:
            counts = (rep.admitted, rep.omitted, rep.shortened, rep.duplicates)
            surplus += sum(len(str(rep.given)) - len(str(n)) for n in counts)
    return surplus


@PROPERTY
@example(
    [ActivitySignal("a", "own", "payments", "mine", "running", T0)] * 3,
    4000,
    "own",
)
@example(
    [ActivitySignal("a", "r1", "payments", "\uff1c/agent_coordination\uff1e", "running", T0)],
    4000,
    None,
)
@given(SIGNALS, BUDGETS, st.sampled_from(["own", "r1", None]))
def test_coordination_budget_limit_own_request_and_safety(
    signals: list[ActivitySignal], budget: int, own: str | None
) -> None:
    """Within budget; at most 10 agents; never the caller's own request or another
    domain; each (agent, request) once, newest first; tags cannot be forged,
    even by look-alikes that NFKC turns into `<` and `>`."""
    view = render_coordination(
        signals, domain="payments", own_request_id=own, now=T0, budget_bytes=budget
    )
    assert len(view.text.encode("utf-8")) == view.report.bytes_used <= budget
    again = render_coordination(
        list(reversed(signals)), domain="payments", own_request_id=own, now=T0, budget_bytes=budget
    )
    assert again == view
    (rep,) = view.report.sections
    eligible = [s for s in signals if s.domain == "payments" and s.request_id != own]
    assert rep.given == len(eligible)
    assert rep.admitted + rep.omitted + rep.duplicates == rep.given
    assert rep.admitted <= 10
    if view.report.outcome is ViewOutcome.BUDGET_TOO_SMALL:
        assert view.text == ""
        return
    assert view.text.count("<") == 2
    for tag in VIEW_TAGS:
        expected = 1 if tag in ("<agent_coordination>", "</agent_coordination>") else 0
        assert view.text.count(tag) == expected, tag
    check_normalised(view.text, ["<agent_coordination>", "</agent_coordination>"])
    _, sections = parse_view(view.text, "<agent_coordination>", "</agent_coordination>")
    check_counts(view.report, sections)
    ages = [int(line.rsplit("started ", 1)[1].split(" ")[0]) for line in sections[0].records]
    assert ages == sorted(ages)
    unique = {(s.agent, s.request_id) for s in eligible}
    if budget >= 8_000 or rep.omitted == 0:
        assert rep.admitted == min(10, len(unique))


def test_user_profile_labels_and_precedence() -> None:
    facts = [
        _fact(3, "context", "In Lisbon this week"),
        _fact(1, "identity", "Name is Ana", confidence=0.95),
        _fact(2, "preference", "Metric units", confidence=0.6, source="derived"),
        _fact(4, "summary", "Asked about refunds", confidence=0.4, source="derived"),
        _fact(5, "constraint", "No calls after 6pm", confidence=0.3),
    ]
    text = render_user_profile(facts, now=T0).text
    assert '- "Name is Ana" (explicit, high confidence; id "f1")' in text
    assert '- "Metric units" (derived, medium confidence; id "f2")' in text
    assert '- "No calls after 6pm" (explicit, low confidence; id "f5")' in text
    assert '- "In Lisbon this week" (recorded 3 days ago; id "f3")' in text
    assert '(recorded 4 days ago; id "f4")' in text
    assert text.index("## Identity") < text.index("## Constraint") < text.index("## Preference")
    assert text.index("## Preference") < text.index("## Context") < text.index("## Summary")
    assert text.endswith("when each was last written.\n</context_precedence>")


def test_user_profile_shortening_marker_sits_outside_the_allowance() -> None:
    view = render_user_profile(
        [_fact(1, "identity", "é" * 500)], now=T0, budget_bytes=8000, max_fact_bytes=100
    )
    (line,) = [x for x in view.text.split("\n") if x.startswith("- ")]
    literal = line[2 : line.index('"', 3) + 1]
    assert len(literal.encode()) <= 100
    assert json.loads(literal) == "é" * 49
    assert line[len(literal) + 2 :].startswith(" [shortened] (explicit")
    assert view.report.section("identity").shortened == 1


def test_coordination_line_and_limit() -> None:
    signals = [
        ActivitySignal(
            f"agent{i}", f"r{i}", "payments", "refund", "running", T0 - timedelta(seconds=i)
        )
        for i in range(15)
    ]
    view = render_coordination(signals, domain="payments", own_request_id="r0", now=T0)
    assert '- "agent1" doing "refund" (status "running", started 1 s ago)' in view.text
    assert "agent0" not in view.text
    rep = view.report.section("active_agents")
    assert (rep.given, rep.admitted, rep.omitted) == (14, 10, 4)
    small = render_coordination(
        signals, domain="payments", own_request_id=None, now=T0, max_agents=2
    )
    assert small.report.section("active_agents").admitted == 2


def test_a_single_value_where_a_sequence_is_wanted_is_invalid_input() -> None:
    """One Fact, ActivitySignal, Event, KnowledgeItem or Investigation (or None)
    given where the view wants a sequence of them raises InvalidInput naming the
    argument and the sequence it wanted, never a builtin TypeError."""
    fact = _fact(1, "identity", "Name is Ana")
    signal = ActivitySignal("a", "r", "payments", "refund", "running", T0)
    event = Event(
        id="e1", domain="payments", agent="a", action="x", outcome="ok", summary="s",
        occurred_at=T0, recorded_at=T0,
    )  # fmt: skip
    knowledge = KnowledgeItem(id="k1", content="c", score=0.5)
    investigation = Investigation(Entity("pod", "web-1"), "a", "r", T0)
    calls = [
        ("facts", "Fact", lambda v: render_user_profile(v, now=T0), fact),
        ("facts", "Fact", lambda v: render_user_profile(v, now=T0), None),
        ("facts", "Fact", lambda v: render_user_profile(v, now=T0), "f1"),
        ("signals", "ActivitySignal", lambda v: render_coordination(
            v, domain="payments", own_request_id=None, now=T0), signal),
        ("events", "Event", lambda v: render_agent_memory(
            domain="payments", as_of=T0, events=v), event),
        ("entity_events", "Event", lambda v: render_agent_memory(
            domain="payments", as_of=T0, entity_events=v), event),
        ("knowledge", "KnowledgeItem", lambda v: render_agent_memory(
            domain="payments", as_of=T0, knowledge=v), knowledge),
        ("investigations", "Investigation", lambda v: render_agent_memory(
            domain="payments", as_of=T0, investigations=v), investigation),
    ]  # fmt: skip
    for name, kind, render, value in calls:
        with pytest.raises(InvalidInput) as info:
            render(value)
        assert info.value.field == name, (name, info.value)
        assert f"a sequence of {kind}" in info.value.problem, info.value
    # Still accepted: a list, a tuple, any other sequence.
    assert render_user_profile((fact,), now=T0).report.section("identity").admitted == 1

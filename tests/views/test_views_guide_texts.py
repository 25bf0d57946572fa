"""The fixed texts the views show, as the design guide asks for them.

Each test names what the model must be told; each failed on the texts the views
had before (no conversation history in the precedence rule, no coverage line,
a bare `knowledge` title, a legend without its schema).
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

from agent_memory.contract_tests.view_strategies import VIEW_BASE_TIME
from agent_memory.domain.records import Event
from agent_memory.domain.views import (
    CONTEXT_PRECEDENCE,
    FORMAT_VERSION,
    EventFormat,
    Fact,
    KnowledgeItem,
    render_agent_memory,
    render_user_profile,
)
from agent_memory.domain.views.agent_memory_view import (
    DESIGN_EVENT_LEGEND,
    DESIGN_EVENT_SCHEMA,
    DIGEST_COVERAGE,
    EVENT_LEGEND,
    EVENT_SCHEMA,
    KNOWLEDGE_HEADING,
)

T0 = VIEW_BASE_TIME


def _event(i: int) -> Event:
    return Event(
        id=f"e{i}",
        domain="payments",
        agent="deployer",
        action="deploy",
        outcome="ok",
        summary=f"deployed build {i}",
        occurred_at=T0 - timedelta(minutes=i),
        recorded_at=T0,
    )


def _precedence_rule() -> str:
    fact = Fact("f1", "context", "In Lisbon this week", 0.7, "explicit", T0, T0)
    text = render_user_profile([fact], now=T0 + timedelta(days=2)).text
    start = text.index("<context_precedence>\n") + len("<context_precedence>\n")
    return text[start : text.index("\n</context_precedence>")]


def test_context_precedence_puts_the_request_then_the_latest_history_turn_first() -> None:
    rule = _precedence_rule()
    assert rule == "\n".join(CONTEXT_PRECEDENCE[1:-1])
    # The order of trust: the current request, then the latest conversation turn.
    assert "current user_request comes first" in rule
    assert rule.index("current user_request") < rule.index("latest conversation_history turn")
    # Any subject, including named entities, not only stored "Context" facts.
    assert "any subject" in rule
    assert "named thing" in rule
    # Stored context is a possibly stale hint; its recency label says how old.
    assert "Context and Summary entries are hints that may be out of date" in rule
    assert '("recorded ... ago")' in rule
    # No view tag inside the rule (it names the blocks, it does not open them).
    assert "<" not in rule
    assert ">" not in rule


def test_the_digest_carries_its_coverage_line() -> None:
    view = render_agent_memory(domain="payments", as_of=T0, digest="quiet morning")
    lines = view.text.split("\n")
    header = next(i for i, line in enumerate(lines) if line.startswith("## domain_digest:"))
    assert lines[header + 1] == DIGEST_COVERAGE
    assert lines[header + 2] == '{"digest":"quiet morning"}'
    assert "bounded window of events returned" in DIGEST_COVERAGE
    assert "older history may be missing" in DIGEST_COVERAGE
    # No digest, no coverage line.
    empty = render_agent_memory(domain="payments", as_of=T0, events=[_event(1)])
    assert "coverage:" not in empty.text


def test_knowledge_comes_under_the_guides_heading() -> None:
    view = render_agent_memory(
        domain="payments", as_of=T0, knowledge=[KnowledgeItem("k1", "restart once", 0.8)]
    )
    assert KNOWLEDGE_HEADING == "Prior knowledge relevant to this request"
    assert (
        "\n## Prior knowledge relevant to this request: admitted=1 omitted=0 shortened=0 "
        'duplicates=0\n{"id":"k1","score":0.800,"content":"restart once"}\n' in view.text
    )
    assert view.report.section("knowledge").admitted == 1


def test_the_event_legend_names_a_schema_of_its_own_layout() -> None:
    """The guide's id names its 6-position tuple; ours has 9 positions, so it
    carries our own id, and a reader zipping the legend with a tuple gets
    every field right."""
    assert EVENT_SCHEMA == "agent-memory/event-record/v1"
    assert EVENT_SCHEMA != DESIGN_EVENT_SCHEMA == "event-detail/v2-record-facts"
    assert DESIGN_EVENT_LEGEND == "[event_id, origin_request_id, timestamp, agent, action, outcome]"
    events = [_event(i) for i in range(30)]
    many = render_agent_memory(domain="payments", as_of=T0, events=events)
    assert many.report.event_format is EventFormat.TUPLE
    lines = many.text.split("\n")
    legend = next(line for line in lines if line.startswith("event_format:"))
    found = re.fullmatch(r"event_format: tuple; legend \((\S+)\) \[([^\]]+)\]; .*", legend)
    assert found, legend
    assert found.group(1) == EVENT_SCHEMA
    names = found.group(2).split(", ")
    assert f"[{found.group(2)}]" == EVENT_LEGEND
    assert len(names) == 9
    by_id = {e.id: e for e in events}
    tuples = [json.loads(line) for line in lines if line.startswith('["e')]
    assert tuples
    for row in tuples:
        assert 6 < len(row) <= len(names)  # trailing absent fields are left out
        record = dict(zip(names[: len(row)], row, strict=True))
        event = by_id[record["event_id"]]
        assert (record["agent"], record["action"], record["outcome"]) == (
            "deployer",
            "deploy",
            "ok",
        )
        assert record["summary"] == event.summary
        assert record["origin_request_id"] == "unknown"
    one = render_agent_memory(domain="payments", as_of=T0, events=[_event(1)])
    assert f"\nevent_format: named ({EVENT_SCHEMA})\n" in one.text
    assert DESIGN_EVENT_SCHEMA not in many.text + one.text
    assert FORMAT_VERSION == 3

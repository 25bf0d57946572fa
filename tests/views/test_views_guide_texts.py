"""The fixed texts the views show, as the design guide asks for them.

Each test names what the model must be told; each failed on the texts the views
had before (no conversation history in the precedence rule, no coverage line,
a bare `knowledge` title, a legend without its schema).
"""

from __future__ import annotations

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
    DIGEST_COVERAGE,
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


def test_the_event_legend_names_its_schema_version() -> None:
    assert EVENT_SCHEMA == "event-detail/v2-record-facts"
    many = render_agent_memory(domain="payments", as_of=T0, events=[_event(i) for i in range(30)])
    assert many.report.event_format is EventFormat.TUPLE
    legend = next(line for line in many.text.split("\n") if line.startswith("event_format:"))
    assert legend.startswith("event_format: tuple; legend (event-detail/v2-record-facts) [")
    one = render_agent_memory(domain="payments", as_of=T0, events=[_event(1)])
    assert "\nevent_format: named (event-detail/v2-record-facts)\n" in one.text
    assert FORMAT_VERSION == 2

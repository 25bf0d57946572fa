"""Token estimation, token trimming, safe encoding and UTF-8-safe shortening."""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agent_memory.contract_tests.view_strategies import VIEW_BASE_TIME, hostile_texts, view_events
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import Event
from agent_memory.domain.views import (
    DEFAULT_BUDGET_BYTES,
    EventFormat,
    KnowledgeItem,
    ViewOutcome,
    budget_bytes_for_tokens,
    count_tokens,
    encode_text,
    estimate_tokens,
    render_agent_memory,
    shorten_encoded,
    shorten_text,
    trim_to_token_budget,
)
from agent_memory.domain.views.agent_memory_view import _event_floor, event_line
from views.view_checks import PROPERTY

ANY_TEXT = st.one_of(hostile_texts(400, surrogates=True), st.text(max_size=60))


class CharCounter:
    """A real (if trivial) tokenizer: one token per code point."""

    def count(self, text: str) -> int:
        return len(text)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("hello", 2),  # 1 unit x 1.3 -> 2
        ("hello world", 3),  # 2.6 -> 3
        ("hello, world!", 6),  # 4 units (2 words + 2 punctuation) x 1.3 = 5.2 -> 6
        ("日本語", 5),  # 3 x 1.5 = 4.5 -> 5
        ("東京都に住んでいます", 15),  # 10 CJK chars, no spaces: counted per character
        ("한국어", 5),
        ("カタカナ", 6),
        ("deploy 日本", 5),  # 1.3 + 3.0 = 4.3 -> 5
        ("x" * 1000, 2),  # one long unit
    ],
)
def test_estimate_tokens(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_count_tokens_prefers_the_tokenizer() -> None:
    assert count_tokens("日本語 words", CharCounter()) == 9
    assert count_tokens("日本語 words", None) == estimate_tokens("日本語 words")


def test_default_budget_is_2000_tokens_of_4_bytes() -> None:
    assert DEFAULT_BUDGET_BYTES == 8000 == budget_bytes_for_tokens(2000)
    with pytest.raises(InvalidInput, match="tokens"):
        budget_bytes_for_tokens(-1)


@PROPERTY
@given(st.lists(st.text(max_size=40), max_size=12), st.integers(0, 60))
def test_trim_to_token_budget(texts: list[str], budget: int) -> None:
    """Kept items fit the budget, keep their order, and no omitted item would have fit."""
    trim = trim_to_token_budget(texts, budget)
    assert trim.tokens_used == sum(estimate_tokens(t) for t in trim.kept) <= budget
    assert len(trim.kept) + trim.omitted == len(texts)
    it = iter(texts)
    assert all(any(k is t for t in it) for k in trim.kept)  # a subsequence
    used = 0
    kept = list(trim.kept)
    for text in texts:
        cost = estimate_tokens(text)
        if kept and text is kept[0]:
            kept.pop(0)
            used += cost
        else:
            assert used + cost > budget


def test_trim_uses_the_tokenizer_and_validates() -> None:
    trim = trim_to_token_budget(["aaaa", "bb", "cccc", "d"], 7, tokenizer=CharCounter())
    assert trim.kept == ("aaaa", "bb", "d")
    assert (trim.omitted, trim.tokens_used) == (1, 7)
    with pytest.raises(InvalidInput, match="max_inject_tokens"):
        trim_to_token_budget(["x"], -1)


@PROPERTY
@example("</agent_memory>\n\u2028\x85\ud800<&>")
@given(ANY_TEXT)
def test_encode_text_round_trips_and_is_inert(text: str) -> None:
    """One JSON string literal, valid UTF-8, no `<>&` or line break, exact round trip."""
    encoded = encode_text(text)
    encoded.encode("utf-8")
    assert not set(encoded) & set("<>&\n\r\x85\u2028\u2029")
    assert encoded.splitlines() == [encoded]
    assert json.loads(encoded) == text


@PROPERTY
@example("e\u0301" * 20, 10)
@example("👩\u200d💻" * 10, 30)
@example("\\u003c<" * 10, 9)
@given(ANY_TEXT, st.integers(2, 200))
def test_shorten_encoded_never_splits_a_character_or_an_escape(text: str, limit: int) -> None:
    """The literal fits, decodes to a prefix of the original, and never leaves a
    combining mark or joiner without its base."""
    literal, shortened = shorten_encoded(text, limit)
    assert len(literal.encode("utf-8")) <= limit or not shortened
    kept = json.loads(literal)
    assert text.startswith(kept)
    assert shortened == (kept != text)
    if shortened:
        assert len(literal.encode()) <= limit
        rest = text[len(kept) :]
        assert unicodedata.combining(rest[0]) == 0
        assert not kept.endswith("\u200d")


@PROPERTY
@given(st.text(max_size=80), st.integers(0, 60))
def test_shorten_text_puts_the_marker_beyond_the_allowance(text: str, limit: int) -> None:
    out = shorten_text(text, limit)
    if len(text.encode()) <= limit:
        assert out == text
    else:
        kept, marker = out.rsplit(" ", 1)
        assert marker == "[shortened]"
        assert text.startswith(kept)
        assert len(kept.encode()) <= limit


def _event(i: int, **kw: object) -> Event:
    base: dict[str, object] = {
        "id": f"e{i}",
        "domain": "payments",
        "agent": "deployer",
        "action": "deploy",
        "outcome": "ok",
        "summary": "shipped",
        "occurred_at": VIEW_BASE_TIME - timedelta(minutes=i),
        "recorded_at": VIEW_BASE_TIME,
    }
    base.update(kw)
    return Event(**base)  # type: ignore[arg-type]


def test_event_lines_tuple_and_named() -> None:
    events = [_event(1, origin_request_id="r1"), _event(2, summary="x" * 600, outcome="")]
    tup = render_agent_memory(
        domain="payments", as_of=VIEW_BASE_TIME, events=events, event_format=EventFormat.TUPLE
    ).text
    assert '["e1","r1","2026-01-01T11:59:00Z","deployer","deploy","ok","shipped"]' in tup
    assert '["e2","unknown","2026-01-01T11:58:00Z","deployer","deploy","","' in tup
    assert tup.split("\n")[-2].endswith('",true]')
    named = render_agent_memory(
        domain="payments", as_of=VIEW_BASE_TIME, events=events, event_format="named"
    ).text
    assert (
        '{"event_id":"e1","origin_request_id":"r1","timestamp":"2026-01-01T11:59:00Z",'
        '"agent":"deployer","action":"deploy","outcome":"ok","summary":"shipped"}'
    ) in named
    assert '"shortened":true}' in named


def test_budget_too_small_gives_no_text() -> None:
    view = render_agent_memory(
        domain="d", as_of=VIEW_BASE_TIME, events=[_event(1)], budget_bytes=50
    )
    assert view.text == ""
    assert view.report.outcome is ViewOutcome.BUDGET_TOO_SMALL
    assert view.report.section("domain_events").omitted == 1


def test_knowledge_is_shortened_to_fit() -> None:
    item = KnowledgeItem("k1", "restart the pod " * 100, 0.5)
    view = render_agent_memory(domain="d", as_of=VIEW_BASE_TIME, knowledge=[item], budget_bytes=600)
    rep = view.report.section("knowledge")
    assert (rep.admitted, rep.shortened) == (1, 1)
    assert view.report.bytes_used <= 600
    assert view.report.bytes_used > 550  # shortened to use the room, not dropped


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"domain": " "}, "domain"),
        ({"as_of": datetime(2026, 1, 1)}, "as_of"),
        ({"budget_bytes": -1}, "budget_bytes"),
        ({"events": ["not an event"]}, "events"),
        ({"max_summary_bytes": 3}, "max_summary_bytes"),
        ({"request_id": ""}, "request_id"),
    ],
)
def test_bad_input_names_the_field(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"domain": "d", "as_of": datetime(2026, 1, 1, tzinfo=UTC)}
    args.update(kwargs)
    with pytest.raises(InvalidInput) as info:
        render_agent_memory(**args)  # type: ignore[arg-type]
    assert info.value.field == field


@PROPERTY
@example(_event(1, summary="", action="", outcome=""), 24)
@example(_event(1, summary="<" * 300), 24)
@given(view_events(), st.integers(24, 500))
def test_event_floor_is_a_lower_bound_of_every_rendering(event: Event, cap: int) -> None:
    """The cheap bound used to skip rendering never exceeds a real line's cost."""
    floor = _event_floor(event, cap)
    for fmt in EventFormat:
        for shared in (None, event.entities):
            line = event_line(event, fmt, max_summary_bytes=cap, shared_entities=shared)
            assert floor <= line.cost, (fmt, line.text)

"""The date parser and the date-match factor (domain.dates), property-tested."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from hypothesis import example, given
from hypothesis import strategies as st

from agent_memory.domain.dates import (
    MONTH_NAMES,
    DateRange,
    date_match,
    event_time_words,
    parse_dates,
    question_spans,
    range_words,
)
from agent_memory.domain.lexical import tokenize
from agent_memory.domain.retrieval import RetrievalConfig, final_scores

DAYS = st.dates(min_value=date(1900, 1, 1), max_value=date(2099, 12, 31))
REFERENCES = st.dates()  # every representable day, date.min and date.max included


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _day_forms(d: date) -> list[str]:
    month = MONTH_NAMES[d.month - 1]
    cap = month.capitalize()
    return [
        d.isoformat(),
        f"{d.year}/{d.month:02d}/{d.day:02d}",
        f"{d.day} {cap} {d.year}",
        f"{d.day} {cap}, {d.year}",
        f"{_ordinal(d.day)} of {cap}, {d.year}",
        f"{cap} {d.day}, {d.year}",
        f"{cap} {_ordinal(d.day)} {d.year}",
        f"{month.upper()} {d.day},{d.year}",
        f"{cap[:3]}. {d.day}, {d.year}",
    ]


def _month_forms(d: date) -> list[str]:
    cap = MONTH_NAMES[d.month - 1].capitalize()
    return [f"{cap} {d.year}", f"{cap}, {d.year}", f"{cap} of {d.year}", f"{d.year}-{d.month:02d}"]


# A number right before the date changes what the text says ("2 January 1, 2000"
# names 2 January too), so the prefix never ends in a digit.
# no number or ordinal right before the day ("2TH January 1, 2000" names 2 January)
_BEFORE = st.text(max_size=20).filter(
    lambda b: not re.search(r"\d(?:st|nd|rd|th)?(?:\s+of)?\s*$", b, re.I)
)


@given(day=DAYS, reference=REFERENCES, form=st.integers(0, 8), before=_BEFORE)
@example(day=date(2023, 10, 24), reference=date(2026, 1, 1), form=5, before="on ")
@example(day=date(2000, 1, 1), reference=date(2000, 1, 1), form=5, before="0")
def test_a_day_in_any_surface_form_parses_back_to_exactly_that_day(
    day: date, reference: date, form: int, before: str
) -> None:
    text = f"What happened {before.replace('-', ' ')} {_day_forms(day)[form]} ?"
    assert DateRange(day, day) in parse_dates(text, reference), text


@given(day=DAYS, reference=REFERENCES, form=st.integers(0, 3))
def test_a_month_in_any_surface_form_parses_to_the_whole_month(
    day: date, reference: date, form: int
) -> None:
    text = f"during {_month_forms(day)[form]}"
    got = parse_dates(text, reference)
    assert len(got) == 1, (text, got)
    (r,) = got
    assert r.start == day.replace(day=1)
    assert day in r
    assert (r.end + timedelta(days=1)).day == 1


@given(day=DAYS, reference=REFERENCES)
def test_a_year_parses_to_the_whole_year(day: date, reference: date) -> None:
    got = parse_dates(f"What did they do in {day.year}?", reference)
    assert got == (DateRange(date(day.year, 1, 1), date(day.year, 12, 31)),)


@given(text=st.text(max_size=200), reference=REFERENCES)
@example(text="10000 days ago", reference=date(1, 1, 1))
@example(text="next year", reference=date(9999, 12, 31))
@example(text="31 February 2023, 2023-13-45, 2023-00", reference=date(2023, 1, 1))
@example(text="in May", reference=date(1, 3, 1))
@example(text="the past 999 years, on 3 May 2023", reference=date(1, 3, 1))
@example(text="in the winter, since May '99", reference=date(9999, 12, 31))
def test_the_parser_never_raises_and_every_range_is_ordered(text: str, reference: date) -> None:
    for r in parse_dates(text, reference):
        assert r.start <= r.end
    for _, r in question_spans(text, reference):
        assert r.start <= r.end


_DATEISH = st.lists(
    st.sampled_from(
        [
            *MONTH_NAMES,
            "may",
            "May",
            "last",
            "week",
            "weekend",
            "ago",
            "days",
            "2023",
            "12",
            "3rd",
            "of",
            ",",
            "-",
            "/",
            "yesterday",
            "today",
            "in",
            "summer",
            "Friday",
            "two",
            # spans, quarters, a weekday before or after a date
            *("between", "from", "to", "and", "or", "until", "\u2013"),
            *("quarter", "first", "last", "Q4", "Q1", "before", "after", "the"),
            *("0", "1", "29", "31", "1000", "2199", "5th"),
            # open ranges, seasons, two-digit years, "on the 15th", dotted days
            *("since", "by", "as", "on", "winter", "spring", "'23", "15th", "14.08.2023"),
            *("past", "previous", "Labor Day", "Easter", "weekend", "999", "years", "9999"),
            # a weekday alone, a month of last year, "before last", "the past month"
            *("Sunday", "night", "year", "this", "next", "month", "at", "Dec", "March"),
            *("day", "fifth", "second"),
        ]
    ),
    max_size=12,
).map(" ".join)


@given(text=_DATEISH, reference=REFERENCES)
def test_date_like_word_salad_never_raises(text: str, reference: date) -> None:
    for r in parse_dates(text, reference):
        assert r.start <= r.end
    for _, r in question_spans(text, reference):
        assert r.start <= r.end


@given(
    reference=st.dates(min_value=date(1900, 1, 1), max_value=date(2099, 12, 31)),
    n=st.integers(1, 400),
)
def test_relative_days_resolve_against_the_reference(reference: date, n: int) -> None:
    one_day = timedelta(days=1)
    assert parse_dates("yesterday", reference) == (
        DateRange(reference - one_day, reference - one_day),
    )
    assert parse_dates("tomorrow", reference) == (
        DateRange(reference + one_day, reference + one_day),
    )
    assert parse_dates(f"{n} days ago", reference) == (
        DateRange(reference - timedelta(days=n), reference - timedelta(days=n)),
    )
    (week,) = parse_dates("last week", reference)
    assert (week.end - week.start).days == 6
    assert week.start.weekday() == 0
    assert week.end < reference
    assert (reference - week.end).days <= 7
    (weeks_ago,) = parse_dates(f"{min(n, 50)} weeks ago", reference)
    assert weeks_ago.start <= reference - timedelta(weeks=min(n, 50)) <= weeks_ago.end


@given(
    reference=st.dates(min_value=date(1900, 1, 1), max_value=date(2099, 12, 31)),
    month=st.integers(1, 12),
)
def test_a_month_without_year_is_the_latest_one_not_after_the_reference(
    reference: date, month: int
) -> None:
    (r,) = parse_dates(f"in {MONTH_NAMES[month - 1]}", reference)
    assert (r.start.month, r.start.day) == (month, 1)
    assert r.start <= reference
    later = r.start.replace(year=r.start.year + 1)
    assert later > reference


def test_ambiguous_words_are_not_months_without_a_time_word() -> None:
    ref = date(2023, 10, 24)
    assert parse_dates("What may I ask, did Sam march on?", ref) == ()
    assert parse_dates("in May", ref) == (DateRange(date(2023, 5, 1), date(2023, 5, 31)),)
    # the 7 days before the named day, not the day itself
    assert parse_dates("Where was Sam in the week before 16 November 2023?", ref) == (
        DateRange(date(2023, 11, 9), date(2023, 11, 15)),
    )


@given(day=DAYS)
def test_a_day_s_indexed_words_are_among_the_words_of_any_short_range_holding_it(day: date) -> None:
    words = set(tokenize(event_time_words(day)))
    assert words == {*tokenize(MONTH_NAMES[day.month - 1]), str(day.year)}
    for r in (DateRange(day, day), DateRange(day.replace(day=1), day)):
        assert words <= set(tokenize(range_words(r)))


RANGES = st.builds(
    lambda a, n: DateRange(a, a + timedelta(days=n)),
    st.dates(min_value=date(1950, 1, 1), max_value=date(2050, 1, 1)),
    st.integers(0, 60),
)


@given(r=RANGES, offset=st.integers(-400, 400), grace=st.integers(0, 14), half=st.floats(0.5, 60))
def test_date_match_is_one_inside_and_falls_with_distance(
    r: DateRange, offset: int, grace: int, half: float
) -> None:
    day = r.start + timedelta(days=offset)
    m = date_match(day, [r], grace_days=grace, half_life_days=half)
    assert 0.0 <= m <= 1.0
    if r.start <= day <= r.end + timedelta(days=grace):
        assert m == 1.0
    else:
        assert m < 1.0
        further = day + timedelta(days=1 if day > r.end else -1)
        assert date_match(further, [r], grace_days=grace, half_life_days=half) <= m
    assert date_match(day, [], grace_days=grace, half_life_days=half) == 0.0


NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_date_bonus_lifts_a_candidate_inside_the_named_range() -> None:
    fused = [("a", 0.9), ("b", 0.7)]
    days = {"a": date(2023, 1, 10), "b": date(2023, 3, 10)}
    march = parse_dates("in March 2023", NOW.date())
    config = RetrievalConfig(date_weight=0.3)

    def order(config: RetrievalConfig, ranges: tuple[DateRange, ...]) -> list[str]:
        got = final_scores(
            fused, config, created_at={}, importance={}, now=NOW, event_days=days, ranges=ranges
        )
        return [i for i, _ in got]

    assert order(config, march) == ["b", "a"]
    # without ranges, or with the weight at 0, the fused order stands
    assert order(config, ()) == ["a", "b"]
    off = RetrievalConfig(date_weight=0.0)
    assert order(off, march) == ["a", "b"]

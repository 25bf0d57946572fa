"""Dated questions on synthetic conversations: "as of <month year>", an exact
day, a month, and relative forms ("the week before", "last summer", "the first
weekend of October"), from the parser through `HybridRetriever`."""

from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.domain.dates import (
    MONTH_NAMES,
    DateRange,
    date_match,
    date_spans,
    parse_dates,
    question_spans,
)
from agent_memory.ports.storage import MemoryStore
from agent_memory.services.retrieval import ConversationTurn, HybridRetriever

EMBEDDER = HashingEmbedder(64)
MONTHS = st.tuples(st.integers(2000, 2090), st.integers(1, 12))
SUMMER = (6, 8)


def _month(year: int, month: int) -> DateRange:
    return DateRange(date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1]))


def _name(month: int) -> str:
    return MONTH_NAMES[month - 1].capitalize()


async def _ranked(
    store: MemoryStore, days: list[date], question: str, asked: date | None = None
) -> list[date]:
    """The days of the turns retrieval ranks, best first: one identical turn per
    day, each its own session, so only the dates tell them apart; asked on
    `asked` (default: 30 days after the last turn)."""
    turns = [
        ConversationTurn(
            id=f"t{i:03d}",
            speaker="Sam",
            text="I drive a red pickup truck these days.",
            at=datetime(d.year, d.month, d.day, 12, tzinfo=UTC),
            session=str(i),
        )
        for i, d in enumerate(days)
    ]
    retriever = HybridRetriever(store, EMBEDDER)
    await retriever.add_conversation("sam", turns)
    asked = asked or max(days) + timedelta(days=30)
    got = await retriever.retrieve("sam", question, limit=len(days), reference=asked)
    by_id = {t.id: t.at.date() for t in turns}
    return [by_id[h.record.id] for h in got.hits]


# --- as of <month year>: the state at that time ---------------------------------


def test_as_of_marks_the_range_as_a_state_at_that_time() -> None:
    (r,) = parse_dates("What did Sam drive as of October 2023?", date(2024, 3, 1))
    assert r == DateRange(date(2023, 10, 1), date(2023, 10, 31), as_of=True)
    # without "as of" the month is a time things happened in
    (plain,) = parse_dates("What did Sam drive in October 2023?", date(2024, 3, 1))
    assert not plain.as_of


def _scored_around(
    text: str, offsets: list[int], *, end: bool
) -> tuple[DateRange, list[date], dict[date, float]]:
    """The one range `text` names, the days `offsets` away from its end (`end`)
    or start, and each day's `date_match` against it."""
    (r,) = parse_dates(text, date(2099, 1, 1))
    pivot = r.end if end else r.start
    days = sorted({pivot + timedelta(days=o) for o in offsets})
    return r, days, {d: date_match(d, [r], grace_days=7, half_life_days=7) for d in days}


@given(month=MONTHS, offsets=st.lists(st.integers(-200, 200), min_size=2, max_size=30))
def test_as_of_favours_the_latest_day_up_to_the_end_and_nothing_after(
    month: tuple[int, int], offsets: list[int]
) -> None:
    r, days, score = _scored_around(f"as of {_name(month[1])} {month[0]}", offsets, end=True)
    for d in days:
        assert (score[d] == 0.0) == (d > r.end)
        assert score[d] >= 0.5 or d > r.end
    upto = [d for d in days if d <= r.end]
    assert [score[d] for d in upto] == sorted(score[d] for d in upto)  # later, better


@settings(max_examples=25, deadline=None)
@given(
    month=MONTHS,
    offsets=st.lists(st.integers(-90, 90), min_size=2, max_size=8, unique=True),
)
@example(month=(2023, 10), offsets=[-40, -3, 5, 20])  # a turn in the month and after it
@example(month=(2023, 10), offsets=[-60, 1, 2])  # the latest state told months before
@example(month=(2000, 1), offsets=[1, -31])  # "2000" in the query matched February 2000
async def test_as_of_ranks_the_latest_turn_before_the_month_s_end_above_later_ones(
    month: tuple[int, int], offsets: list[int]
) -> None:
    end = _month(*month).end
    days = [end + timedelta(days=o) for o in offsets]
    question = f"What does Sam drive as of {_name(month[1])} {month[0]}?"
    ranked = await _ranked(InMemoryMemoryStore(EMBEDDER.space), days, question)
    before = [d for d in ranked if d <= end]
    after = [d for d in ranked if d > end]
    assert ranked == before + after, ranked
    assert before == sorted(before, reverse=True), ranked  # the latest first


async def test_as_of_on_each_local_backend(store: MemoryStore) -> None:
    days = [date(2023, 8, 2), date(2023, 10, 12), date(2023, 11, 20), date(2024, 1, 5)]
    ranked = await _ranked(store, days, "What does Sam drive as of October 2023?")
    assert ranked[:2] == [date(2023, 10, 12), date(2023, 8, 2)]


# --- open on one side: by, before, since, after --------------------------------


@given(month=MONTHS, reference=st.dates(date(1990, 1, 1), date(2099, 12, 31)))
def test_by_before_since_and_after_a_date_open_its_range(
    month: tuple[int, int], reference: date
) -> None:
    """Before, each read as the month itself: "since March 2023" favoured March
    alone, "before May 2023" favoured May, what the question excludes."""
    m = _month(*month)
    name = f"{_name(month[1])} {month[0]}"
    (by,) = parse_dates(f"What did Sam drive by {name}?", reference)
    assert by == DateRange(m.start, m.end, as_of=True)
    (before,) = parse_dates(f"What did Sam drive before {name}?", reference)
    day_before = m.start - timedelta(days=1)
    assert before == DateRange(day_before, day_before, as_of=True)
    (since,) = parse_dates(f"What has Sam driven since {name}?", reference)
    assert since == DateRange(m.start, max(m.start, reference), since=True)
    (after,) = parse_dates(f"What did Sam drive after {name}?", reference)
    first = m.end + timedelta(days=1)
    assert after == DateRange(first, max(first, reference), since=True)
    # a modifier between them is applied first: since the week before the 1st
    (week,) = parse_dates(f"since the week before 1 {name}", reference)
    assert week.since
    assert week.start == m.start - timedelta(days=7)


def test_until_still_ends_a_span_and_a_range_is_never_both_open_ways() -> None:
    ref = date(2024, 1, 1)
    assert parse_dates("from May 1 until May 9, 2023", ref) == (
        DateRange(date(2023, 5, 1), date(2023, 5, 9)),
    )
    with pytest.raises(ValueError, match="either"):
        DateRange(date(2023, 5, 1), date(2023, 5, 9), as_of=True, since=True)


@given(month=MONTHS, offsets=st.lists(st.integers(-200, 200), min_size=2, max_size=30))
def test_since_favours_the_soonest_day_from_the_start_and_nothing_before(
    month: tuple[int, int], offsets: list[int]
) -> None:
    r, days, score = _scored_around(f"since {_name(month[1])} {month[0]}", offsets, end=False)
    for d in days:
        assert (score[d] == 0.0) == (d < r.start)
        assert score[d] >= 0.5 or d < r.start
    on = [d for d in days if d >= r.start]
    assert [score[d] for d in on] == sorted((score[d] for d in on), reverse=True)


@settings(max_examples=25, deadline=None)
@given(
    month=MONTHS,
    offsets=st.lists(st.integers(-90, 90), min_size=2, max_size=8, unique=True),
    word=st.sampled_from(["since", "after"]),
)
@example(month=(2023, 3), offsets=[-40, -3, 5, 20], word="since")
@example(month=(2023, 7), offsets=[-2, 1, 45], word="after")
async def test_since_and_after_rank_turns_from_then_on_above_earlier_ones(
    month: tuple[int, int], offsets: list[int], word: str
) -> None:
    m = _month(*month)
    start = m.start if word == "since" else m.end + timedelta(days=1)
    days = [start + timedelta(days=o) for o in offsets]
    question = f"What has Sam driven {word} {_name(month[1])} {month[0]}?"
    ranked = await _ranked(InMemoryMemoryStore(EMBEDDER.space), days, question)
    on = [d for d in ranked if d >= start]
    earlier = [d for d in ranked if d < start]
    assert ranked == on + earlier, ranked
    assert on == sorted(on), ranked  # the soonest first


@settings(max_examples=25, deadline=None)
@given(month=MONTHS, offsets=st.lists(st.integers(-90, 90), min_size=2, max_size=8, unique=True))
@example(month=(2023, 5), offsets=[-20, -1, 3, 40])  # turns in May itself come after
async def test_before_a_month_ranks_the_latest_turn_before_it_first(
    month: tuple[int, int], offsets: list[int]
) -> None:
    m = _month(*month)
    days = [m.start + timedelta(days=o) for o in offsets]
    question = f"What did Sam drive before {_name(month[1])} {month[0]}?"
    ranked = await _ranked(InMemoryMemoryStore(EMBEDDER.space), days, question)
    before = [d for d in ranked if d < m.start]
    later = [d for d in ranked if d >= m.start]
    assert ranked == before + later, ranked
    assert before == sorted(before, reverse=True), ranked


# --- relative forms in a question that names its date ---------------------------

_RELATIVE = ["last week", "yesterday", "last Friday", "two days ago", "last weekend"]


@given(
    day=st.dates(date(1990, 1, 1), date(2090, 12, 31)),
    asked=st.dates(date(1990, 1, 1), date(2099, 12, 31)),
    relative=st.sampled_from(_RELATIVE),
)
@example(day=date(2023, 11, 6), asked=date(2024, 1, 15), relative="last week")
def test_a_relative_date_resolves_against_the_date_the_question_names(
    day: date, asked: date, relative: str
) -> None:
    """ "What was Tim's issue last week, as mentioned on November 6, 2023?" asks
    about the week before 6 November, not the week before it is asked; before,
    "last week" resolved against when it was asked."""
    text = (
        f"What did Sam drive {relative}, as mentioned on {_name(day.month)} {day.day}, {day.year}?"
    )
    got = [r for _, r in question_spans(text, asked)]
    assert got == [parse_dates(relative, day)[0], DateRange(day, day)], text
    # the turn's own words keep resolving against when they were said
    assert parse_dates(text, asked)[0] == parse_dates(relative, asked)[0]


@given(asked=st.dates(date(1990, 1, 1), date(2099, 12, 31)), relative=st.sampled_from(_RELATIVE))
def test_without_a_short_absolute_date_relative_ones_resolve_against_the_reference(
    asked: date, relative: str
) -> None:
    for text in (f"What did Sam drive {relative}?", f"What did Sam drive in 2022 and {relative}?"):
        assert question_spans(text, asked) == date_spans(text, asked), text


@given(day=st.dates(date(1901, 1, 1), date(2098, 12, 31)))
def test_the_last_weekend_before_a_day_is_the_weekend_before_it(day: date) -> None:
    """ "What did Maria do last weekend before April 10, 2023?" read as the
    weekend before the reference and as of 9 April."""
    name = f"{_name(day.month)} {day.day}, {day.year}"
    (r,) = parse_dates(f"What did Sam do last weekend before {name}?", date(2099, 1, 1))
    assert r == parse_dates(f"the weekend before {name}", date(2099, 1, 1))[0]
    assert r.start.weekday() == 5
    assert r.end < day


async def test_a_relative_date_anchored_to_the_question_s_date_ranks_its_turn_first() -> None:
    # 6 November 2023 is a Monday: "last week" is 30 October - 5 November; the
    # second turn is in the week before the question is asked
    days = [date(2024, 1, 10), date(2023, 11, 1)]
    question = "What did Sam drive last week, as mentioned on November 6, 2023?"
    store = InMemoryMemoryStore(EMBEDDER.space)
    assert await _ranked(store, days, question, asked=date(2024, 1, 15)) == days[::-1]


# --- an exact day and a month ---------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    day=st.dates(date(2000, 1, 1), date(2090, 12, 31)),
    offsets=st.lists(st.integers(-60, 60).filter(bool), min_size=1, max_size=6, unique=True),
)
@example(day=date(2023, 10, 24), offsets=[-1, 1, 7, -30])
async def test_on_an_exact_day_ranks_that_day_s_turn_first(day: date, offsets: list[int]) -> None:
    days = [day, *(day + timedelta(days=o) for o in offsets)]
    question = f"What did Sam drive on {_name(day.month)} {day.day}, {day.year}?"
    ranked = await _ranked(InMemoryMemoryStore(EMBEDDER.space), days, question)
    assert ranked[0] == day, ranked


@settings(max_examples=25, deadline=None)
@given(
    month=MONTHS,
    inside=st.lists(st.integers(0, 27), min_size=1, max_size=3, unique=True),
    outside=st.lists(st.integers(8, 120), min_size=1, max_size=4, unique=True),
)
@example(month=(2023, 10), inside=[23], outside=[9, 40])
async def test_in_a_month_ranks_its_turns_above_those_well_outside(
    month: tuple[int, int], inside: list[int], outside: list[int]
) -> None:
    r = _month(*month)
    within = [r.start + timedelta(days=i) for i in inside]
    # before the month, or after it past the grace days (told soon after: still in)
    far = [r.start - timedelta(days=o) for o in outside[::2]]
    far += [r.end + timedelta(days=o) for o in outside[1::2]]
    question = f"What did Sam drive in {_name(month[1])} {month[0]}?"
    ranked = await _ranked(InMemoryMemoryStore(EMBEDDER.space), [*within, *far], question)
    assert set(ranked[: len(within)]) == set(within), ranked


# --- relative forms ---------------------------------------------------------------


@given(day=st.dates(date(1901, 1, 1), date(2098, 12, 31)), reference=st.dates())
def test_the_week_before_a_day_is_the_seven_days_before_it(day: date, reference: date) -> None:
    text = f"Where was Tim the week before {day.day} {_name(day.month)} {day.year}?"
    assert parse_dates(text, reference) == (
        DateRange(day - timedelta(days=7), day - timedelta(days=1)),
    )
    after = f"What did Tim do the day after {_name(day.month)} {day.day}, {day.year}?"
    assert parse_dates(after, reference) == (
        DateRange(day + timedelta(days=1), day + timedelta(days=1)),
    )


@given(reference=st.dates(date(1901, 1, 1), date(2098, 12, 31)))
def test_the_week_before_alone_is_the_week_before_the_reference(reference: date) -> None:
    assert parse_dates("What did Tim do the week before?", reference) == (
        DateRange(reference - timedelta(days=7), reference - timedelta(days=1)),
    )


@given(reference=st.dates(date(1901, 1, 1), date(2098, 12, 31)))
@example(reference=date(2023, 7, 15))  # inside a summer: last summer is the year before
@example(reference=date(2023, 9, 1))  # the day after one: that one
def test_last_summer_is_the_latest_summer_over_before_the_reference(reference: date) -> None:
    (r,) = parse_dates("Where did Sam go last summer?", reference)
    assert (r.start.month, r.start.day, r.end.month, r.end.day) == (6, 1, 8, 31)
    assert r.end < reference
    assert not date(r.start.year + 1, 8, 31) < reference  # no later one is over


@given(month=MONTHS, ordinal=st.sampled_from(["first", "second", "third", "last"]))
@example(month=(2023, 10), ordinal="first")  # 1 October 2023 is a Sunday: the 7th and 8th
def test_an_ordinal_weekend_of_a_month_is_a_saturday_and_sunday_in_it(
    month: tuple[int, int], ordinal: str
) -> None:
    text = f"What did Sam do the {ordinal} weekend of {_name(month[1])} {month[0]}?"
    (r,) = parse_dates(text, date(2099, 1, 1))
    m = _month(*month)
    assert r.start.weekday() == 5
    assert r.end == r.start + timedelta(days=1)
    assert r.start in m
    saturdays = [d for d in (m.start + timedelta(days=i) for i in range(31)) if d in m]
    saturdays = [d for d in saturdays if d.weekday() == 5]
    index = {"first": 0, "second": 1, "third": 2, "last": -1}[ordinal]
    assert r.start == saturdays[index]


def test_the_first_weekend_of_october_without_a_year_is_the_latest_october() -> None:
    (r,) = parse_dates("the first weekend of October", date(2024, 3, 1))
    assert r == DateRange(date(2023, 10, 7), date(2023, 10, 8))


@given(month=MONTHS, n=st.integers(1, 4))
def test_the_nth_week_of_a_month_is_its_nth_seven_days(month: tuple[int, int], n: int) -> None:
    word = ["first", "second", "third", "fourth"][n - 1]
    (r,) = parse_dates(f"in the {word} week of {_name(month[1])} {month[0]}", date(2099, 1, 1))
    start = date(month[0], month[1], 7 * (n - 1) + 1)
    assert r == DateRange(start, start + timedelta(days=6))


def test_parts_of_a_month_and_a_span_between_two_days() -> None:
    ref = date(2024, 1, 1)
    assert parse_dates("the beginning of November 2022", ref) == (
        DateRange(date(2022, 11, 1), date(2022, 11, 10)),
    )
    assert parse_dates("late October 2023", ref) == (
        DateRange(date(2023, 10, 21), date(2023, 10, 31)),
    )
    assert parse_dates("between August 11 and August 15 2023", ref) == (
        DateRange(date(2023, 8, 11), date(2023, 8, 15)),
    )
    assert parse_dates("as of the end of October 2023", ref) == (
        DateRange(date(2023, 10, 21), date(2023, 10, 31), as_of=True),
    )


async def test_the_week_before_a_day_ranks_that_week_s_turns_first() -> None:
    days = [date(2023, 11, 2), date(2023, 11, 10), date(2023, 11, 30), date(2023, 12, 20)]
    question = "What did Sam drive the week before 16 November 2023?"
    ranked = await _ranked(InMemoryMemoryStore(EMBEDDER.space), days, question)
    assert ranked[0] == date(2023, 11, 10)


async def test_last_summer_ranks_its_turns_first() -> None:
    days = [date(2022, 7, 4), date(2023, 3, 5), date(2023, 7, 20), date(2023, 10, 1)]
    turns_ranked = await _ranked(
        InMemoryMemoryStore(EMBEDDER.space), days, "What did Sam drive last summer?"
    )
    # asked 30 days after the last turn (31 October 2023): summer 2023
    assert turns_ranked[0] == date(2023, 7, 20)

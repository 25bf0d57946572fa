"""The times a turn's own words name ("last night", "two weekends ago", "last
month"), resolved against when the turn was said, count as its event time: the
parser's forms for them, `mentioned_dates`, the stored attribute's round trip,
`mention_match`, and `HybridRetriever` on synthetic conversations where only
those words tell the turns apart (with the knob off the same turns tie)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import attrs
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.domain.dates import (
    MAX_MENTION_DAYS,
    MONTH_NAMES,
    DateRange,
    format_ranges,
    mention_match,
    mentioned_dates,
    parse_dates,
    parse_ranges,
)
from agent_memory.ports.storage import MemoryStore
from agent_memory.services.retrieval import ConversationTurn, HybridRetriever, default_config

EMBEDDER = HashingEmbedder(64)
DAYS = st.dates(date(1990, 1, 1), date(2090, 12, 31))
RANGES = st.builds(
    lambda start, length: DateRange(start, start + timedelta(days=length)),
    DAYS,
    st.integers(0, 60),
)
_NUMBER_WORDS = ("a", "one", "two", "three", "four", "five", "six")


# --- the forms a turn uses for its own time -------------------------------------


@given(reference=DAYS)
def test_last_night_is_the_day_before_and_this_morning_the_same_day(reference: date) -> None:
    yesterday = reference - timedelta(days=1)
    assert parse_dates("We had dinner last night.", reference) == (DateRange(yesterday, yesterday),)
    for part in ("morning", "afternoon", "evening"):
        assert parse_dates(f"I ran this {part}!", reference) == (DateRange(reference, reference),)


@given(reference=DAYS, n=st.integers(1, 6), words=st.booleans())
def test_n_weekends_ago_is_a_saturday_and_sunday_n_weekends_back(
    reference: date, n: int, words: bool
) -> None:
    count = _NUMBER_WORDS[n] if words else str(n)
    (r,) = parse_dates(f"we went camping {count} weekends ago", reference)
    (last,) = parse_dates("last weekend", reference)
    assert r.start.weekday() == 5
    assert r.end == r.start + timedelta(days=1)
    assert r.start == last.start - timedelta(weeks=n - 1)
    assert r.end < reference


# --- mentioned_dates ------------------------------------------------------------


@given(text=st.text(max_size=200), at=DAYS)
@example(text="We went camping two weekends ago and last year, today too.", at=date(2023, 7, 17))
def test_mentions_are_short_parsed_ranges_other_than_the_day_itself(text: str, at: date) -> None:
    found = mentioned_dates(text, at)
    parsed = {DateRange(r.start, r.end) for r in parse_dates(text, at)}
    for r in found:
        assert r in parsed
        assert not r.as_of
        assert (r.end - r.start).days + 1 <= MAX_MENTION_DAYS
        assert r != DateRange(at, at)
    assert len(set(found)) == len(found)


def test_mentions_of_turns_like_the_conversations_ask_about() -> None:
    def one(text: str, at: date) -> DateRange:
        (r,) = mentioned_dates(text, at)
        return r

    assert one("My mom and I made dinner together last night!", date(2023, 5, 4)) == DateRange(
        date(2023, 5, 3), date(2023, 5, 3)
    )
    assert one("We went to a convention together last month.", date(2023, 4, 18)) == DateRange(
        date(2023, 3, 1), date(2023, 3, 31)
    )
    assert one("I printed it last Friday.", date(2022, 1, 23)) == DateRange(
        date(2022, 1, 21), date(2022, 1, 21)
    )
    assert one("camping with my fam two weekends ago", date(2023, 7, 17)) == DateRange(
        date(2023, 7, 8), date(2023, 7, 9)
    )
    # a year, or the day it was said, is no event time of its own
    assert mentioned_dates("This year was great, and today too.", date(2023, 7, 17)) == ()


@given(ranges=st.lists(RANGES, max_size=5))
def test_the_stored_attribute_reads_back_as_written(ranges: list[DateRange]) -> None:
    assert parse_ranges(format_ranges(ranges)) == tuple(ranges)


@given(junk=st.one_of(st.text(max_size=80), st.integers(), st.none(), st.lists(st.text())))
def test_a_bad_attribute_is_skipped_never_raised(junk: object) -> None:
    assert isinstance(parse_ranges(junk), tuple)


def test_the_readable_intervals_among_junk_are_kept() -> None:
    text = "2023-02-30/2023-03-01 2023-05-01/2023-04-01 x/y 2023-05-01 2023-07-08/2023-07-09"
    assert parse_ranges(text) == (
        DateRange(date(2023, 5, 1), date(2023, 5, 1)),
        DateRange(date(2023, 7, 8), date(2023, 7, 9)),
    )


# --- mention_match --------------------------------------------------------------


@given(mentioned=RANGES, named=RANGES, half=st.floats(0.5, 60))
def test_mention_match_is_a_share_in_zero_one_and_one_when_inside(
    mentioned: DateRange, named: DateRange, half: float
) -> None:
    score = mention_match([mentioned], [named], half_life_days=half)
    assert 0.0 <= score <= 1.0
    days = (mentioned.end - mentioned.start).days + 1
    if days > MAX_MENTION_DAYS:
        assert score == 0.0
    elif named.start <= mentioned.start and mentioned.end <= named.end:
        assert score == 1.0
    else:
        assert score < 1.0
    # a state "as of" a time is no event: it never matches a mention
    as_of = DateRange(named.start, named.end, as_of=True)
    assert mention_match([mentioned], [as_of], half_life_days=half) == 0.0


@given(day=DAYS, gap=st.integers(1, 200), half=st.floats(0.5, 60))
def test_mention_match_falls_with_the_distance(day: date, gap: int, half: float) -> None:
    named = [DateRange(day, day)]
    near = DateRange(day + timedelta(days=gap), day + timedelta(days=gap))
    far = DateRange(day + timedelta(days=gap + 1), day + timedelta(days=gap + 1))
    assert mention_match([near], named, half_life_days=half) >= mention_match(
        [far], named, half_life_days=half
    )
    assert mention_match([near], named, half_life_days=half) < 1.0


# --- through HybridRetriever ----------------------------------------------------


def _name(month: int) -> str:
    return MONTH_NAMES[month - 1].capitalize()


async def _ranked(
    store: MemoryStore,
    said: list[tuple[date, str]],
    question: str,
    *,
    mentioned: bool,
) -> list[int]:
    """The indexes of the turns ranked for `question`, best first: one turn per
    session, said on the given day with the given text, after them unrelated turns
    said a year before (so each ranking's scores are scaled over more than two
    candidates, as in a real conversation)."""
    first = min(d for d, _ in said) - timedelta(days=365)
    filler = [
        (first + timedelta(days=i), text)
        for i, text in enumerate(
            [
                "I have been reading a history book about old ships.",
                "The weather at the coast was windy and grey all day.",
                "My sister adopted a small grey cat from the shelter.",
                "We tried a new pasta recipe with lemon and garlic.",
                "The team practice ran late because of the rain.",
            ]
        )
    ]
    turns = [
        ConversationTurn(
            id=f"t{i:03d}",
            speaker="Sam",
            text=text,
            at=datetime(d.year, d.month, d.day, 12, tzinfo=UTC),
            session=str(i),
        )
        for i, (d, text) in enumerate([*said, *filler])
    ]
    config = attrs.evolve(default_config(EMBEDDER.space), mentioned_dates=mentioned)
    retriever = HybridRetriever(store, EMBEDDER, config)
    await retriever.add_conversation("sam", turns)
    asked = max(d for d, _ in said) + timedelta(days=30)
    got = await retriever.retrieve("sam", question, limit=len(turns), reference=asked)
    return [int(h.record.id[1:]) for h in got.hits if int(h.record.id[1:]) < len(said)]


@settings(max_examples=20, deadline=None)
@given(said=st.dates(date(2002, 1, 1), date(2089, 12, 31)), plain=st.sampled_from(["", "!"]))
@example(said=date(2023, 4, 18), plain="")
async def test_last_month_said_in_april_answers_a_question_about_march(
    said: date, plain: str
) -> None:
    """Two turns said the same day: one tells no time (shorter, so the keyword
    ranking favours it, and it has the first id), the other says "last month",
    the month asked about. Without mentions the plain one wins; with them, the
    one whose words point at the month."""
    texts = [
        (said, f"My colleagues and I went to a convention{plain}."),
        (said, "My colleagues and I went to a convention last month."),
    ]
    month = (said.replace(day=1) - timedelta(days=1)).replace(day=1)
    question = f"What did Sam attend with colleagues in {_name(month.month)} {month.year}?"
    on = await _ranked(InMemoryMemoryStore(EMBEDDER.space), texts, question, mentioned=True)
    assert on[0] == 1, on


@settings(max_examples=20, deadline=None)
@given(said=st.dates(date(2002, 1, 1), date(2089, 12, 31)))
@example(said=date(2023, 7, 17))
@example(said=date(2023, 7, 22))  # a Saturday
async def test_an_exact_day_finds_the_turn_whose_weekend_held_it(said: date) -> None:
    """Two turns said the same day, over two weeks after the day asked about: one
    tells no time (shorter, the first id), the other says "three weekends ago",
    the weekend that held it. Without mentions the plain one wins; with them, the
    one whose words name the day."""
    texts = [
        (said, "We had a quiet one at home, camping was fun."),
        (said, "We had a quiet one at home three weekends ago, camping was fun."),
    ]
    (weekend,) = parse_dates("three weekends ago", said)
    day = weekend.start
    question = f"What did Sam do on {day.day} {_name(day.month)} {day.year}?"
    on = await _ranked(InMemoryMemoryStore(EMBEDDER.space), texts, question, mentioned=True)
    assert on[0] == 1, on


async def test_without_mentions_the_plain_turn_wins_the_same_cases() -> None:
    """The two checks above can fail: at the dates the examples name, with the
    knob off the plain turn (shorter, the first id) ranks first."""
    said = date(2023, 4, 18)
    texts = [
        (said, "My colleagues and I went to a convention."),
        (said, "My colleagues and I went to a convention last month."),
    ]
    question = "What did Sam attend with colleagues in March 2023?"
    assert (await _ranked(InMemoryMemoryStore(EMBEDDER.space), texts, question, mentioned=False))[
        0
    ] == 0
    said = date(2023, 7, 17)
    texts = [
        (said, "We had a quiet one at home, camping was fun."),
        (said, "We had a quiet one at home three weekends ago, camping was fun."),
    ]
    question = "What did Sam do on 1 July 2023?"
    assert parse_dates("three weekends ago", said)[0].start == date(2023, 7, 1)
    assert (await _ranked(InMemoryMemoryStore(EMBEDDER.space), texts, question, mentioned=False))[
        0
    ] == 0


async def test_mentions_survive_each_local_backend(store: MemoryStore) -> None:
    """The attribute reads back from SQLite as from memory: the same order."""
    texts = [
        (date(2023, 4, 18), "My colleagues and I went to a convention."),
        (date(2023, 4, 18), "My colleagues and I went to a convention last month."),
    ]
    question = "What did Sam attend with colleagues in March 2023?"
    assert (await _ranked(store, texts, question, mentioned=True))[0] == 1

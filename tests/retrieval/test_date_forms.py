"""Date forms a question (or a turn) writes in general English: holidays, parts
and halves of a year, the week or weekend of a day, US numeric days, "over the
weekend", "previous", spans of days and of months, quarters, a weekday before
or after a date: each parses to the days it names, and a dated question in one
of them finds its turn on a synthetic conversation."""

from __future__ import annotations

from datetime import date, timedelta

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.domain.dates import MONTH_NAMES, DateRange, parse_dates

from .test_dated_questions import EMBEDDER, _ranked

YEARS = st.integers(1950, 2090)
DAYS = st.dates(date(1950, 1, 1), date(2090, 12, 31))
_APOSTROPHES = st.sampled_from(["'", "\u2019", ""])


def _one(text: str, reference: date = date(2099, 1, 1)) -> DateRange:
    found = parse_dates(text, reference)
    assert len(found) == 1, (text, found)
    return found[0]


def _day(d: date) -> DateRange:
    return DateRange(d, d)


# --- holidays -------------------------------------------------------------------


@given(year=YEARS, a=_APOSTROPHES, case=st.sampled_from([str.lower, str.title, str.upper]))
def test_fixed_holidays_of_a_year_are_their_day(year: int, a: str, case: object) -> None:
    fixed = {
        "Christmas": (12, 25),
        "Christmas Eve": (12, 24),
        "Christmas Day": (12, 25),
        f"New Year{a}s Eve": (12, 31),
        f"New Year{a}s Day": (1, 1),
        f"New Year{a}s": (1, 1),
        "Halloween": (10, 31),
        f"Valentine{a}s Day": (2, 14),
        "Independence Day": (7, 4),
        "the Fourth of July": (7, 4),
        f"St. Patrick{a}s Day": (3, 17),
    }
    for name, (month, day) in fixed.items():
        text = case(f"on {name} {year}")  # type: ignore[operator]
        assert _one(text) == _day(date(year, month, day)), text


@given(year=YEARS, a=_APOSTROPHES)
def test_moving_holidays_fall_on_their_weekday_in_their_week(year: int, a: str) -> None:
    rules = {
        "Thanksgiving": (3, 11, 22),  # Thursday, November 22-28
        "Labor Day": (0, 9, 1),  # Monday, September 1-7
        "Labour Day": (0, 9, 1),
        "Memorial Day": (0, 5, 25),  # the last Monday of May: 25-31
        f"Mother{a}s Day": (6, 5, 8),  # second Sunday of May: 8-14
        f"Father{a}s Day": (6, 6, 15),  # third Sunday of June: 15-21
    }
    for name, (weekday, month, first) in rules.items():
        r = _one(f"{name} {year}")
        assert r.start == r.end, name
        assert r.start.weekday() == weekday, name
        assert r.start.month == month, (name, r)
        assert first <= r.start.day <= first + 6, (name, r)


@example(year=2000)
@given(year=st.integers(1900, 2099))
def test_easter_is_a_sunday_between_march_22_and_april_25(year: int) -> None:
    d = _one(f"Easter {year}").start
    assert d.weekday() == 6
    assert date(year, 3, 22) <= d <= date(year, 4, 25)


def test_easter_on_known_years() -> None:
    known = [date(2000, 4, 23), date(2019, 4, 21), date(2023, 4, 9), date(2024, 3, 31)]
    for d in known:
        assert _one(f"Easter {d.year}") == _day(d)


@given(reference=st.dates(date(1960, 1, 1), date(2090, 12, 31)))
def test_a_holiday_without_a_year_is_the_latest_not_after_the_reference(reference: date) -> None:
    for name in ("Christmas", "Halloween", "Thanksgiving", "Easter", "Valentine's Day"):
        r = _one(f"What did Sam do on {name}?", reference)
        assert r.start <= reference
        assert _one(f"{name} {r.start.year + 1}").start > reference, name


def test_words_that_are_not_holidays_are_not_dates() -> None:
    for text in ("a new year of school", "the new year", "We had a great year"):
        assert parse_dates(text, date(2023, 12, 6)) == (), text


# --- parts of a year, halves, the week or weekend of a day ----------------------


@given(year=YEARS)
def test_early_mid_late_split_a_year_in_thirds(year: int) -> None:
    early, mid, late = (_one(f"{part} {year}") for part in ("early", "mid", "late"))
    assert early == DateRange(date(year, 1, 1), date(year, 4, 30))
    assert mid == DateRange(date(year, 5, 1), date(year, 8, 31))
    assert late == DateRange(date(year, 9, 1), date(year, 12, 31))
    assert _one(f"in mid-{year}") == mid
    assert _one(f"the beginning of {year}") == early
    assert _one(f"the end of {year}") == late


@given(year=YEARS, month=st.integers(1, 12))
def test_halves_of_a_year_and_of_a_month(year: int, month: int) -> None:
    assert _one(f"the first half of {year}") == DateRange(date(year, 1, 1), date(year, 6, 30))
    assert _one(f"the second half of {year}") == DateRange(date(year, 7, 1), date(year, 12, 31))
    name = MONTH_NAMES[month - 1].capitalize()
    first, second = (_one(f"the {h} half of {name} {year}") for h in ("first", "second"))
    assert first.start == date(year, month, 1)
    assert first.end.day == 15
    assert second.start.day == 16
    assert second.end.month == month
    assert (second.end + timedelta(days=1)).day == 1


@given(day=DAYS)
def test_the_week_and_the_weekend_of_a_day(day: date) -> None:
    name = MONTH_NAMES[day.month - 1].capitalize()
    week = _one(f"the week of {name} {day.day}, {day.year}")
    assert week.start.weekday() == 0
    assert week.end == week.start + timedelta(days=6)
    assert day in week
    weekend = _one(f"the weekend of {day.day} {name} {day.year}")
    assert weekend.start.weekday() == 5
    assert weekend.end == weekend.start + timedelta(days=1)
    assert (
        day in weekend or min(abs((day - weekend.start).days), abs((day - weekend.end).days)) <= 3
    )
    if day.weekday() >= 5:
        assert day in weekend


@given(day=DAYS)
def test_us_numeric_days(day: date) -> None:
    assert _one(f"on {day.month}/{day.day}/{day.year}") == _day(day)
    if day.day > 12:  # the first number cannot be a month: day first
        assert _one(f"on {day.day}/{day.month}/{day.year}") == _day(day)


@given(reference=DAYS)
def test_over_the_weekend_and_previous(reference: date) -> None:
    r = _one("We went hiking over the weekend.", reference)
    assert r.start.weekday() == 5
    assert r.end == r.start + timedelta(days=1)
    assert r.start <= reference < r.start + timedelta(days=7)
    assert _one("the previous week", reference) == _one("last week", reference)
    assert _one("the previous month", reference) == _one("last month", reference)


# --- spans, quarters, a weekday before or after a date ----------------------------

_ORDINAL_SUFFIX = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}


def _nth(n: int) -> str:
    return f"{n}{_ORDINAL_SUFFIX.get(n, 'th')}"


@given(first=DAYS, length=st.integers(1, 27), dash=st.sampled_from(["-", "\u2013", " to "]))
def test_a_span_of_days_in_a_month_is_those_days(first: date, length: int, dash: str) -> None:
    """Before, "from 3 to 5 May 2023" read as 5 May, "May 3-5, 2023" as 3 May and
    the whole year, "on May 3 or 4, 2023" the same."""
    last = first + timedelta(days=length)
    assume(last.month == first.month)
    want = DateRange(first, last)
    name = MONTH_NAMES[first.month - 1].capitalize()
    a, b, y = first.day, last.day, first.year
    for text in (
        f"from {a} to {b} {name} {y}",
        f"between the {_nth(a)} and {_nth(b)} of {name} {y}",
        f"{name} {a}{dash}{b}, {y}",
        f"on {name} {a} or {b}, {y}",
        f"between {name} {a} and {name} {b} {y}",
    ):
        assert _one(text) == want, text


@given(reference=DAYS, day=st.integers(1, 27), length=st.integers(1, 3))
@example(reference=date(2000, 2, 1), day=26, length=3)  # 26-29 February: 1996, not 26 Feb 1999
def test_a_span_of_days_without_a_year_is_the_latest_one(
    reference: date, day: int, length: int
) -> None:
    assume(reference.month != 2 or day + length <= 29)  # "February 27-30" is no span
    name = MONTH_NAMES[reference.month - 1].capitalize()
    r = _one(f"What did Sam do {name} {day}-{day + length}?", reference)
    assert (r.start.month, r.start.day, (r.end - r.start).days) == (reference.month, day, length)
    assert r.start <= reference or r.start.year == reference.year - 1


@given(year=YEARS, first=st.integers(1, 12), last=st.integers(1, 12))
def test_a_span_of_months(year: int, first: int, last: int) -> None:
    """A first month after the second is of the year before ("from November to
    January 2023"). Before, only the second month was read."""
    assume(first != last)
    a, b = MONTH_NAMES[first - 1].capitalize(), MONTH_NAMES[last - 1].capitalize()
    start_year = year - 1 if first > last else year
    end = _one(f"in {b} {year}").end
    want = DateRange(date(start_year, first, 1), end)
    assert _one(f"between {a} and {b} {year}") == want
    assert _one(f"from {a} to {b} {year}") == want


@given(year=YEARS, quarter=st.integers(1, 4))
def test_quarters_of_a_year(year: int, quarter: int) -> None:
    """Before, "the first quarter of 2023" read as the whole year."""
    want = DateRange(
        date(year, 3 * quarter - 2, 1),
        _one(f"in {MONTH_NAMES[3 * quarter - 1]} {year}").end,
    )
    words = ["first", "second", "third", "fourth"][quarter - 1]
    assert _one(f"in the {words} quarter of {year}") == want
    assert _one(f"in Q{quarter} {year}") == want
    assert _one(f"in the last quarter of {year}") == _one(f"in Q4 {year}")


@given(day=DAYS, weekday=st.integers(0, 6))
def test_a_weekday_before_or_after_a_date(day: date, weekday: int) -> None:
    """ "the Friday before 16 November 2023" is 10 November; before, it read as
    16 November itself."""
    name = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"][weekday]
    month = MONTH_NAMES[day.month - 1].capitalize()
    before = _one(f"the {name} before {day.day} {month} {day.year}")
    after = _one(f"the {name} after {month} {day.day}, {day.year}")
    for r in (before, after):
        assert r.start == r.end
        assert r.start.weekday() == weekday
    assert 1 <= (day - before.start).days <= 7
    assert 1 <= (after.start - day).days <= 7


# --- winter of a year, a season alone, two-digit years, "on the 15th", dotted ----
# days, "the past two weeks", a holiday weekend ------------------------------------


@given(year=st.integers(1951, 2090), of=st.sampled_from(["", "of ", ", "]))
def test_winter_of_a_year_is_the_winter_its_january_falls_in(year: int, of: str) -> None:
    """Before, "the winter of 2022" read as the whole of 2022 (winter had no year
    form, the year stood alone)."""
    text = f"in the winter {of}{year}".replace(" , ", ", ")
    assert _one(text) == DateRange(date(year - 1, 12, 1), _one(f"in February {year}").end), text


@given(reference=DAYS, season=st.sampled_from(["spring", "summer", "autumn", "fall", "winter"]))
def test_a_season_alone_is_the_latest_one_begun_by_the_reference(
    reference: date, season: str
) -> None:
    """ "in the summer" said in October 2023 is June-August 2023; before, it was
    no date at all."""
    r = _one(f"What did Sam do in the {season}?", reference)
    assert r.start <= reference
    if season != "winter":
        assert r == _one(f"{season} {r.start.year}", reference)
    else:
        assert (r.start.month, r.start.day) == (12, 1)
        assert r.end == _one(f"in February {r.end.year}", reference).end
    # the next such season begins after the reference
    nxt = _one(f"{season} {r.start.year + 1}" if season != "winter" else f"winter {r.end.year + 1}")
    assert nxt.start > reference
    assert _one(f"during {season}", reference) == r


@given(month=st.integers(1, 12), yy=st.integers(0, 99), reference=DAYS)
def test_a_month_with_a_two_digit_year_is_of_the_nearest_century(
    month: int, yy: int, reference: date
) -> None:
    name = MONTH_NAMES[month - 1].capitalize()
    r = _one(f"in {name} '{yy:02d}", reference)
    assert r.start.year % 100 == yy
    assert abs(r.start.year - reference.year) <= 50
    assert r == _one(f"in {name} {r.start.year}", reference)


@given(reference=DAYS, day=st.integers(1, 31), end=st.sampled_from(["?", ".", "", " after work"]))
def test_on_the_nth_is_the_latest_such_day_not_after_the_reference(
    reference: date, day: int, end: str
) -> None:
    r = _one(f"We met on the {_nth(day)}{end}", reference)
    assert r.start == r.end
    assert r.start.day == day
    assert r.start <= reference
    # no later day `day` of a month is on or before the reference
    month = r.start.replace(day=1)
    for _ in range(2):
        month = (month + timedelta(days=32)).replace(day=1)
        try:
            later = month.replace(day=day)
        except ValueError:
            continue
        assert later > reference


_WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


@given(
    reference=DAYS,
    weekday=st.integers(0, 6),
    form=st.sampled_from(["on {}", "{} night", "On {} morning", "{} afternoon", "on {} evening"]),
    end=st.sampled_from(["?", ".", "", " after work", ", as usual"]),
)
def test_a_bare_weekday_is_the_last_such_day_before_the_reference(
    reference: date, weekday: int, form: str, end: str
) -> None:
    """A question asks about the past: "on Friday" is the last Friday before it
    is asked (a week back when asked on a Friday), like "last Friday"; before,
    it was no date at all."""
    name = _WEEKDAY_NAMES[weekday]
    r = _one(f"What did Sam cook {form.format(name)}{end}", reference)
    assert r.start == r.end
    assert r.start.weekday() == weekday
    assert 1 <= (reference - r.start).days <= 7
    assert r == _one(f"last {name}", reference)


def test_a_weekday_with_its_date_or_as_a_habit_is_no_day_of_its_own() -> None:
    reference = date(2023, 5, 20)
    # the date says which Tuesday: one range, May 9, not also the last Tuesday
    for text in ("on Tuesday, May 9", "on Tuesday May 9th", "on Tuesday, 9 May"):
        assert parse_dates(text, reference) == (_day(date(2023, 5, 9)),), text
    for text in ("We swim on Fridays.", "Sundays are for rest", "on Monday the 8th"):
        assert all(r != _day(date(2023, 5, 15)) for r in parse_dates(text, reference)), text
    assert parse_dates("on Fridays", reference) == ()


@given(
    reference=DAYS,
    month=st.integers(1, 12),
    which=st.sampled_from(["last", "this", "next"]),
    form=st.sampled_from(["{m} of {w} year", "in {m} {w} year", "{m}, {w} year"]),
)
def test_a_month_of_last_this_or_next_year(
    reference: date, month: int, which: str, form: str
) -> None:
    """Before, "May of last year" read as two ranges: the latest May and the
    whole of last year."""
    name = MONTH_NAMES[month - 1].capitalize()
    year = reference.year + {"last": -1, "this": 0, "next": 1}[which]
    assume(1951 <= year <= 2090)
    text = f"What did Sam cook {form.format(m=name, w=which)}?"
    assert _one(text, reference) == _one(f"{name} {year}", reference), text


@given(reference=DAYS, month=st.integers(1, 12))
def test_last_and_next_month_name_are_outside_the_reference_month(
    reference: date, month: int
) -> None:
    """ "last May" asked in May 2023 is May 2022 (it read as May 2023); asked in
    December 2023, May 2023. "next May" is the first May after the reference's
    month."""
    assume(1951 <= reference.year <= 2089)
    name = MONTH_NAMES[month - 1].capitalize()
    this_month = reference.replace(day=1)
    last = _one(f"What did Sam cook last {name}?", reference)
    assert last.start.month == month
    assert last.end < this_month
    assert (this_month - last.start).days <= 366
    nxt = _one(f"What will Sam cook next {name}?", reference)
    assert nxt.start.month == month
    assert nxt.start > reference
    assert (nxt.start - this_month).days <= 366
    assert _one(f"this {name}", reference) == _one(f"{name} {reference.year}", reference)


@given(reference=DAYS, unit=st.sampled_from(["week", "weekend", "month", "year"]))
def test_the_unit_before_last_is_two_units_ago(reference: date, unit: str) -> None:
    """Before, "the week before last" read as "the week before" (the seven days
    before the reference) and "the weekend before last" as last weekend."""
    assume(reference.year >= 1953)
    assert _one(f"the {unit} before last", reference) == _one(f"two {unit}s ago", reference)


@given(
    reference=DAYS,
    unit=st.sampled_from(["day", "week", "month", "year"]),
    word=st.sampled_from(["past", "last"]),
)
def test_the_past_unit_ends_at_the_reference(reference: date, unit: str, word: str) -> None:
    """Before, "in the past month" and "in the last month" read as last calendar
    month ("last month", without "the", still does)."""
    assume(reference.year >= 1952)
    r = _one(f"What did Sam cook in the {word} {unit}?", reference)
    assert r.end == reference
    assert r == _one(f"the past 1 {unit}", reference)
    if unit != "day":
        assert _one(f"last {unit}", reference).end < reference
    assert parse_dates(f"the last {unit} of 2023", reference) != (r,)


@given(reference=DAYS, word=st.sampled_from(["on", "at"]))
def test_on_the_weekend_is_over_the_weekend(reference: date, word: str) -> None:
    assert _one(f"What did Sam cook {word} the weekend?", reference) == _one(
        "over the weekend", reference
    )


def test_the_weekend_of_a_date_is_one_range() -> None:
    """Before, "over the weekend of July 8" was two: last weekend, and July 8's."""
    reference = date(2023, 8, 1)
    expected = (DateRange(date(2023, 7, 8), date(2023, 7, 9)),)
    for text in ("over the weekend of July 8", "on the weekend of July 8"):
        assert parse_dates(text, reference) == expected, text


_ORDINAL_WORDS = ("first", "second", "third", "fourth", "fifth")


@given(year=YEARS, n=st.integers(1, 5), last=st.booleans())
def test_the_nth_month_week_and_day_of_a_year(year: int, n: int, last: bool) -> None:
    """Before, "the last month of 2023" read as last month and the whole of
    2023; "the first week of 2023" as the whole year."""
    word = "last" if last else _ORDINAL_WORDS[n - 1]
    month = _one(f"What did Sam cook in the {word} month of {year}?")
    assert month == _one(f"in {MONTH_NAMES[11 if last else n - 1]} {year}")
    week = _one(f"the {word} week of {year}")
    first = date(year, 12, 25) if last else date(year, 1, 1) + timedelta(days=7 * (n - 1))
    assert week == DateRange(first, first + timedelta(days=6))
    day = _one(f"on the {word} day of {year}")
    assert day == _day(date(year, 12, 31) if last else date(year, 1, n))


@given(year=YEARS, month=st.integers(1, 12), n=st.integers(1, 5), last=st.booleans())
def test_the_nth_day_of_a_month(year: int, month: int, n: int, last: bool) -> None:
    word = "last" if last else _ORDINAL_WORDS[n - 1]
    name = MONTH_NAMES[month - 1].capitalize()
    whole = _one(f"in {name} {year}")
    assert _one(f"on the {word} day of {name} {year}") == _day(
        whole.end if last else date(year, month, n)
    )


def test_an_ordinal_before_a_noun_is_no_day() -> None:
    for text in ("She lives on the 3rd floor.", "He won on the 2nd try", "on the 5th grade trip"):
        assert parse_dates(text, date(2023, 5, 20)) == (), text


@given(day=DAYS)
def test_dotted_days(day: date) -> None:
    assert _one(f"on {day.day:02d}.{day.month:02d}.{day.year}") == _day(day)
    if day.day > 12:  # the second number cannot be a month: month first
        assert _one(f"on {day.month}.{day.day}.{day.year}") == _day(day)


@given(
    reference=st.dates(date(1960, 1, 1), date(2090, 12, 31)),
    n=st.integers(1, 12),
    unit=st.sampled_from(["day", "week", "month", "year"]),
    lead=st.sampled_from(["in the past", "over the last", "during the previous"]),
)
def test_the_past_n_units_end_at_the_reference(
    reference: date, n: int, unit: str, lead: str
) -> None:
    """Before, "the past two weeks" was no date at all."""
    r = _one(f"What did Sam do {lead} {n} {unit}s?", reference)
    assert r.end == reference
    if unit in ("day", "week"):
        assert (r.end - r.start).days == n * (7 if unit == "week" else 1)
    else:
        months = n * (12 if unit == "year" else 1)
        assert (r.start.year * 12 + r.start.month) + months == reference.year * 12 + reference.month
    # the last weeks of a month are a part of it, not a time before the reference
    assert not any(
        x.end == reference for x in parse_dates(f"the last {n} weeks of May 2023", reference)
    )


@given(year=YEARS, a=_APOSTROPHES)
def test_a_holiday_weekend_holds_the_holiday_and_the_weekend_nearest_it(year: int, a: str) -> None:
    """Before, "Labor Day weekend 2023" read as Labor Day and the whole of 2023."""
    names = ("Labor Day", "Memorial Day", "Thanksgiving", "Easter", f"Mother{a}s Day", "Christmas")
    for name in names:
        day = _one(f"on {name} {year}")
        r = _one(f"over {name} weekend {year}")
        assert day.start in r, name
        days = [r.start + timedelta(days=i) for i in range((r.end - r.start).days + 1)]
        assert [d.weekday() for d in days].count(5) == 1, (name, r)
        assert [d.weekday() for d in days].count(6) == 1, (name, r)
        assert len(days) <= 5, (name, r)
    labor = _one(f"Labor Day weekend {year}")
    assert labor.start.weekday() == 5  # Saturday to Monday
    assert (labor.end - labor.start).days == 2


@given(
    year=YEARS,
    first=st.integers(1, 12),
    second=st.integers(1, 12),
    join=st.sampled_from([" or ", " and ", ", ", "/"]),
    reference=DAYS,
)
def test_a_month_joined_to_a_dated_one_takes_its_year(
    year: int, first: int, second: int, join: str, reference: date
) -> None:
    """ "in June or July 2023" asked in 2030 was June 2030's latest June (2029)
    and July 2023."""
    a, b = MONTH_NAMES[first - 1].capitalize(), MONTH_NAMES[second - 1].capitalize()
    got = parse_dates(f"Where did Sam go in {a}{join}{b} {year}?", reference)
    assert got[0] == _one(f"in {a} {year}"), got
    assert got[-1] == _one(f"in {b} {year}"), got
    # a relative date keeps the reference
    assert parse_dates(f"last week or {b} {year}", reference)[0] == _one("last week", reference)
    # along a chain: "in June, July or August 2023", "in June, May or July
    # 2023" (a capitalised "May" or "March" listed with another month is one)
    got = parse_dates(f"in {b}, {a}{join}{b} {year}", reference)
    assert got[0] == _one(f"in {b} {year}"), got
    assert _one(f"in {a} {year}") in got, got


def test_may_and_march_are_months_only_in_a_list_or_after_a_time_word() -> None:
    reference = date(2024, 3, 17)
    may = DateRange(date(2023, 5, 1), date(2023, 5, 31))
    assert may in parse_dates("in June, May or July 2023", reference)
    assert may in parse_dates("June or May 2023", reference)
    for text in ("Sam, May I ask?", "in June, may I ask", "May I ask, June?", "march on"):
        assert all(r.start.month not in (3, 5) for r in parse_dates(text, reference)), text


def test_spans_on_examples() -> None:
    ref = date(2023, 12, 1)
    d = date
    assert parse_dates("the Friday before 16 November 2023", ref) == (_day(d(2023, 11, 10)),)
    assert parse_dates("May 3-5, 2023", ref) == (DateRange(d(2023, 5, 3), d(2023, 5, 5)),)
    assert parse_dates("from November to January 2023", ref) == (
        DateRange(d(2022, 11, 1), d(2023, 1, 31)),
    )
    # a month without a year takes the second date's year whole: asked in a leap
    # year, February (1-29) is moved to 2023 as February 1-28, not left in 2024
    assert parse_dates("from February to March 5 2023", d(2024, 6, 1)) == (
        DateRange(d(2023, 2, 1), d(2023, 3, 5)),
    )
    # not spans: a second day before the first, or an impossible one
    assert parse_dates("May 5-3, 2023", ref)[0] == _day(d(2023, 5, 5))
    assert DateRange(d(2023, 2, 1), d(2023, 2, 28)) in parse_dates(
        "from 30 to 31 February 2023", ref
    )


# --- through HybridRetriever ----------------------------------------------------


async def _first(days: list[date], question: str) -> date:
    """The day of the turn ranked first: one identical turn per day, each its
    own session, so only the dates tell them apart (the earliest id wins ties)."""
    return (await _ranked(InMemoryMemoryStore(EMBEDDER.space), days, question))[0]


@settings(max_examples=15, deadline=None)
@given(year=st.integers(2001, 2089))
async def test_a_holiday_question_finds_the_turn_told_that_day(year: int) -> None:
    """Other turns of the same year come first by id: read as the whole year
    ("Christmas 2022" before holidays were parsed), they all tie."""
    days = [date(year, 3, 10), date(year, 7, 2), date(year, 12, 26)]
    assert await _first(days, f"What did Sam drive at Christmas {year}?") == days[-1]


@settings(max_examples=15, deadline=None)
@given(year=st.integers(2001, 2089))
async def test_mid_year_finds_its_turn(year: int) -> None:
    days = [date(year, 1, 20), date(year, 11, 3), date(year, 6, 14)]
    assert await _first(days, f"What did Sam drive in mid-{year}?") == days[-1]


@settings(max_examples=15, deadline=None)
@given(day=st.dates(date(2001, 1, 1), date(2089, 12, 1)))
async def test_the_week_of_a_day_finds_the_turn_earlier_that_week(day: date) -> None:
    """The Friday of `day`'s week is named; the turn is on its Monday, another
    ten days after the Friday (first by id). Read as the Friday alone, the later
    turn is nearer (it falls three days past the grace after the Friday, the
    Monday four days before it); read as the week, the Monday is inside."""
    friday = day - timedelta(days=day.weekday()) + timedelta(days=4)
    # a week inside one month: one crossing two adds both months' words to the
    # keyword query, and the month the question names counts twice there
    assume((friday - timedelta(days=4)).month == (friday + timedelta(days=2)).month)
    days = [friday + timedelta(days=10), friday - timedelta(days=4)]
    name = MONTH_NAMES[friday.month - 1].capitalize()
    question = f"What did Sam drive the week of {name} {friday.day}, {friday.year}?"
    assert await _first(days, question) == days[-1]


@settings(max_examples=15, deadline=None)
@given(day=st.dates(date(2001, 1, 8), date(2089, 12, 1)), weekday=st.integers(0, 6))
async def test_a_bare_weekday_finds_the_turn_told_that_day(day: date, weekday: int) -> None:
    """Turns on each of the last seven days before the question (identical, the
    earliest first by id): "on <weekday>" must rank that day's turn first; read
    as no date (before), the earliest wins the tie."""
    asked = day + timedelta(days=7)
    days = [day + timedelta(days=k) for k in range(7)]
    wanted = next(d for d in days if d.weekday() == weekday)
    question = f"What did Sam drive on {_WEEKDAY_NAMES[weekday]}?"
    ranked = await _ranked(InMemoryMemoryStore(EMBEDDER.space), days, question, asked)
    assert ranked[0] == wanted


@settings(max_examples=15, deadline=None)
@given(day=st.dates(date(2001, 1, 8), date(2089, 12, 1)))
async def test_a_span_of_days_finds_the_turn_inside_it(day: date) -> None:
    """The turn on the span's first day against one 9 days after its last
    (first by id). Read as the last day alone (before spans were parsed), both
    are 2 days outside (2 before it; 9 after, 2 past the 7-day grace): a tie the
    later turn wins by id. Read as the span, the first day is inside it."""
    first, last = day, day + timedelta(days=2)
    assume(first.month == last.month)
    name = MONTH_NAMES[first.month - 1].capitalize()
    days = [last + timedelta(days=9), first]
    question = f"What did Sam drive from {first.day} to {last.day} {name} {first.year}?"
    assert await _first(days, question) == first

"""Dates named in text (pure): absolute and relative expressions -> day ranges.

Retrieval uses them two ways: a record's event time is written into its indexing
context as words the keyword rankers match (`event_time_words`: "May 2023"), and
a question that names a time ("during March 2023", "on October 24, 2023", "last
week", "in 2022", "2023-05-08", "yesterday") favours records whose event time
falls in, or shortly after, the named range (`date_match`). Relative expressions
resolve against a reference date the caller passes in: nothing here reads a
clock. `parse_dates` never raises on any text; it returns what it recognised.

Recognised (case-insensitive; "st/nd/rd/th" ordinals and commas allowed):
- a day: `2023-05-08`, `2023/05/08`, `8 May 2023`, `8th of May, 2023`,
  `May 8, 2023`, `May 8th 2023`; without a year (`May 8`, `8 May`) the latest
  such day not after the reference;
- a month: `May 2023`, `May of 2023`, `2023-05`; a month name alone
  (`in June`) is the latest such month not after the reference ("may" and
  "march" alone only after a time preposition: "in May", not "may I");
- a season: `summer 2021` (northern meteorological: Jun-Aug);
- a year: `2022` (1900-2099 standing alone);
- relative: `today`, `yesterday`, `tomorrow`, `last/this/next week|weekend|month|year`,
  `N days|weeks|months|years ago` (digits or number words, "a"), `last Friday`.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import date, datetime, timedelta

from attrs import frozen

__all__ = [
    "MONTH_NAMES",
    "DateRange",
    "date_match",
    "event_time_words",
    "parse_dates",
    "range_words",
]

MONTH_NAMES = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTHS: dict[str, int] = {name: i for i, name in enumerate(MONTH_NAMES, start=1)}
_MONTHS.update(
    {name[:3]: i for i, name in enumerate(MONTH_NAMES, start=1)} | {"sept": 9},
)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "couple of": 2,
    "few": 3,
}
_SEASONS = {"spring": (3, 5), "summer": (6, 8), "autumn": (9, 11), "fall": (9, 11)}
# a month name alone is a date only after one of these (and always for the
# unambiguous names): "in May", "during March", but not "may I", "march on"
_TIME_PREPOSITIONS = frozenset(
    {
        *("in", "during", "since", "until", "till", "by", "before", "after", "of"),
        *("early", "mid", "late", "last", "next", "this", "throughout", "around"),
        *("from", "to", "and"),
    }
)
_AMBIGUOUS_MONTHS = frozenset({"may", "march", "jan", "mar", "jun", "aug", "sept", "sep", "oct"})

_M = (
    r"(?P<{name}>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_D = r"(?P<{name}>[0-3]?\d)(?:st|nd|rd|th)?"
_Y = r"(?P<{name}>(?:1[0-9]|20|21)\d\d)"
_ISO_DAY = re.compile(r"(?<![\w/-])(?P<y>\d{4})[-/](?P<m>\d{1,2})[-/](?P<d>\d{1,2})(?![\w/-])")
_ISO_MONTH = re.compile(r"(?<![\w/-])(?P<y>\d{4})-(?P<m>\d{1,2})(?![\w/-])")
_DAY_MONTH = re.compile(
    r"(?<!\w)"
    + _D.format(name="d")
    + r"(?:\s+of)?\s+"
    + _M.format(name="m")
    + r"(?:,?\s*(?:of\s+)?"
    + _Y.format(name="y")
    + r")?(?!\w)",
    re.I,
)
_MONTH_DAY = re.compile(
    r"(?<!\w)"
    + _M.format(name="m")
    + r"\s+(?:the\s+)?"
    + _D.format(name="d")
    + r"(?:,?\s*"
    + _Y.format(name="y")
    + r")?(?!\w)",
    re.I,
)
_MONTH_YEAR = re.compile(
    r"(?<!\w)" + _M.format(name="m") + r",?\s+(?:of\s+)?" + _Y.format(name="y") + r"(?!\w)",
    re.I,
)
_SEASON_YEAR = re.compile(
    r"(?<!\w)(?P<s>spring|summer|autumn|fall)(?:\s+of)?,?\s+" + _Y.format(name="y") + r"(?!\w)",
    re.I,
)
_MONTH_ALONE = re.compile(r"(?<!\w)" + _M.format(name="m") + r"(?!\w)", re.I)
_YEAR_ALONE = re.compile(r"(?<![\w.,/-])(?P<y>(?:19|20)\d\d)(?![\w/-]|[.,]\d)")
_NUMBER = (
    r"(?P<n>\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
    r"|couple of|few)"
)
_AGO = re.compile(
    r"(?<!\w)" + _NUMBER + r"\s+(?P<unit>day|week|month|year)s?\s+ago(?!\w)",
    re.I,
)
_LAST_NEXT = re.compile(
    r"(?<!\w)(?P<which>last|this|next|past)\s+(?P<unit>week(?:end)?|month|year|"
    + "|".join(_WEEKDAYS)
    + r")(?!\w)",
    re.I,
)
_SINGLE_DAY = re.compile(r"(?<!\w)(?P<w>today|yesterday|tomorrow|tonight)(?!\w)", re.I)
_PRECEDING_WORD = re.compile(r"(\w+)\W*$")


@frozen(order=True)
class DateRange:
    """Days `start` to `end`, both included (`start <= end`)."""

    start: date
    end: date

    def __attrs_post_init__(self) -> None:
        if self.start > self.end:
            raise ValueError(f"start {self.start} is after end {self.end}")

    def __contains__(self, day: object) -> bool:
        return isinstance(day, date) and self.start <= day <= self.end


def _month_range(year: int, month: int) -> DateRange:
    last = calendar.monthrange(year, month)[1]
    return DateRange(date(year, month, 1), date(year, month, last))


def _day(year: int, month: int, day: int) -> DateRange | None:
    try:
        d = date(year, month, day)
    except ValueError:
        return None
    return DateRange(d, d)


def _latest_day(month: int, day: int, reference: date) -> DateRange | None:
    """The latest `month`/`day` not after `reference` (within 8 years: Feb 29)."""
    for year in range(reference.year, reference.year - 9, -1):
        try:
            d = date(year, month, day)
        except ValueError:
            continue
        if d <= reference:
            return DateRange(d, d)
    return None


def _latest_month(month: int, reference: date) -> DateRange | None:
    year = reference.year if month <= reference.month else reference.year - 1
    return _month_range(year, month) if year >= 1 else None


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    month += 1
    return date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def _week_of(day: date) -> DateRange:
    monday = day - timedelta(days=day.weekday())
    return DateRange(monday, monday + timedelta(days=6))


def _number(text: str) -> int:
    text = " ".join(text.lower().split())
    return int(text) if text.isdigit() else _NUMBERS[text]


def _relative(match: re.Match[str], reference: date) -> DateRange | None:
    which = match["which"].lower()
    unit = match["unit"].lower()
    step = {"last": -1, "past": -1, "this": 0, "next": 1}[which]
    if unit == "week":
        return _week_of(reference + timedelta(weeks=step))
    if unit == "weekend":
        saturday = _week_of(reference).start + timedelta(days=5 + 7 * step)
        return DateRange(saturday, saturday + timedelta(days=1))
    if unit == "month":
        first = _add_months(reference.replace(day=1), step)
        return _month_range(first.year, first.month)
    if unit == "year":
        year = reference.year + step
        return DateRange(date(year, 1, 1), date(year, 12, 31))
    weekday = _WEEKDAYS.index(unit)
    if step < 0:
        back = (reference.weekday() - weekday) % 7 or 7
        d = reference - timedelta(days=back)
    elif step > 0:
        ahead = (weekday - reference.weekday()) % 7 or 7
        d = reference + timedelta(days=ahead)
    else:
        d = reference + timedelta(days=weekday - reference.weekday())
    return DateRange(d, d)


def _ago(match: re.Match[str], reference: date) -> DateRange | None:
    n = _number(match["n"])
    unit = match["unit"].lower()
    if unit == "day":
        d = reference - timedelta(days=n)
        return DateRange(d, d)
    if unit == "week":
        return _week_of(reference - timedelta(weeks=n))
    if unit == "month":
        first = _add_months(reference.replace(day=1), -n)
        return _month_range(first.year, first.month)
    year = reference.year - n
    return DateRange(date(year, 1, 1), date(year, 12, 31))


def _preceded_by_time_word(text: str, start: int) -> bool:
    m = _PRECEDING_WORD.search(text[:start])
    return m is not None and m[1].lower() in _TIME_PREPOSITIONS


def _month(name: str) -> int:
    return _MONTHS[name.lower().rstrip(".")]


_Build = Callable[[re.Match[str], date], DateRange | None]


def _iso_day(m: re.Match[str], _ref: date) -> DateRange | None:
    return _day(int(m["y"]), int(m["m"]), int(m["d"]))


def _iso_month(m: re.Match[str], _ref: date) -> DateRange | None:
    return _month_range(int(m["y"]), int(m["m"]))


def _named_day(m: re.Match[str], reference: date) -> DateRange | None:
    if m["y"]:
        return _day(int(m["y"]), _month(m["m"]), int(m["d"]))
    return _latest_day(_month(m["m"]), int(m["d"]), reference)


def _month_of_year(m: re.Match[str], _ref: date) -> DateRange | None:
    return _month_range(int(m["y"]), _month(m["m"]))


def _season_of_year(m: re.Match[str], _ref: date) -> DateRange | None:
    return _season(m["s"], int(m["y"]))


def _single_day(m: re.Match[str], reference: date) -> DateRange | None:
    offset = {"today": 0, "tonight": 0, "yesterday": -1, "tomorrow": 1}[m["w"].lower()]
    d = reference + timedelta(days=offset)
    return DateRange(d, d)


def _month_alone(m: re.Match[str], reference: date) -> DateRange | None:
    return _latest_month(_month(m["m"]), reference)


def _year_alone(m: re.Match[str], _ref: date) -> DateRange | None:
    return _year(int(m["y"]))


# most specific forms first: `parse_dates` skips a span an earlier form took
_FORMS: tuple[tuple[re.Pattern[str], _Build], ...] = (
    (_ISO_DAY, _iso_day),
    (_ISO_MONTH, _iso_month),
    (_DAY_MONTH, _named_day),
    (_MONTH_DAY, _named_day),
    (_MONTH_YEAR, _month_of_year),
    (_SEASON_YEAR, _season_of_year),
    (_AGO, _ago),
    (_LAST_NEXT, _relative),
    (_SINGLE_DAY, _single_day),
    (_MONTH_ALONE, _month_alone),
    (_YEAR_ALONE, _year_alone),
)


def _scan(text: str) -> Iterable[tuple[re.Match[str], _Build]]:
    for pattern, build in _FORMS:
        for m in pattern.finditer(text):
            if build is _month_alone and not _month_alone_is_a_date(text, m):
                continue
            yield m, build


def _month_alone_is_a_date(text: str, m: re.Match[str]) -> bool:
    name = m["m"].lower().rstrip(".")
    ambiguous = name in _AMBIGUOUS_MONTHS or len(name) == 3
    return not ambiguous or _preceded_by_time_word(text, m.start())


def _season(name: str, year: int) -> DateRange:
    first, last = _SEASONS[name.lower()]
    return DateRange(_month_range(year, first).start, _month_range(year, last).end)


def _year(year: int) -> DateRange:
    return DateRange(date(year, 1, 1), date(year, 12, 31))


def parse_dates(text: str, reference: date) -> tuple[DateRange, ...]:
    """The day ranges `text` names, in the order they appear (duplicates once).

    Relative expressions resolve against `reference` (the day the text was
    written or asked; a datetime counts by its date). Unrecognised or impossible
    dates ("31 February", arithmetic past year 9999) are skipped: this never
    raises for any `text`."""
    if isinstance(reference, datetime):
        reference = reference.date()
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, DateRange]] = []
    for m, build in _scan(text):
        start, end = m.span()
        if any(start < e and s < end for s, e in taken):
            continue
        try:
            got = build(m, reference)
        except (ValueError, OverflowError, KeyError):
            continue
        if got is not None:  # an impossible date ("0 January") leaves its span to others
            taken.append((start, end))
            found.append((start, got))
    found.sort(key=lambda pair: pair[0])
    return tuple(dict.fromkeys(r for _, r in found))


def event_time_words(at: datetime | date) -> str:
    """The words a record's event time adds to its indexing context, so keyword
    search matches questions that name the month or year: `"May 2023"`."""
    return f"{MONTH_NAMES[at.month - 1].capitalize()} {at.year}"


def range_words(r: DateRange, *, max_months: int = 3) -> str:
    """Words for the months a range covers (`"October 2023"`), the same words
    `event_time_words` indexes, so a relative question ("last week") matches
    them too; a range over more than `max_months` months gives its years."""
    months: list[str] = []
    year, month = r.start.year, r.start.month
    while (year, month) <= (r.end.year, r.end.month) and len(months) <= max_months:
        months.append(f"{MONTH_NAMES[month - 1].capitalize()} {year}")
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    if len(months) <= max_months:
        return " ".join(months)
    return " ".join(str(y) for y in range(r.start.year, min(r.end.year, r.start.year + 3) + 1))


def date_match(
    day: date,
    ranges: Sequence[DateRange],
    *,
    grace_days: float,
    half_life_days: float,
) -> float:
    """How well `day` (a record's event time) fits the named ranges, in [0, 1]:
    1 inside a range or up to `grace_days` after its end (what happened on a day
    is usually told on it or soon after), then halving every `half_life_days`
    further away on either side; the best range counts. 0 without ranges."""
    best = 0.0
    for r in ranges:
        if day < r.start:
            distance = float((r.start - day).days)
        else:
            after = (day - r.end).days
            if after <= grace_days:
                return 1.0
            distance = after - grace_days
        best = max(best, float(0.5 ** (distance / half_life_days)))
    return best

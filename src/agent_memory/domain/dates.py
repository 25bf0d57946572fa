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
- relative: `today`, `yesterday`, `tomorrow`, `tonight`, `last night`, `this
  morning|afternoon|evening`, `last/this/next week|weekend|month|year`,
  `last/this/next summer|spring|autumn|fall|winter` (winter: December-February),
  `N days|weeks|weekends|months|years ago` (digits or number words, "a"), `last Friday`,
  `the day|week|weekend|month before|after` alone (against the reference);
- holidays, of the year named or else the latest not after the reference:
  `Christmas (Eve|Day)`, `New Year's (Eve|Day)`, `Halloween`, `Valentine's Day`,
  `Independence Day` / `the Fourth of July`, `St. Patrick's Day`, and the ones
  that move: `Thanksgiving` (US: the fourth Thursday of November), `Labor Day`,
  `Memorial Day`, `Mother's Day`, `Father's Day` (US rules), `Easter`;
- US numeric days `10/24/2023` (month first unless the first number cannot be
  a month: `24/10/2023`); `over the weekend` (the latest weekend up to the
  reference); `previous` as `last` (`the previous week`);
- parts of a year: `early|mid|late 2022`, `mid-2023`, `the beginning|middle|end
  of 2022` (January-April, May-August, September-December), `the first|second
  half of 2023` (or of a month: days 1-15, 16-last); `the week of May 8, 2023`
  (its Monday-Sunday week), `the weekend of July 7` (the nearest Saturday and
  Sunday);
- modifiers of a date that follows them: `the week before 16 November 2023`,
  `three days after May 8`, `the first weekend of October`, `the second week of
  November`, `the last Friday of May 2023`, `the beginning|middle|end of
  October 2023`, `early|mid|late October`; and `as of <date>`: a state at that
  time (`DateRange.as_of`), which `date_match` reads as "the latest before it";
  `by <date>` the same, `before <date>` as of the day before it; `since <date>`
  and `after <date>`: what happened from its start (the day after it) on
  (`DateRange.since`), "the soonest after it";
- `winter 2022` (the winter its January is in: December 2021-February 2022), a
  season alone after a time word (`in the summer`: the latest begun by the
  reference), `May '23` (the century nearest the reference), `on the 15th` (the
  latest 15th not after the reference; not before a noun: "on the 3rd floor"),
  dotted days `14.08.2023` (day first unless the second number cannot be a
  month), `the past two weeks` / `the last 3 months` (up to the reference), and
  a holiday weekend (`Labor Day weekend`: the holiday and the weekend nearest it);
- a weekday alone (`on Friday`, `Saturday night`: the last one before the
  reference), `May of last year`, `last May` (the latest before the reference's
  month), `the week before last`, `the past month` (up to the reference), `on the
  weekend`, `the last month of 2023`, `the first day of May`, and "May" or
  "March" capitalised in a list of months.

A record's own words can say when its events happened ("we went camping two
weekends ago"): `mentioned_dates` resolves them against when it was said,
`format_ranges` / `parse_ranges` store them as an attribute, and `mention_match`
scores them against a question's ranges.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import date, datetime, timedelta

from attrs import frozen

__all__ = [
    "MAX_ANCHOR_DAYS",
    "MONTH_NAMES",
    "DateRange",
    "date_match",
    "date_spans",
    "event_time_words",
    "format_ranges",
    "mention_match",
    "mentioned_dates",
    "parse_dates",
    "parse_ranges",
    "question_spans",
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
_ORDINALS = {
    **{"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5},
    **{"1st": 1, "2nd": 2, "3rd": 3, "4th": 4, "5th": 5, "last": -1, "final": -1},
}
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


def _day_then_month(day: str) -> re.Pattern[str]:
    """`day` (a pattern with group `d`) before a month name and an optional year:
    "8 May 2023", "the 8th of May"."""
    return re.compile(
        r"(?<!\w)"
        + day
        + r"(?:\s+of)?\s+"
        + _M.format(name="m")
        + r"(?:,?\s*(?:of\s+)?"
        + _Y.format(name="y")
        + r")?(?!\w)",
        re.I,
    )


def _month_then_day(day: str) -> re.Pattern[str]:
    """A month name before `day` and an optional year: "May 8th, 2023"."""
    return re.compile(
        r"(?<!\w)"
        + _M.format(name="m")
        + r"\s+(?:the\s+)?"
        + day
        + r"(?:,?\s*"
        + _Y.format(name="y")
        + r")?(?!\w)",
        re.I,
    )


_DAY_MONTH = _day_then_month(_D.format(name="d"))
_MONTH_DAY = _month_then_day(_D.format(name="d"))
_MONTH_YEAR = re.compile(
    r"(?<!\w)" + _M.format(name="m") + r",?\s+(?:of\s+)?" + _Y.format(name="y") + r"(?!\w)",
    re.I,
)
_SEASON_YEAR = re.compile(
    r"(?<!\w)(?P<s>spring|summer|autumn|fall|winter)(?:\s+of)?,?\s+"
    + _Y.format(name="y")
    + r"(?!\w)",
    re.I,
)
# a season with no year after a time word: "in the summer", "during winter"
_SEASON_ALONE = re.compile(
    r"(?<!\w)(?:in|during|over|throughout)\s+(?:the\s+)?(?P<s>spring|summer|autumn|fall|winter)"
    r"(?!\w)(?!\s+(?:of\s+)?\d)",
    re.I,
)
# a month and a two-digit year: "May '23" (the century nearest the reference)
_MONTH_SHORT_YEAR = re.compile(
    r"(?<!\w)" + _M.format(name="m") + r",?\s+['\u2019](?P<yy>\d\d)(?!\w)", re.I
)
# "on the 15th": the latest 15th not after the reference, when what follows is
# no noun the ordinal counts ("on the 3rd floor", "on the 2nd try")
_ON_THE_DAY = re.compile(
    r"(?<!\w)on\s+the\s+(?P<d>[0-3]?\d)(?:st|nd|rd|th)(?!\w)"
    r"(?=\s*(?:$|[?.!,;:)\]\"\u201d]|(?:after|before|at|and|or|when|while|with|for|to|we|i|he"
    r"|she|they|you|it|this|last|next|of\s+(?:this|last|next|the)\s+month)(?!\w)))",
    re.I,
)
# European dotted days: "14.08.2023" (day first unless the second number cannot
# be a month)
_DOT_DAY = re.compile(r"(?<![\w./-])(?P<a>\d{1,2})\.(?P<b>\d{1,2})\.(?P<y>\d{4})(?![\w/-]|\.\d)")
_MONTH_ALONE = re.compile(r"(?<!\w)" + _M.format(name="m") + r"(?!\w)", re.I)
_UNTIL = r"\s*(?:-|\u2013|to|until|till|through|thru|and|or)\s*"
# spans of days in one month: "from 3 to 5 May 2023", "between the 3rd and 5th of
# May", "May 3-5, 2023", "on May 3 or 4" (either day: both)
_DAY_SPAN = _D.format(name="d") + _UNTIL + r"(?:the\s+)?" + _D.format(name="d2")
_DAYS_MONTH = _day_then_month(r"(?:the\s+)?" + _DAY_SPAN)
_MONTH_DAYS = _month_then_day(_DAY_SPAN)
# spans of months: "between May and July 2023", "from November to January 2023"
# (a first month after the second is of the year before)
_MONTHS_YEAR = re.compile(
    r"(?<!\w)(?:between|from)\s+"
    + _M.format(name="m")
    + _UNTIL
    + _M.format(name="m2")
    + r",?\s+(?:of\s+)?"
    + _Y.format(name="y")
    + r"(?!\w)",
    re.I,
)
# quarters: "the first quarter of 2023", "Q3 2022"
_QUARTER = re.compile(
    r"(?<!\w)(?:(?:the\s+)?(?P<q>first|second|third|fourth|last|final|1st|2nd|3rd|4th)"
    r"\s+quarter\s+of|q(?P<n>[1-4]))\s+" + _Y.format(name="y") + r"(?!\w)",
    re.I,
)
_YEAR_ALONE = re.compile(r"(?<![\w.,/-])(?P<y>(?:19|20)\d\d)(?![\w/-]|[.,]\d)")
_NUMBER = (
    r"(?P<n>\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
    r"|couple of|few)"
)
_AGO = re.compile(
    r"(?<!\w)" + _NUMBER + r"\s+(?P<unit>day|week(?:end)?|month|year)s?\s+ago(?!\w)",
    re.I,
)
# "the past two weeks", "the last 3 months": from that long before the reference
# up to it ("the last two weeks of May" is a part of May, not this)
_PAST_N = re.compile(
    r"(?<!\w)(?:the\s+)?(?:past|last|previous)\s+"
    + _NUMBER
    + r"\s+(?P<unit>day|week|month|year)s?(?!\w)(?!\s+(?:of|in|before|after)(?!\w))",
    re.I,
)
_LAST_NEXT = re.compile(
    r"(?<!\w)(?P<which>last|this|next|past|previous)\s+(?P<unit>week(?:end)?|month|year|"
    + "|".join(_WEEKDAYS)
    + r"|spring|summer|autumn|fall|winter)(?!\w)",
    re.I,
)
# "the week before" with no date after it: against the reference
_SHIFT_ALONE = re.compile(
    r"(?<!\w)the\s+(?P<unit>day|week(?:end)?|month)\s+(?P<dir>before|after)(?!\w)", re.I
)
# modifiers of the date right after them (matched on the text before it)
_AS_OF = re.compile(r"(?<!\w)as\s+of\s+(?:the\s+)?$", re.I)
# open on one side: "by May 2023" and "before May 2023" ask for a state then (as
# of its end, as of the day before it); "since March 2023" and "after July 2023"
# for what happened from it on (from its start, from the day after it). "until"
# and "till" are left to spans ("from May 1 until May 9")
_OPEN = re.compile(r"(?<!\w)(?P<w>by|before|since|after)\s+(?:the\s+)?$", re.I)
_SHIFT = re.compile(
    r"(?<!\w)(?:(?:the|a|last|first)\s+(?P<unit>day|week(?:end)?|month|"
    + "|".join(_WEEKDAYS)
    + r")|"
    + _NUMBER
    + r"\s+(?P<units>day|week|month)s?)\s+(?P<dir>before|after|prior\s+to)\s+(?:the\s+)?$",
    re.I,
)
_ORDINAL_OF = re.compile(
    r"(?<!\w)(?:the\s+)?(?P<ord>"
    + "|".join(_ORDINALS)
    + r")\s+(?P<unit>week(?:end)?|day|month|"
    + "|".join(_WEEKDAYS)
    + r")\s+(?:of|in)\s+$",
    re.I,
)
_PART_OF = re.compile(
    r"(?<!\w)(?:(?:the\s+)?(?P<part>beginning|start|middle|end)\s+of|(?P<early>early|mid|late))"
    r"[\s-]+$",
    re.I,
)
# "the week of May 8", "the weekend of July 8": the week (weekend) holding the day
_WEEK_OF = re.compile(r"(?<!\w)(?:the\s+)?(?P<unit>week(?:end)?)\s+of\s+(?:the\s+)?$", re.I)
# "the first half of 2023", "the second half of May"
_HALF_OF = re.compile(r"(?<!\w)(?:the\s+)?(?P<half>first|second|1st|2nd)\s+half\s+of\s+$", re.I)
# "mid-2023", "early-2022" (the year after a hyphen is no year of its own)
_PART_YEAR = re.compile(
    r"(?<!\w)(?P<part>early|mid|late)-" + _Y.format(name="y") + r"(?![\w/-])", re.I
)
# US numeric dates: "10/24/2023" (month first unless the first number cannot be one)
_US_DAY = re.compile(r"(?<![\w/-])(?P<a>\d{1,2})/(?P<b>\d{1,2})/(?P<y>\d{4})(?![\w/-])")
_APOSTROPHE = r"['\u2019]?"
# holidays: fixed days, and the US ones that move (Thanksgiving: the fourth
# Thursday of November), Easter by the Gregorian computus
_HOLIDAYS: dict[str, tuple[int, int] | Callable[[int], date]] = {
    "christmas eve": (12, 24),
    "christmas day": (12, 25),
    "christmas": (12, 25),
    "xmas": (12, 25),
    "new year eve": (12, 31),
    "new year day": (1, 1),
    "new year": (1, 1),
    "halloween": (10, 31),
    "valentine day": (2, 14),
    "independence day": (7, 4),
    "fourth of july": (7, 4),
    "st patrick day": (3, 17),
    "saint patrick day": (3, 17),
    "thanksgiving": lambda y: _nth_weekday(y, 11, 3, 4),
    "labor day": lambda y: _nth_weekday(y, 9, 0, 1),
    "memorial day": lambda y: _nth_weekday(y, 5, 0, -1),
    "mother day": lambda y: _nth_weekday(y, 5, 6, 2),
    "father day": lambda y: _nth_weekday(y, 6, 6, 3),
    "easter": lambda y: _easter(y),
}
_HOLIDAY = re.compile(
    r"(?<!\w)(?:the\s+)?(?P<h>christmas\s+(?:eve|day)|christmas|xmas|new\s+year(?:"
    + _APOSTROPHE
    + r"s(?:\s+(?:eve|day))?|\s+(?:eve|day))|halloween|valentine"
    + _APOSTROPHE
    + r"s?\s+day|independence\s+day|fourth\s+of\s+july|(?:st\.?|saint)\s+patrick"
    + _APOSTROPHE
    + r"s?\s+day|thanksgiving|labou?r\s+day|memorial\s+day|mother"
    + _APOSTROPHE
    + r"s?\s+day|father"
    + _APOSTROPHE
    + r"s?\s+day|easter)(?P<weekend>\s+weekend)?(?:\s+(?:day\s+)?(?:of\s+)?"
    + _Y.format(name="y")
    + r")?(?!\w)",
    re.I,
)
# "over the weekend": the latest weekend up to the reference
# a weekday with no "last"/"next"/date: "on Friday", "Saturday night" (not
# "on Fridays", a habit, nor "on Tuesday, May 9", whose date says which Tuesday)
_BARE_WEEKDAY = re.compile(
    r"(?<!\w)(?:on\s+(?P<a>"
    + "|".join(_WEEKDAYS)
    + r")|(?P<b>"
    + "|".join(_WEEKDAYS)
    + r")\s+(?:night|morning|afternoon|evening))(?!\w)"
    r"(?!,?\s+(?:the\s+)?\d|,?\s+" + _M.format(name="after") + r"(?!\w))",
    re.I,
)
# "over the weekend", "on the weekend" (not "the weekend of July 8", a modifier)
_OVER_WEEKEND = re.compile(r"(?<!\w)(?:over|on|at)\s+the\s+weekend(?!\w)(?!\s+of(?!\w))", re.I)
# "May of last year", "in March this year": the month of the year that names
_MONTH_OF_YEAR_WORD = re.compile(
    r"(?<!\w)" + _M.format(name="m") + r"(?:\s+of)?,?\s+(?P<which>last|this|next)\s+year(?!\w)",
    re.I,
)
# "last May" (the latest May before this month), "next March", "this June"
_WHICH_MONTH = re.compile(
    r"(?<!\w)(?P<which>last|past|previous|this|next)\s+" + _M.format(name="m") + r"(?!\w)",
    re.I,
)
# "the week before last": two weeks (weekends, months, years) back
_BEFORE_LAST = re.compile(
    r"(?<!\w)the\s+(?P<unit>week(?:end)?|month|year)\s+before\s+last(?!\w)", re.I
)
# "the past week", "in the last month" (no number): the week (month) up to the
# reference, as "the past two weeks" is two ("last week" without "the" is the
# calendar week before this one; "the last week of May" a part of May)
_THE_PAST = re.compile(
    r"(?<!\w)the\s+(?:past|last)\s+(?P<unit>day|week|month|year)(?!\w)"
    r"(?!\s+(?:of|in|before|after)(?!\w))",
    re.I,
)
_SINGLE_DAY = re.compile(
    r"(?<!\w)(?P<w>today|yesterday|tomorrow|tonight|last\s+night|this\s+(?:morning|afternoon|evening))"
    r"(?!\w)",
    re.I,
)
_PRECEDING_WORD = re.compile(r"(\w+)\W*$")


@frozen(order=True)
class DateRange:
    """Days `start` to `end`, both included (`start <= end`). `as_of`: the text
    asks for a state at that time ("as of October 2023", "by May 2023", "before
    May 2023"), so what was said up to its end counts, the latest most, and
    nothing after it. `since`: the text asks for what happened from `start` on
    ("since March 2023", "after July 2023"; `end` is the reference day it was
    read against, or `start` when that is earlier), so nothing before `start`
    counts and everything after it does, the soonest most."""

    start: date
    end: date
    as_of: bool = False
    since: bool = False

    def __attrs_post_init__(self) -> None:
        if self.start > self.end:
            raise ValueError(f"start {self.start} is after end {self.end}")
        if self.as_of and self.since:
            raise ValueError("a range is either as of its end or since its start, not both")

    @property
    def open(self) -> bool:
        """Whether the range is open on one side (`as_of` or `since`): a state up
        to its end or what happened from its start on."""
        return self.as_of or self.since

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


def _weekend(saturday: date) -> DateRange:
    """The Saturday and the Sunday after it."""
    return DateRange(saturday, saturday + timedelta(days=1))


def _week_of(day: date) -> DateRange:
    monday = day - timedelta(days=day.weekday())
    return DateRange(monday, monday + timedelta(days=6))


def _number(text: str) -> int:
    text = " ".join(text.lower().split())
    return int(text) if text.isdigit() else _NUMBERS[text]


def _relative(match: re.Match[str], reference: date) -> DateRange | None:
    which = match["which"].lower()
    unit = match["unit"].lower()
    step = {"last": -1, "past": -1, "previous": -1, "this": 0, "next": 1}[which]
    if unit == "week":
        return _week_of(reference + timedelta(weeks=step))
    if unit == "weekend":
        saturday = _week_of(reference).start + timedelta(days=5 + 7 * step)
        return _weekend(saturday)
    if unit == "month":
        first = _add_months(reference.replace(day=1), step)
        return _month_range(first.year, first.month)
    if unit == "year":
        year = reference.year + step
        return DateRange(date(year, 1, 1), date(year, 12, 31))
    if unit in _SEASONS or unit == "winter":
        return _relative_season(unit, step, reference)
    weekday = _WEEKDAYS.index(unit)
    if step < 0:
        return _last_weekday(weekday, reference)
    if step > 0:
        ahead = (weekday - reference.weekday()) % 7 or 7
        d = reference + timedelta(days=ahead)
    else:
        d = reference + timedelta(days=weekday - reference.weekday())
    return DateRange(d, d)


def _season_in(name: str, year: int) -> DateRange:
    """The season `name` of `year`; winter is December of `year` to February."""
    if name == "winter":
        return DateRange(date(year, 12, 1), _month_range(year + 1, 2).end)
    return _season(name, year)


def _relative_season(name: str, step: int, reference: date) -> DateRange:
    """ "last summer": the latest one over before `reference`; "this summer": the
    one of the reference's year (the winter holding it, or the coming one);
    "next summer": the first one starting after `reference`."""
    if step < 0:
        year = reference.year
        while _season_in(name, year).end >= reference:
            year -= 1
        return _season_in(name, year)
    if step > 0:
        year = reference.year - 1
        while _season_in(name, year).start <= reference:
            year += 1
        return _season_in(name, year)
    if name == "winter" and reference.month <= 2:
        return _season_in(name, reference.year - 1)
    return _season_in(name, reference.year)


def _shift_alone(m: re.Match[str], reference: date) -> DateRange | None:
    """ "the week before" with no date after it: the days before (after) `reference`."""
    return _shifted(DateRange(reference, reference), m["unit"].lower(), 1, m["dir"].lower())


def _shifted(r: DateRange, unit: str, n: int, direction: str) -> DateRange | None:
    """The `n` days/weeks/months before `r` starts (after it ends); a weekend:
    the Saturday and Sunday before (after); a weekday: the last one before `r`
    starts (the first after it ends)."""
    before = not direction.startswith("after")
    if unit in _WEEKDAYS:
        weekday = _WEEKDAYS.index(unit)
        if before:
            d = r.start - timedelta(days=(r.start.weekday() - weekday) % 7 or 7)
        else:
            d = r.end + timedelta(days=(weekday - r.end.weekday()) % 7 or 7)
        return DateRange(d, d)
    if unit == "weekend":
        if before:  # a whole weekend before it: before a Sunday, the one a week back
            back = (r.start.weekday() - 5) % 7
            saturday = r.start - timedelta(days=back if back >= 2 else back + 7)
        else:
            saturday = r.end + timedelta(days=(5 - r.end.weekday()) % 7 or 7)
        return _weekend(saturday)
    if unit == "month":
        if before:
            return DateRange(_add_months(r.start, -n), r.start - timedelta(days=1))
        return DateRange(r.end + timedelta(days=1), _add_months(r.end, n))
    days = n * (7 if unit == "week" else 1)
    if before:
        return DateRange(r.start - timedelta(days=days), r.start - timedelta(days=1))
    return DateRange(r.end + timedelta(days=1), r.end + timedelta(days=days))


def _is_month(r: DateRange) -> bool:
    return (
        r.start.day == 1
        and r.start.replace(day=1) == r.end.replace(day=1)
        and (r.end + timedelta(days=1)).day == 1
    )


def _ordinal_of(r: DateRange, ordinal: int, unit: str) -> DateRange | None:
    """The first (second, …, last) week, weekend, weekday or day of the month or
    year `r`, or month of the year `r`: a week is days 1-7, 8-14, … (the last:
    the final 7 days); a weekend is a Saturday in `r` and the Sunday after it."""
    if unit == "month":
        if not _is_year(r):
            return None
        return _month_range(r.start.year, 12 if ordinal < 0 else ordinal)
    if unit == "day":
        d = r.end if ordinal < 0 else r.start + timedelta(days=ordinal - 1)
        return DateRange(d, d) if d <= r.end else None
    if unit == "week":
        if ordinal < 0:
            return DateRange(r.end - timedelta(days=6), r.end)
        start = r.start + timedelta(days=7 * (ordinal - 1))
        return DateRange(start, min(start + timedelta(days=6), r.end)) if start <= r.end else None
    weekday = 5 if unit == "weekend" else _WEEKDAYS.index(unit)
    if ordinal < 0:
        first = r.end - timedelta(days=(r.end.weekday() - weekday) % 7)
    else:
        first = r.start + timedelta(days=(weekday - r.start.weekday()) % 7 + 7 * (ordinal - 1))
    if first > r.end:
        return None
    end = first + timedelta(days=1) if unit == "weekend" else first
    return DateRange(first, end)


def _is_year(r: DateRange) -> bool:
    return r.start == date(r.start.year, 1, 1) and r.end == date(r.start.year, 12, 31)


def _part_of(r: DateRange, part: str) -> DateRange:
    """The beginning (days 1-10), middle (11-20) or end (21-last) of a month; of
    a year, its thirds: January-April, May-August, September-December."""
    if _is_year(r):
        year = r.start.year
        third = (
            0 if part in ("beginning", "start", "early") else 1 if part in ("middle", "mid") else 2
        )
        return DateRange(
            _month_range(year, 4 * third + 1).start, _month_range(year, 4 * third + 4).end
        )
    if part in ("beginning", "start", "early"):
        return DateRange(r.start, r.start + timedelta(days=9))
    if part in ("middle", "mid"):
        return DateRange(r.start + timedelta(days=10), r.start + timedelta(days=19))
    return DateRange(r.start + timedelta(days=20), r.end)


def _modified(text: str, start: int, r: DateRange, reference: date) -> tuple[int, DateRange]:
    """Apply the modifiers written right before a date (`text[:start]`), the
    nearest first: "as of the end of October 2023" is the end of October, as
    of then; "since the week before 16 November" is from that week on. The new
    start of the span and the range."""
    while True:
        before = text[:start]
        m = _AS_OF.search(before)
        if m and not r.open:
            start, r = m.start(), DateRange(r.start, r.end, as_of=True)
            continue
        if r.open:
            return start, r
        m = _SHIFT.search(before)
        if m:
            unit = (m["unit"] or m["units"]).lower()
            n = _number(m["n"]) if m["n"] else 1
            got = _shifted(r, unit, n, m["dir"].lower())
            if got is not None:
                start, r = m.start(), got
                continue
        m = _ORDINAL_OF.search(before)
        if m and (_is_month(r) or _is_year(r)):
            got = _ordinal_of(r, _ORDINALS[m["ord"].lower()], m["unit"].lower())
            if got is not None:
                start, r = m.start(), got
                continue
        m = _PART_OF.search(before)
        if m and (_is_month(r) or _is_year(r)):
            start, r = m.start(), _part_of(r, (m["part"] or m["early"]).lower())
            continue
        m = _HALF_OF.search(before)
        if m and (_is_month(r) or _is_year(r)):
            start, r = m.start(), _half_of(r, m["half"].lower() in ("first", "1st"))
            continue
        m = _WEEK_OF.search(before)
        if m and r.start == r.end:
            start, r = m.start(), _week_around(r.start, m["unit"].lower())
            continue
        m = _OPEN.search(before)
        if m:
            return m.start(), _opened(r, m["w"].lower(), reference)
        return start, r


def _opened(r: DateRange, word: str, reference: date) -> DateRange:
    """`r` after "by", "before", "since" or "after" (see `_OPEN`)."""
    if word == "by":
        return DateRange(r.start, r.end, as_of=True)
    if word == "before":
        day = r.start - timedelta(days=1)
        return DateRange(day, day, as_of=True)
    first = r.start if word == "since" else r.end + timedelta(days=1)
    return DateRange(first, max(first, reference), since=True)


def _half_of(r: DateRange, first: bool) -> DateRange:
    """The first or second half of a year (January-June, July-December) or of a
    month (days 1-15, 16-last)."""
    if _is_year(r):
        year = r.start.year
        if first:
            return DateRange(date(year, 1, 1), date(year, 6, 30))
        return DateRange(date(year, 7, 1), date(year, 12, 31))
    middle = r.start + timedelta(days=14)
    return DateRange(r.start, middle) if first else DateRange(middle + timedelta(days=1), r.end)


def _week_around(day: date, unit: str) -> DateRange:
    """ "the week of <day>": its Monday-Sunday week; "the weekend of <day>": the
    Saturday and Sunday nearest it (its own when it is one; a Friday's next)."""
    if unit == "week":
        return _week_of(day)
    back = (day.weekday() - 5) % 7  # days since the last Saturday (0 on Saturday)
    saturday = day - timedelta(days=back) if back <= 3 else day + timedelta(days=7 - back)
    return _weekend(saturday)


def _ago(match: re.Match[str], reference: date) -> DateRange | None:
    return _units_back(_number(match["n"]), match["unit"].lower(), reference)


def _units_back(n: int, unit: str, reference: date) -> DateRange:
    """The day, calendar week, weekend, month or year `n` of them before
    `reference`'s ("two weeks ago", "the week before last")."""
    if unit == "day":
        d = reference - timedelta(days=n)
        return DateRange(d, d)
    if unit == "week":
        return _week_of(reference - timedelta(weeks=n))
    if unit == "weekend":
        # "two weekends ago": the Saturday and Sunday n weekends back, the last
        # weekend counting as one
        saturday = _week_of(reference).start + timedelta(days=5 - 7 * n)
        return _weekend(saturday)
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
    """ "summer 2021": June-August 2021; "winter 2022": the winter whose January
    is in 2022 (December 2021 to February 2022, as seasonal records label it)."""
    name, year = m["s"].lower(), int(m["y"])
    if name == "winter":
        return _season_in(name, year - 1)
    return _season(name, year)


def _season_alone(m: re.Match[str], reference: date) -> DateRange | None:
    """ "in the summer": the latest summer begun by `reference` (this one while
    it lasts)."""
    name = m["s"].lower()
    year = reference.year
    while _season_in(name, year).start > reference:
        year -= 1
    return _season_in(name, year)


def _month_short_year(m: re.Match[str], reference: date) -> DateRange | None:
    """ "May '23": May of the year ending in 23 nearest `reference`."""
    yy = int(m["yy"])
    century = reference.year - reference.year % 100
    year = min(
        (c + yy for c in (century - 100, century, century + 100)),
        key=lambda y: abs(y - reference.year),
    )
    return _month_range(year, _month(m["m"]))


def _on_the_day(m: re.Match[str], reference: date) -> DateRange | None:
    """ "on the 15th": the latest 15th not after `reference` (this month's or an
    earlier month's; None past the 31st)."""
    day = int(m["d"])
    if not 1 <= day <= 31:
        return None
    first = reference.replace(day=1)
    for back in range(12):
        month = _add_months(first, -back)
        got = _day(month.year, month.month, day)
        if got is not None and got.end <= reference:
            return got
    return None


def _dot_day(m: re.Match[str], _ref: date) -> DateRange | None:
    a, b = int(m["a"]), int(m["b"])
    day, month = (b, a) if b > 12 else (a, b)
    return _day(int(m["y"]), month, day)


def _past_n(m: re.Match[str], reference: date) -> DateRange | None:
    """ "the past two weeks": from two weeks before `reference` up to it ("the
    past month", no number: one)."""
    n = _number(m["n"]) if m.groupdict().get("n") else 1
    unit = m["unit"].lower()
    if unit == "month":
        start = _add_months(reference, -n)
    elif unit == "year":
        start = _add_months(reference, -12 * n)
    else:
        start = reference - timedelta(days=n * (7 if unit == "week" else 1))
    return DateRange(start, reference)


def _single_day(m: re.Match[str], reference: date) -> DateRange | None:
    word = " ".join(m["w"].lower().split())
    offset = -1 if word in ("yesterday", "last night") else 1 if word == "tomorrow" else 0
    d = reference + timedelta(days=offset)
    return DateRange(d, d)


def _bare_weekday(m: re.Match[str], reference: date) -> DateRange | None:
    """ "on Friday": the last Friday before `reference` (a question about what
    was said asks about the past; "this Friday" and "next Friday" are other forms)."""
    return _last_weekday(_WEEKDAYS.index((m["a"] or m["b"]).lower()), reference)


def _last_weekday(weekday: int, reference: date) -> DateRange:
    """The last `weekday` (Monday 0) before `reference` (a week back on that day)."""
    d = reference - timedelta(days=(reference.weekday() - weekday) % 7 or 7)
    return DateRange(d, d)


def _nth_weekday(year: int, month: int, weekday: int, n: int) -> date:
    """The `n`-th (`-1`: last) `weekday` (Monday 0) of a month."""
    if n < 0:
        last = date(year, month, calendar.monthrange(year, month)[1])
        return last - timedelta(days=(last.weekday() - weekday) % 7)
    first = date(year, month, 1)
    return first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))


def _easter(year: int) -> date:
    """Easter Sunday of a Gregorian year (the anonymous Gregorian algorithm)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = divmod(b, 4)
    f = (b + 8) // 25
    g = (b - f + 1) // 3
    h = (19 * a + b - d - g + 15) % 30
    i, k = divmod(c, 4)
    el = (32 + 2 * e + 2 * i - h - k) % 7
    m = (a + 11 * h + 22 * el) // 451
    month, day = divmod(h + el - 7 * m + 114, 31)
    return date(year, month, day + 1)


def _holiday_key(text: str) -> str:
    """ "New Year's Eve" -> "new year eve", "St. Patrick's Day" -> "st patrick day"."""
    words = re.sub(r"['\u2019]s?\b|\.", "", text.lower()).split()
    plain = {"labour": "labor", "valentines": "valentine", "mothers": "mother"}
    plain |= {"fathers": "father", "patricks": "patrick", "years": "year"}
    return " ".join(plain.get(w, w) for w in words)


def _holiday_in(key: str, year: int) -> date:
    rule = _HOLIDAYS[key]
    return rule(year) if callable(rule) else date(year, *rule)


def _holiday(m: re.Match[str], reference: date) -> DateRange | None:
    """A holiday: of the year named, else the latest one not after `reference`;
    "<holiday> weekend": the holiday and the weekend nearest it ("Labor Day
    weekend": Saturday to Monday; "Thanksgiving weekend": Thursday to Sunday)."""
    key = _holiday_key(m["h"])
    if key not in _HOLIDAYS:
        return None
    day: date | None = None
    if m["y"]:
        day = _holiday_in(key, int(m["y"]))
    else:
        for year in range(reference.year, reference.year - 2, -1):
            d = _holiday_in(key, year)
            if d <= reference:
                day = d
                break
    if day is None:
        return None
    if m["weekend"]:
        weekend = _week_around(day, "weekend")
        return DateRange(min(day, weekend.start), max(day, weekend.end))
    return DateRange(day, day)


def _over_weekend(_m: re.Match[str], reference: date) -> DateRange | None:
    saturday = reference - timedelta(days=(reference.weekday() - 5) % 7)
    return _weekend(saturday)


def _part_of_year(m: re.Match[str], _ref: date) -> DateRange | None:
    return _part_of(_year(int(m["y"])), m["part"].lower())


def _us_day(m: re.Match[str], _ref: date) -> DateRange | None:
    a, b = int(m["a"]), int(m["b"])
    month, day = (b, a) if a > 12 else (a, b)
    return _day(int(m["y"]), month, day)


def _day_span(m: re.Match[str], reference: date) -> DateRange | None:
    """Days `d` to `d2` of a month (of the year named, else the latest such span
    not after `reference`); None when the second day is before the first."""
    first, last = int(m["d"]), int(m["d2"])
    if last <= first:
        return None
    month = _month(m["m"])
    if m["y"]:
        start, end = _day(int(m["y"]), month, first), _day(int(m["y"]), month, last)
        return None if start is None or end is None else DateRange(start.start, end.end)
    # the latest year the whole span exists in ("February 26-29": a leap year's)
    for year in range(reference.year, reference.year - 9, -1):
        start, end = _day(year, month, first), _day(year, month, last)
        if start is not None and end is not None and start.start <= reference:
            return DateRange(start.start, end.end)
    return None


def _month_span(m: re.Match[str], _ref: date) -> DateRange | None:
    year, first, last = int(m["y"]), _month(m["m"]), _month(m["m2"])
    if first == last:
        return None
    start = _month_range(year - 1 if first > last else year, first)
    return DateRange(start.start, _month_range(year, last).end)


def _quarter(m: re.Match[str], _ref: date) -> DateRange | None:
    n = int(m["n"]) if m["n"] else _ORDINALS[m["q"].lower()]
    quarter = 4 if n < 0 else n
    year = int(m["y"])
    return DateRange(_month_range(year, 3 * quarter - 2).start, _month_range(year, 3 * quarter).end)


def _month_of_year_word(m: re.Match[str], reference: date) -> DateRange | None:
    step = {"last": -1, "this": 0, "next": 1}[m["which"].lower()]
    return _month_range(reference.year + step, _month(m["m"]))


def _which_month(m: re.Match[str], reference: date) -> DateRange | None:
    """ "last May": the latest May before the reference's month (May a year back
    when asked in May); "next May" the first after it; "this May" the reference
    year's. "the last may be …" is no month: an ambiguous name must be capitalised."""
    if _ambiguous_month(m["m"]) and not m["m"][0].isupper():
        return None
    month = _month(m["m"])
    which = m["which"].lower()
    if which == "this":
        return _month_range(reference.year, month)
    if which == "next":
        return _month_range(reference.year + (month <= reference.month), month)
    return _month_range(reference.year - (month >= reference.month), month)


def _before_last(m: re.Match[str], reference: date) -> DateRange | None:
    return _units_back(2, m["unit"].lower(), reference)


def _month_alone(m: re.Match[str], reference: date) -> DateRange | None:
    return _latest_month(_month(m["m"]), reference)


def _year_alone(m: re.Match[str], _ref: date) -> DateRange | None:
    return _year(int(m["y"]))


# most specific forms first: `parse_dates` skips a span an earlier form took
_FORMS: tuple[tuple[re.Pattern[str], _Build], ...] = (
    (_ISO_DAY, _iso_day),
    (_US_DAY, _us_day),
    (_ISO_MONTH, _iso_month),
    (_HOLIDAY, _holiday),
    (_PART_YEAR, _part_of_year),
    (_QUARTER, _quarter),
    (_MONTHS_YEAR, _month_span),
    (_DAYS_MONTH, _day_span),
    (_MONTH_DAYS, _day_span),
    (_DAY_MONTH, _named_day),
    (_MONTH_DAY, _named_day),
    (_MONTH_YEAR, _month_of_year),
    (_MONTH_OF_YEAR_WORD, _month_of_year_word),
    (_WHICH_MONTH, _which_month),
    (_BEFORE_LAST, _before_last),
    (_THE_PAST, _past_n),
    (_SEASON_YEAR, _season_of_year),
    (_MONTH_SHORT_YEAR, _month_short_year),
    (_DOT_DAY, _dot_day),
    (_AGO, _ago),
    (_PAST_N, _past_n),
    (_LAST_NEXT, _relative),
    (_BARE_WEEKDAY, _bare_weekday),
    (_SHIFT_ALONE, _shift_alone),
    (_OVER_WEEKEND, _over_weekend),
    (_SINGLE_DAY, _single_day),
    (_SEASON_ALONE, _season_alone),
    (_ON_THE_DAY, _on_the_day),
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
    """Whether a month name with no day or year is a date: an unambiguous one
    always; "May", "March" and short names after a time word ("in May"), or,
    capitalised, in a list with another month ("June, May or July 2023")."""
    if not _ambiguous_month(m["m"]) or _preceded_by_time_word(text, m.start()):
        return True
    return m["m"][0].isupper() and bool(
        _LISTED_AFTER_MONTH.search(text, 0, m.start()) or _LISTED_BEFORE_MONTH.match(text, m.end())
    )


def _ambiguous_month(name: str) -> bool:
    """Whether a month name is also a common word or abbreviation ("may", "mar")."""
    name = name.lower().rstrip(".")
    return name in _AMBIGUOUS_MONTHS or len(name) == 3


#: what joins two dates of a list ("June, July", "June or July 2023")
_JOIN = r",?\s*(?:or|and|,|/)\s*"
#: a month name and what joins it to the next in a list ("June, ", "June or ")
_LISTED_AFTER_MONTH = re.compile(r"(?<!\w)" + _M.format(name="prev") + _JOIN + "$", re.I)
#: what joins a month to the next one in a list, and that month (" or July")
_LISTED_BEFORE_MONTH = re.compile(_JOIN + _M.format(name="next") + r"(?!\w)", re.I)


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
    return tuple(dict.fromkeys(r for _, r in date_spans(text, reference)))


#: the longest range a question's absolute date may be to anchor its relative ones
MAX_ANCHOR_DAYS = 31


def question_spans(text: str, reference: date) -> list[tuple[tuple[int, int], DateRange]]:
    """`date_spans` of a question about what was said: when it names an absolute
    date of at most `MAX_ANCHOR_DAYS` days ("as mentioned on November 6, 2023")
    and relative ones ("last week"), the relative ones resolve against that
    date's last day (the last such date written), the time the question is about,
    not against `reference` (when it is asked). A range is relative when it
    changes with the reference."""
    if isinstance(reference, datetime):
        reference = reference.date()
    spans = date_spans(text, reference)
    if len(spans) < 2:
        return spans
    try:
        other = reference - timedelta(days=800)
    except OverflowError:
        other = reference + timedelta(days=800)
    elsewhere = dict(date_spans(text, other))
    absolute = [
        r
        for span, r in spans
        if elsewhere.get(span) == r and (r.end - r.start).days < MAX_ANCHOR_DAYS
    ]
    if not absolute or all(elsewhere.get(span) == r for span, r in spans):
        return spans
    anchored = dict(date_spans(text, absolute[-1].end))
    return [(span, r if elsewhere.get(span) == r else anchored.get(span, r)) for span, r in spans]


def date_spans(text: str, reference: date) -> list[tuple[tuple[int, int], DateRange]]:
    """`parse_dates` with where each range is written: `((start, end), range)` in
    text order, the span including its modifiers ("as of", "the week before")."""
    if isinstance(reference, datetime):
        reference = reference.date()
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, int, DateRange]] = []
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
            found.append((start, end, got))
    # the modifiers written before a date ("the week before", "as of") join it;
    # a date inside another's modifier ("the week before" standing for the
    # reference's week) is that modifier's, not a date of its own
    joined: list[tuple[int, int, DateRange]] = []
    for start, end, got in found:
        try:
            new_start, got = _modified(text, start, got, reference)
        except (ValueError, OverflowError, KeyError):
            new_start = start
        joined.append((new_start, end, got))
    kept = [
        (start, end, got)
        for i, (start, end, got) in enumerate(joined)
        if not any(j != i and s <= start and end <= e for j, (s, e, _) in enumerate(joined))
    ]
    kept.sort(key=lambda item: item[0])
    return [((start, end), r) for start, end, r in _between(text, _shared_years(text, kept))]


_BETWEEN = re.compile(r"(?<!\w)(?:between|from)\s+$", re.I)
# a year written in a date's own words (else it took the reference's)
_WRITTEN_YEAR = re.compile(r"\d{4}")
_AND = re.compile(r",?\s*(?:and|to|until|till|-|\u2013)\s*", re.I)


def _between(
    text: str, found: list[tuple[int, int, DateRange]]
) -> list[tuple[int, int, DateRange]]:
    """ "between August 11 and August 15 2023", "from May 1 to May 9": one range
    from the first date's start to the second's end (when that is not earlier).
    A first date written without a year takes the second's year (or the year
    before, "between December 30 and January 2 2020"), not the reference's; so
    does a month or day joined to a dated one by "or", "and" or a comma ("in
    June or July 2023": June 2023), the two kept apart."""
    out: list[tuple[int, int, DateRange]] = []
    i = 0
    while i < len(found):
        start, end, r = found[i]
        if i + 1 < len(found) and not r.open:
            m = _BETWEEN.search(text[:start])
            nxt_start, nxt_end, nxt = found[i + 1]
            if m and _AND.fullmatch(text[end:nxt_start]) and not nxt.open:
                if _WRITTEN_YEAR.search(text[start:end]) is None:
                    r = _in_year_before(r, nxt)
                if nxt.end >= r.start:
                    out.append((m.start(), nxt_end, DateRange(r.start, nxt.end)))
                    i += 2
                    continue
        out.append((start, end, r))
        i += 1
    return out


def _shared_years(
    text: str, found: list[tuple[int, int, DateRange]]
) -> list[tuple[int, int, DateRange]]:
    """A month or day written without a year, joined by "or", "and" or a comma to
    one that has a year (written, or taken this way), takes that year: "in June,
    July or August 2023" is of 2023 throughout."""
    out = list(found)
    dated = [_WRITTEN_YEAR.search(text[s:e]) is not None for s, e, _ in found]
    for i in range(len(out) - 2, -1, -1):
        start, end, r = out[i]
        nxt_start, _, nxt = out[i + 1]
        if (
            not dated[i]
            and dated[i + 1]
            and not r.open
            and not nxt.open
            and _MONTH_ALONE.search(text[start:end])
            and _OR.fullmatch(text[end:nxt_start])
        ):
            out[i] = (start, end, _in_year_of(r, nxt))
            dated[i] = True
    return out


#: what joins two dates of which the first takes the second's year: "in June or
#: July 2023", "on May 3 and May 5, 2023"
_OR = re.compile(_JOIN, re.I)


def _in_year_of(r: DateRange, nxt: DateRange) -> DateRange:
    """`r` (a month or day written without a year) in the year `nxt` starts in;
    `r` itself when that day does not exist (29 February)."""
    return _moved(r, nxt.start.year - r.start.year) or r


def _in_year_before(r: DateRange, nxt: DateRange) -> DateRange:
    """`r` (a range written without a year) moved to the latest year in which it
    ends before `nxt` starts: `nxt`'s year or the one before; `r` itself when
    neither fits."""
    years = [nxt.start.year]
    if r.start.month > nxt.start.month:  # "December 30 to January 2": across New Year
        years.append(nxt.start.year - 1)
    for year in years:
        moved = _moved(r, year - r.end.year)
        if moved is not None and moved.end <= nxt.start:
            return moved
    return r


def _moved(r: DateRange, years: int) -> DateRange | None:
    """`r` `years` years later (earlier when negative): a whole month stays the
    whole month (February's last day depends on the year); None when a day of
    it does not exist then (29 February) or the year is out of range."""
    try:
        if _is_month(r):
            return _month_range(r.start.year + years, r.start.month)
        return DateRange(
            r.start.replace(year=r.start.year + years), r.end.replace(year=r.end.year + years)
        )
    except ValueError:
        return None


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
    further away on either side; the best range counts. 0 without ranges. An
    `as_of` range: 0 after its end; up to it, from 1 on its last day down towards
    0.5 (the excess halving every half-life back): the latest state counts most.
    A `since` range, mirrored: 0 before its start; from it on, from 1 down
    towards 0.5 (the excess halving every half-life on): all of it counts, the
    soonest most."""
    best = 0.0
    for r in ranges:
        if r.since:
            if day >= r.start:
                on = (day - r.start).days
                best = max(best, 0.5 + 0.5 * float(0.5 ** (on / half_life_days)))
            continue
        if r.as_of:
            # a state as of then: nothing said after counts; up to its end, the
            # later the better (never below half)
            if day <= r.end:
                back = (r.end - day).days
                best = max(best, 0.5 + 0.5 * float(0.5 ** (back / half_life_days)))
            continue
        if day < r.start:
            distance = float((r.start - day).days)
        else:
            after = (day - r.end).days
            if after <= grace_days:
                return 1.0
            distance = after - grace_days
        best = max(best, float(0.5 ** (distance / half_life_days)))
    return best


#: the longest range a turn's own words may give as its event time: "last week",
#: "last month" say when something happened; "this year" or "in 2022" hardly do
MAX_MENTION_DAYS = 31


def mentioned_dates(text: str, at: datetime | date) -> tuple[DateRange, ...]:
    """The times a record's own words say its events happened, resolved against
    when it was said (`at`): "I went camping last weekend" said on 17 July 2023
    happened on 8-9 July. Only ranges of at most `MAX_MENTION_DAYS` days count (a
    year says little about when), "as of" is dropped (it reads as the date it
    names), and the day `at` itself ("today") is left out: it is the record's time
    already. Never raises."""
    day = at.date() if isinstance(at, datetime) else at
    out: dict[DateRange, None] = {}
    for r in parse_dates(text, day):
        if (r.end - r.start).days + 1 > MAX_MENTION_DAYS or r.start == r.end == day:
            continue
        out[DateRange(r.start, r.end)] = None
    return tuple(out)


def format_ranges(ranges: Iterable[DateRange]) -> str:
    """Ranges as ISO 8601 intervals separated by spaces (`"2023-07-08/2023-07-09"`),
    the form `parse_ranges` reads back (a record attribute)."""
    return " ".join(f"{r.start.isoformat()}/{r.end.isoformat()}" for r in ranges)


def parse_ranges(text: object) -> tuple[DateRange, ...]:
    """What `format_ranges` wrote; anything it cannot read (another type, a bad
    interval) is skipped, never raised."""
    if not isinstance(text, str):
        return ()
    out: list[DateRange] = []
    for part in text.split():
        first, _, last = part.partition("/")
        try:
            out.append(DateRange(date.fromisoformat(first), date.fromisoformat(last or first)))
        except ValueError:
            continue
    return tuple(out)


def mention_match(
    mentioned: Sequence[DateRange], ranges: Sequence[DateRange], *, half_life_days: float
) -> float:
    """How well the times a record mentions (`mentioned_dates`) fit the ranges a
    question names, in [0, 1]: for each mentioned range, the mean over its days
    of 1 inside a named range and `0.5 ** (distance / half_life_days)` outside
    (the event is equally likely on any of its days: "last week" inside "in May"
    is 1, half of it inside "on May 3"-week less); the best pair counts. "As of"
    ranges ask for a state, not an event: they are not matched here; a `since`
    range holds every day from its start on."""
    best = 0.0
    named = [DateRange(r.start, date.max) if r.since else r for r in ranges if not r.as_of]
    for m in mentioned:
        days = (m.end - m.start).days + 1
        if days > MAX_MENTION_DAYS:
            continue
        for r in named:
            total = 0.0
            for i in range(days):
                d = m.start + timedelta(days=i)
                if d < r.start:
                    total += 0.5 ** ((r.start - d).days / half_life_days)
                elif d > r.end:
                    total += 0.5 ** ((d - r.end).days / half_life_days)
                else:
                    total += 1.0
            best = max(best, total / days)
    return best

"""The budgeting engine shared by every view.

A view is a frame (opening tag, preamble lines, closing tag and whatever
follows it) plus sections in fixed priority order. The engine reserves the
frame and every section's header (its counts reserved at the width of the
number of records given, so the final header never grows past its
reservation), then admits records greedily: section by section, record by
record in the order given. A record that does not fit whole may be shortened
to fit when its section allows it; otherwise it is omitted and the next one
is tried. Remaining room only shrinks, so a record kept in a lower-priority
section never took room that an omitted higher-priority record could have used.

A record whose key was already seen anywhere in the view (admitted or not) is
a duplicate: counted, never shown twice. A section with a `lookahead` stops
reading that many records after its first omission: the rest count as
omitted, unread (so never seen, for duplicates). When not even the frame fits, the
view has no text and the outcome is `budget_too_small`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from attrs import Factory, define, field, frozen

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.views.encoding import utf8_size
from agent_memory.domain.views.report import (
    FORMAT_VERSION,
    EventFormat,
    RenderedView,
    SectionReport,
    ViewOutcome,
    ViewReport,
)

__all__ = ["Line", "SectionSpec", "layout", "require_budget", "require_sequence"]

T = TypeVar("T")


@frozen
class Line:
    """One rendered record line (no newline)."""

    text: str
    shortened: bool = False
    entities_omitted: bool = False
    #: Bytes this line takes in a view, its newline included.
    cost: int = field(
        init=False, default=Factory(lambda line: utf8_size(line.text) + 1, takes_self=True)
    )


@define
class SectionSpec(Generic[T]):
    """One section: its records in priority order and how to render them.

    `fit(record, max_bytes)` returns a shortened line of at most `max_bytes`
    bytes (newline excluded), or None when the record cannot be shortened that
    far. `floor(record)` is a cheap lower bound of the record's cost, used to
    skip rendering when the remaining room cannot hold it. `limit` caps the
    number of records admitted. `check(record)` validates each record read.
    With `lookahead` set, once a record of the section has been omitted at
    most `lookahead` more are read: the rest count as omitted, unread (never
    checked, rendered or recorded as seen for duplicates).
    """

    name: str
    records: Sequence[T]
    key: Callable[[T], Hashable]
    render: Callable[[T], Line]
    fit: Callable[[T, int], Line | None] | None = None
    floor: Callable[[T], int] | None = None
    title: str = ""
    preamble: tuple[str, ...] = ()
    limit: int | None = None
    counts_entities: bool = False
    show_when_empty: bool = False
    check: Callable[[T], None] | None = None
    lookahead: int | None = None

    @property
    def shown(self) -> bool:
        return bool(self.records) or self.show_when_empty

    def header(self, admitted: int, omitted: int, shortened: int, dups: int, ents: int) -> str:
        title = self.title or self.name
        text = (
            f"## {title}: admitted={admitted} omitted={omitted} "
            f"shortened={shortened} duplicates={dups}"
        )
        if self.counts_entities:
            text += f" entities_omitted={ents}"
        return text


def require_budget(budget_bytes: object) -> int:
    if not isinstance(budget_bytes, int) or isinstance(budget_bytes, bool) or budget_bytes < 0:
        raise InvalidInput(
            "budget_bytes", f"a non-negative integer is required, got {budget_bytes!r}"
        )
    return budget_bytes


def require_sequence(value: object, kind: type, name: str) -> Sequence[Any]:
    """`value` as a sequence of `kind` values' container, or `InvalidInput`
    naming `name`: one bare value (or None, or a string) is not a sequence of them."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return value
    got = f"one {kind.__name__}" if isinstance(value, kind) else type(value).__name__
    raise InvalidInput(
        name, f"a sequence of {kind.__name__} is required (a list or tuple), got {got}"
    )


def _lines_size(lines: Sequence[str]) -> int:
    return sum(utf8_size(line) for line in lines) + max(len(lines) - 1, 0)


@define
class _Tally:
    admitted: list[Line]
    omitted: int = 0
    duplicates: int = 0


def layout(
    *,
    view: str,
    head: Sequence[str],
    sections: Sequence[SectionSpec[Any]],
    tail: Sequence[str],
    budget_bytes: int,
    event_format: EventFormat | None = None,
) -> RenderedView:
    """Fit `sections` between `head` and `tail` lines within `budget_bytes` (see module doc)."""
    require_budget(budget_bytes)
    frame: list[str] = list(head)
    for spec in sections:
        if spec.shown:
            n = len(spec.records)
            frame.append(spec.header(n, n, n, n, n))
            frame.extend(spec.preamble)
    frame.extend(tail)
    remaining = budget_bytes - _lines_size(frame)
    too_small = remaining < 0

    seen: set[Hashable] = set()
    tallies: list[_Tally] = []
    for spec in sections:
        tally = _Tally(admitted=[])
        tallies.append(tally)
        given = len(spec.records)
        horizon = given  # records read: all, unless the lookahead ends it
        read = 0
        for record in spec.records:
            if read >= horizon:
                tally.omitted += given - read
                break
            read += 1
            if spec.check is not None:
                spec.check(record)
            key = spec.key(record)
            if key in seen:
                tally.duplicates += 1
                continue
            seen.add(key)
            if (
                too_small
                or (spec.limit is not None and len(tally.admitted) >= spec.limit)
                or (spec.floor is not None and spec.floor(record) > remaining)
            ):
                line = None
            else:
                line = spec.render(record)
                if line.cost > remaining:
                    line = spec.fit(record, remaining - 1) if spec.fit is not None else None
            if line is None or line.cost > remaining:
                tally.omitted += 1
                if spec.lookahead is not None:
                    horizon = min(horizon, read + spec.lookahead)
                continue
            tally.admitted.append(line)
            remaining -= line.cost

    reports = tuple(
        SectionReport(
            name=spec.name,
            given=len(spec.records),
            admitted=len(t.admitted),
            omitted=t.omitted,
            shortened=sum(1 for line in t.admitted if line.shortened),
            duplicates=t.duplicates,
            entities_omitted=sum(1 for line in t.admitted if line.entities_omitted),
        )
        for spec, t in zip(sections, tallies, strict=True)
    )
    if too_small:
        outcome = ViewOutcome.BUDGET_TOO_SMALL
        text = ""
    else:
        trimmed = any(r.omitted or r.shortened for r in reports)
        outcome = ViewOutcome.TRIMMED if trimmed else ViewOutcome.COMPLETE
        out: list[str] = list(head)
        for spec, t, rep in zip(sections, tallies, reports, strict=True):
            if spec.shown:
                out.append(
                    spec.header(
                        rep.admitted,
                        rep.omitted,
                        rep.shortened,
                        rep.duplicates,
                        rep.entities_omitted,
                    )
                )
                out.extend(spec.preamble)
                out.extend(line.text for line in t.admitted)
        out.extend(tail)
        text = "\n".join(out)
    used = utf8_size(text)
    if used > budget_bytes:  # pragma: no cover - guarded by the reservation above
        raise AssertionError(f"{view}: {used} bytes exceed the budget of {budget_bytes}")
    return RenderedView(
        text=text,
        report=ViewReport(
            view=view,
            format_version=FORMAT_VERSION,
            event_format=event_format,
            budget_bytes=budget_bytes,
            bytes_used=used,
            outcome=outcome,
            sections=reports,
        ),
    )

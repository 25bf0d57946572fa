"""The view report: what a rendered view admitted, left out and why."""

from __future__ import annotations

import enum

from attrs import frozen

__all__ = [
    "FORMAT_VERSION",
    "EventFormat",
    "RenderedView",
    "SectionReport",
    "ViewOutcome",
    "ViewReport",
]

#: Bumped whenever the rendered text changes shape.
FORMAT_VERSION = 3


class EventFormat(enum.StrEnum):
    """How events render: positional tuples after a legend, or named-field JSON."""

    TUPLE = "tuple"
    NAMED = "named"


class ViewOutcome(enum.StrEnum):
    COMPLETE = "complete"  # every record given is shown whole (duplicates shown once)
    TRIMMED = "trimmed"  # something was left out or shortened
    BUDGET_TOO_SMALL = "budget_too_small"  # not even the frame fits: no text


@frozen
class SectionReport:
    """Per-section counts. `admitted + omitted + duplicates == given` always;
    `shortened` counts admitted records whose text was cut; `entities_omitted`
    counts admitted events whose entity list was left out as the shared one."""

    name: str
    given: int
    admitted: int
    omitted: int
    shortened: int
    duplicates: int
    entities_omitted: int = 0


@frozen
class ViewReport:
    """What a view did with its budget, for logs, metrics and tests."""

    view: str
    format_version: int
    event_format: EventFormat | None
    budget_bytes: int
    bytes_used: int
    outcome: ViewOutcome
    sections: tuple[SectionReport, ...]

    def section(self, name: str) -> SectionReport:
        """The report of section `name` (KeyError when the view has no such section)."""
        for section in self.sections:
            if section.name == name:
                return section
        raise KeyError(name)


@frozen
class RenderedView:
    """The view's text (empty when the budget was too small) and its report."""

    text: str
    report: ViewReport

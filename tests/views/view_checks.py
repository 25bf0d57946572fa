"""Helpers for the view tests: parse rendered views back into sections and records."""

from __future__ import annotations

import json
import os
import re
import unicodedata
from typing import Any

import attrs
from hypothesis import settings

from agent_memory.domain.views import ELLIPSIS, ViewReport
from agent_memory.domain.views.agent_memory_view import KNOWLEDGE_HEADING
from agent_memory.domain.views.graphemes import cluster_ends

#: The README test command sets HYPOTHESIS_PROFILE=ci: every property then runs 1,000 examples.
PROPERTY = settings(max_examples=1000 if os.environ.get("HYPOTHESIS_PROFILE") == "ci" else 150)

COUNT_FIELDS = ("admitted", "omitted", "shortened", "duplicates")


@attrs.define
class ParsedSection:
    header: str
    counts: dict[str, int]
    preamble: list[str]
    records: list[str]


def parse_view(text: str, open_tag: str, close_tag: str) -> tuple[list[str], list[ParsedSection]]:
    """Split a view into its head lines and sections; fail on anything unexpected."""
    lines = text.split("\n")
    assert text.splitlines() == lines, "stored text produced an extra line break"
    assert lines[0] == open_tag
    end = lines.index(close_tag)
    head: list[str] = []
    sections: list[ParsedSection] = []
    for line in lines[1:end]:
        if line.startswith("## "):
            title, _, counts = line[3:].rpartition(": ")
            pairs = dict(item.split("=") for item in counts.split(" "))
            sections.append(ParsedSection(title, {k: int(v) for k, v in pairs.items()}, [], []))
        elif line.startswith(("[", "{", "- ")):
            assert sections, f"record before any section: {line!r}"
            sections[-1].records.append(line)
        elif sections:
            assert not sections[-1].records, f"metadata after records: {line!r}"
            sections[-1].preamble.append(line)
        else:
            head.append(line)
    return head, sections


def section_name(header: str) -> str:
    """The report name of a section from its header title ("entity_history entity=..."
    is `entity_history`, the knowledge heading is `knowledge`)."""
    if header == KNOWLEDGE_HEADING:
        return "knowledge"
    return header.split(" ")[0].lower()


def check_counts(report: ViewReport, sections: list[ParsedSection]) -> None:
    """Header counts match the report; admitted + omitted + duplicates == given."""
    shown = [s for s in report.sections if s.given]
    assert len(shown) <= len(sections)
    by_title = {section_name(p.header): p for p in sections}
    for rep in report.sections:
        assert rep.admitted + rep.omitted + rep.duplicates == rep.given, rep
        assert rep.shortened <= rep.admitted, rep
        assert rep.entities_omitted <= rep.admitted, rep
        parsed = by_title.get(rep.name.lower())
        if parsed is None:
            assert rep.given == 0, rep
            continue
        for name in COUNT_FIELDS:
            assert parsed.counts[name] == getattr(rep, name), (name, parsed.header, rep)
        assert len(parsed.records) == rep.admitted, (parsed.records, rep)


def record_json(line: str) -> Any:
    return json.loads(line)


_TAG = re.compile(r"<[^<>]*>")


def check_normalised(text: str, own_tags: list[str]) -> None:
    """Under NFKC and NFKD the view keeps exactly its own tags and its lines:
    no look-alike in stored text normalises into view syntax."""
    assert _TAG.findall(text) == own_tags
    lines = text.split("\n")
    for form in ("NFKC", "NFKD"):
        normal = unicodedata.normalize(form, text)
        assert _TAG.findall(normal) == own_tags, form
        assert normal.count("<") == text.count("<"), form
        assert normal.count(">") == text.count(">"), form
        assert normal.split("\n") == normal.splitlines(), form
        assert len(normal.split("\n")) == len(lines), form


def as_json_reads(text: str) -> str:
    """`text` as a JSON parser reads its encoding back (a surrogate pair is one character)."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def shows_prefix_or_ellipsis(original: str, shown: str, shortened: bool) -> bool:
    """A whole value is shown exactly; a shortened one is never empty: it is a
    prefix of `original` ending between grapheme clusters, or the ellipsis alone
    when not even the first cluster fitted."""
    if not shortened:
        return shown == as_json_reads(original)
    if shown == "" or shown == as_json_reads(original):
        return False
    if shown == ELLIPSIS:
        return True
    for end in cluster_ends(original):
        if end < len(shown):
            continue
        read = as_json_reads(original[:end])
        if read == shown:
            return True
        if len(read) > len(shown):
            break
    return False

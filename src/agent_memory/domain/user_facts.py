"""Private user facts: candidates, the offline rule extractor, and the pure
reconciliation rules (ADD / UPDATE / CONTRADICT / DUPLICATE).

Rules:
- a candidate whose best match among the user's facts (same namespace) is
  below the similarity threshold (default 0.75) is added with no model call;
- a candidate identical to a stored fact (after normalising case, spacing and
  final punctuation) is a DUPLICATE with no model call — re-adding a fact never
  deletes anything;
- otherwise the model classifies it; an unusable answer falls back to ADD, so
  reconciliation never removes a fact without a superseding one;
- CONTRADICT stores the new fact with a link to the one it supersedes, then
  removes the old one; UPDATE refines the stored fact in place; DUPLICATE only
  refreshes its last-used time.

Cross-agent facts — the user's name (or what to call them), preferred language
and time zone — belong to the `universal` namespace, which every agent reads:
`is_universal` decides it from the category and content (or the extractor's
explicit `universal` flag), and reconciliation then happens there.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import attrs
from attrs import field, frozen

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.json_answers import extract_json_array, extract_json_object
from agent_memory.domain.validation import require_text, require_unit_interval
from agent_memory.domain.views import FactCategory, FactSource

__all__ = [
    "DEFAULT_SIMILARITY_THRESHOLD",
    "UNIVERSAL_NAMESPACE",
    "Classification",
    "FactCandidate",
    "Neighbour",
    "Operation",
    "confidence_band",
    "immediate_decision",
    "is_universal",
    "normalise_fact",
    "parse_classifications",
    "parse_extraction",
    "rule_extract",
]

UNIVERSAL_NAMESPACE = "universal"
DEFAULT_SIMILARITY_THRESHOLD = 0.75


class Operation(enum.StrEnum):
    ADD = "ADD"
    UPDATE = "UPDATE"
    CONTRADICT = "CONTRADICT"
    DUPLICATE = "DUPLICATE"


def _category(value: object) -> FactCategory:
    try:
        return FactCategory(str(value).lower())
    except ValueError:
        raise InvalidInput("candidate.category", f"unknown category {value!r}") from None


def _content(_inst: object, _attr: object, value: Any) -> None:
    text = require_text(value, "candidate.content")
    if "\x00" in text:  # no store holds it (MS-BOUND-2): refuse it here, by this name
        raise InvalidInput("candidate.content", "text must not contain NUL (\\x00)")
    if not text.strip():
        raise InvalidInput("candidate.content", "must not be blank")


def _storable_text(value: object) -> bool:
    """Whether `value` is text a fact can hold: a non-blank string without NUL
    or lone surrogates."""
    try:
        _content(None, None, value)
    except InvalidInput:
        return False
    return True


def _confidence(value: object) -> float:
    return require_unit_interval(value, "candidate.confidence")


@frozen
class FactCandidate:
    """A fact proposed by extraction, before reconciliation."""

    content: str = field(validator=_content)
    category: FactCategory = field(converter=_category)
    confidence: float = field(default=0.9, converter=_confidence)
    source: FactSource = field(default=FactSource.EXPLICIT, converter=FactSource)
    universal: bool = field(default=False, validator=attrs.validators.instance_of(bool))
    """Marked cross-agent by the extractor (name, language, time zone)."""


# What makes a fact cross-agent: the user's name or form of address, the
# language they speak or want answers in, their time zone.
_UNIVERSAL_TOPICS = re.compile(
    r"\b(?:user'?s? (?:full |first |last |preferred |nick)?name\b|name is\b|"
    r"(?:wants|likes|prefers) to be called\b|goes by\b|"
    r"speaks? (?-i:[^\W\d_a-z])|(?:native|preferred|first|mother) (?:language|tongue)\b|"
    r"language is\b|(?:answers?|replies|responses|communicat\w*) in (?-i:[^\W\d_a-z])|"
    r"time ?zone\b|\b(?:UTC|GMT) ?[+-]\d)",
    re.I,
)
_UNIVERSAL_CATEGORIES = frozenset({FactCategory.IDENTITY, FactCategory.PREFERENCE})


def is_universal(candidate: FactCandidate) -> bool:
    """True when the fact is one every agent should share: the user's name or
    form of address, preferred language, or time zone (identity or preference
    facts only: "User's wife's name is Ann" is a relationship, not universal)."""
    if candidate.category not in _UNIVERSAL_CATEGORIES:
        return False
    return candidate.universal or bool(_UNIVERSAL_TOPICS.search(candidate.content))


@frozen
class Neighbour:
    """A stored fact similar to a candidate, with its cosine similarity."""

    id: str
    content: str
    similarity: float


@frozen
class Classification:
    """The decision for one candidate."""

    operation: Operation
    target_id: str | None = None
    content: str | None = None  # the refined text for UPDATE / CONTRADICT


def confidence_band(confidence: float, source: FactSource) -> str:
    """'explicit, high confidence' / 'derived, medium confidence' / ..."""
    level = "high" if confidence >= 0.8 else "medium" if confidence >= 0.5 else "low"
    return f"{source.value}, {level} confidence"


_SPACE = re.compile(r"\s+")


def normalise_fact(text: str) -> str:
    """Case-, width-, spacing- and final-punctuation-insensitive form of a fact."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _SPACE.sub(" ", folded).strip().rstrip(".!;。").strip()


def immediate_decision(
    candidate: FactCandidate, neighbours: Sequence[Neighbour], threshold: float
) -> Classification | None:
    """The decision when no model is needed, else None."""
    wanted = normalise_fact(candidate.content)
    for n in neighbours:
        if normalise_fact(n.content) == wanted:
            return Classification(Operation.DUPLICATE, target_id=n.id)
    if not neighbours or max(n.similarity for n in neighbours) < threshold:
        return Classification(Operation.ADD)
    return None


def parse_classifications(
    text: str, neighbours: Sequence[Sequence[Neighbour]]
) -> tuple[dict[int, Classification], str | None]:
    """The model's decisions by candidate index; targets must be offered neighbours."""
    array, _truncated, error = extract_json_array(text)
    if array is None:
        return {}, error
    out: dict[int, Classification] = {}
    bad = 0
    for position, raw in enumerate(array):
        parsed = _classification(raw, position, neighbours)
        if parsed is None or parsed[0] in out:
            bad += 1
            continue
        out[parsed[0]] = parsed[1]
    return out, (f"{bad} unusable entries" if bad else None)


def _classification(
    raw: Any, position: int, neighbours: Sequence[Sequence[Neighbour]]
) -> tuple[int, Classification] | None:
    if not isinstance(raw, dict):
        return None
    index = raw.get("index", position)
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(neighbours):
        return None
    try:
        op = Operation(str(raw.get("operation", "")).upper())
    except ValueError:
        return None
    target = raw.get("target_id")
    content = raw.get("content")
    offered = {n.id for n in neighbours[index]}
    if op is not Operation.ADD and (not isinstance(target, str) or target not in offered):
        return None
    if content is not None and not _storable_text(content):
        content = None  # blank, NUL or a lone surrogate: the candidate's own text serves
    return index, Classification(
        op, target_id=None if op is Operation.ADD else target, content=content
    )


def parse_extraction(text: str) -> tuple[list[FactCandidate], str | None, str | None]:
    """(candidates, session summary, error) from the extractor model's answer:
    `{"facts": [{"content", "category", "confidence", "explicit"}], "summary": "..."}`."""
    obj, error = extract_json_object(text)
    if obj is None:
        return [], None, error
    facts = obj.get("facts", [])
    out: list[FactCandidate] = []
    bad = 0
    for raw in facts if isinstance(facts, list) else []:
        if not isinstance(raw, dict):
            bad += 1
            continue
        try:
            out.append(
                FactCandidate(
                    content=str(raw.get("content", "")),
                    category=raw.get("category"),
                    confidence=raw.get("confidence", 0.8),
                    source=FactSource.EXPLICIT if raw.get("explicit", True) else FactSource.DERIVED,
                    universal=raw.get("universal") is True,
                )
            )
        except ValueError:
            bad += 1
    summary = obj.get("summary")
    if isinstance(summary, str) and summary.strip() and not _storable_text(summary):
        return out, None, (f"{bad} unusable facts; " if bad else "") + "unusable summary"
    summary = summary.strip() if isinstance(summary, str) and summary.strip() else None
    return out, summary, (f"{bad} unusable facts" if bad else None)


# -- the offline rule extractor ----------------------------------------------

_CONSTRAINT_WORDS = (
    "vegan|vegetarian|pescatarian|gluten[- ]free|lactose[- ]intolerant|diabetic|"
    "kosher|halal|sober|teetotal|allergic to [^,.;!?]+?"
)
# a word not starting in lower-case ASCII: "I speak French" / "Ελληνικά", not "I speak to"
_LANGUAGE = r"(?-i:[^\W\d_a-z][\w-]*)"
_CLAUSE_END = r"(?=\s*(?:[,.;!?]|\band\b|\bbut\b|\bso\b|$))"
_RULES: tuple[tuple[re.Pattern[str], FactCategory, str], ...] = (
    (
        re.compile(rf"\bmy name is (?P<x>[^,.;!?]+?){_CLAUSE_END}", re.I),
        FactCategory.IDENTITY,
        "User's name is {x}",
    ),
    (
        re.compile(rf"\bcall me (?P<x>[^,.;!?]+?){_CLAUSE_END}", re.I),
        FactCategory.IDENTITY,
        "User wants to be called {x}",
    ),
    (
        re.compile(rf"\bi(?:'m| am) (?P<x>{_CONSTRAINT_WORDS}){_CLAUSE_END}", re.I),
        FactCategory.CONSTRAINT,
        "User is {x}",
    ),
    (
        re.compile(
            rf"\bi (?:can(?:'|no)t|don'?t|do not|never) eat (?P<x>[^,.;!?]+?){_CLAUSE_END}", re.I
        ),
        FactCategory.CONSTRAINT,
        "User does not eat {x}",
    ),
    (
        re.compile(
            rf"\bmy (?:preferred |native |first )?language is (?P<x>[^,.;!?]+?){_CLAUSE_END}", re.I
        ),
        FactCategory.IDENTITY,
        "User's preferred language is {x}",
    ),
    (
        re.compile(
            rf"\bi speak (?P<x>{_LANGUAGE}(?:(?:,? and |, ){_LANGUAGE})*){_CLAUSE_END}", re.I
        ),
        FactCategory.IDENTITY,
        "User speaks {x}",
    ),
    (
        re.compile(rf"\bmy time ?zone is (?P<x>[^,;!?]+?){_CLAUSE_END}", re.I),
        FactCategory.IDENTITY,
        "User's time zone is {x}",
    ),
    (
        re.compile(rf"\bi (?:live|reside) in (?P<x>[^,.;!?]+?){_CLAUSE_END}", re.I),
        FactCategory.IDENTITY,
        "User lives in {x}",
    ),
    (
        re.compile(rf"\bi(?:'m| am) from (?P<x>[^,.;!?]+?){_CLAUSE_END}", re.I),
        FactCategory.IDENTITY,
        "User is from {x}",
    ),
    (
        re.compile(rf"\bi work (?:as|at|for) (?P<x>[^,.;!?]+?){_CLAUSE_END}", re.I),
        FactCategory.IDENTITY,
        "User works {w} {x}",
    ),
    (
        re.compile(rf"\bi(?:'m| am) an? (?P<x>[^,.;!?]+?){_CLAUSE_END}", re.I),
        FactCategory.IDENTITY,
        "User is a {x}",
    ),
    (
        re.compile(rf"\bi (?:prefer|like|love|enjoy) (?P<x>[^,.;!?]+?){_CLAUSE_END}", re.I),
        FactCategory.PREFERENCE,
        "User {verb} {x}",
    ),
    (
        re.compile(rf"\bi (?:hate|dislike|don'?t like) (?P<x>[^,.;!?]+?){_CLAUSE_END}", re.I),
        FactCategory.PREFERENCE,
        "User dislikes {x}",
    ),
    (
        re.compile(
            rf"\bmy (?P<rel>wife|husband|partner|son|daughter|mother|father|mom|dad|brother|sister|"
            rf"friend|boss|manager|dog|cat)(?:'s name)? is (?P<x>[^,.;!?]+?){_CLAUSE_END}",
            re.I,
        ),
        FactCategory.RELATIONSHIP,
        "User's {rel} is {x}",
    ),
)
_VERBS = {"prefer": "prefers", "like": "likes", "love": "loves", "enjoy": "enjoys"}


def rule_extract(text: str) -> list[FactCandidate]:
    """Facts from plain first-person statements ("I'm vegan", "I live in Coppell",
    "I prefer aisle seats"), for offline use. Conservative: anything else is ignored."""
    require_text(text, "text")
    found: dict[str, FactCandidate] = {}
    for pattern, category, template in _RULES:
        for match in pattern.finditer(text):
            x = match.group("x").strip()
            if not x:
                continue
            groups = match.groupdict()
            verb_word = (
                match.group(0).split()[1].lower() if template.startswith("User {verb}") else ""
            )
            work = re.search(r"\bwork (as|at|for)\b", match.group(0), re.I)
            content = template.format(
                x=x,
                rel=(groups.get("rel") or "").lower(),
                verb=_VERBS.get(verb_word, verb_word),
                w=work.group(1).lower() if work else "",
            )
            if not _storable_text(content):  # e.g. a NUL inside the statement
                continue
            key = normalise_fact(content)
            if key not in found and not any(key in k or k in key for k in found):
                found[key] = FactCandidate(content=content, category=category, confidence=0.9)
    return list(found.values())

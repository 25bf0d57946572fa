"""Rules graph memory renders context by (pure): which triples are decisions or
files, which words of a task count when matching triples, and how the lines of
a `<graph_context>` block are grouped and admitted within a token budget.

Matching reuses the lexical rules of keyword search (`domain.lexical`): the
same word splitting, stopwords and stemmer, so "webhooks" in a task finds a
triple about a "webhook". On top of those, words every task description carries
("task", "please", "make sure", ...) and words shorter than three characters
are ignored.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from attrs import frozen

from agent_memory.domain.lexical import stem, tokenize
from agent_memory.domain.triples import Triple
from agent_memory.domain.views import TokenCounter, count_tokens, encode_text, trim_to_token_budget

__all__ = [
    "SECTION_TITLES",
    "TASK_STOPWORDS",
    "ContextLine",
    "is_decision",
    "is_file",
    "plain",
    "render_graph_context",
    "section_of",
    "task_terms",
    "triple_line",
]

#: Words of task descriptions that say nothing about the task's subject.
TASK_STOPWORDS = frozenset({"task", "please", "make", "sure", "need", "needs", "using", "use"})


@functools.cache
def _task_stems() -> frozenset[str]:
    """The stems of `TASK_STOPWORDS` (computed on first use, not at import)."""
    return frozenset(stem(w) for w in TASK_STOPWORDS)


_MIN_TERM_CHARS = 3

_DECISION_WORDS = ("decid", "decision", "chose", "choose", "agreed", "resolved", "selected")
_FILE_PREDICATES = frozenset(
    {"modified", "edited", "created", "read", "reads", "wrote", "changed", "deleted", "touched"}
)
_FILE_LIKE = re.compile(
    r"^(?:[\w.\-~]+/)+[\w.\-]+$|^[\w\-]+\.(?:py|md|rst|txt|toml|ya?ml|json|js|ts|tsx|jsx|rs|go|"
    r"java|kt|c|h|cc|cpp|hpp|cs|rb|php|sql|sh|cfg|ini|lock|html|css)$"
)

#: Section headings of a `<graph_context>` block, by section name.
SECTION_TITLES = {
    "checkpoint": "## Last checkpoint",
    "decisions": "## Past decisions",
    "files": "## Files",
    "facts": "## Relevant facts",
    "graph": "## Loop knowledge",
}


def _snake(predicate: str) -> str:
    return re.sub(r"[\s\-]+", "_", predicate.strip().lower())


def is_decision(t: Triple) -> bool:
    """A triple that records a decision (by its predicate)."""
    p = _snake(t.predicate)
    return any(word in p for word in _DECISION_WORDS)


def is_file(t: Triple) -> bool:
    """A triple about a file: a file predicate, or a path-like object."""
    return _snake(t.predicate) in _FILE_PREDICATES or bool(_FILE_LIKE.match(t.object.strip()))


def section_of(t: Triple) -> str:
    """`decisions`, `files` or `facts`: where a pre-task context lists the triple."""
    if is_decision(t):
        return "decisions"
    if is_file(t):
        return "files"
    return "facts"


def task_terms(text: str) -> set[str]:
    """The terms of `text` that count when matching a task against triples."""
    skip = _task_stems()
    return {term for term in tokenize(text) if len(term) >= _MIN_TERM_CHARS and term not in skip}


def triple_line(t: Triple) -> str:
    """One context line for a triple, every part encoded (it cannot break the frame)."""
    return f"- {encode_text(t.subject)} {encode_text(t.predicate)} {encode_text(t.object)}"


def plain(t: Triple) -> str:
    """The triple as a plain sentence (a checkpoint's decision)."""
    return f"{t.subject} {t.predicate} {t.object}"


@frozen
class ContextLine:
    """A candidate line of a context block: its section, text and the triple it shows."""

    section: str
    text: str
    triple: Triple | None = None


def render_graph_context(
    kind: str,
    loop: str,
    lines: Sequence[ContextLine],
    budget: int,
    tokenizer: TokenCounter | None,
    order: Sequence[str],
) -> tuple[str, int, int, int]:
    """(text, tokens, triples used, lines omitted): `lines` in priority order,
    grouped by section in `order`, within `budget` tokens (the frame included).
    When not even the frame fits, or nothing is admitted, the text is empty."""
    head = f"<graph_context kind={encode_text(kind)} loop={encode_text(loop)}>"
    tail = "</graph_context>"
    sections = [s for s in order if any(i.section == s for i in lines)]
    frame = [head, *(SECTION_TITLES[s] for s in sections), tail]
    frame_tokens = count_tokens("\n".join(frame), tokenizer)
    if not lines or frame_tokens > budget:
        return "", 0, 0, len(lines)
    trim = trim_to_token_budget(
        lines, budget - frame_tokens, text=lambda i: i.text, tokenizer=tokenizer
    )
    kept = list(trim.kept)
    while True:
        out = [head]
        for s in sections:
            chosen = [i.text for i in kept if i.section == s]
            if chosen:
                out.append(SECTION_TITLES[s])
                out.extend(chosen)
        out.append(tail)
        text = "\n".join(out) if kept else ""
        tokens = count_tokens(text, tokenizer) if text else 0
        if tokens <= budget:
            used = sum(1 for i in kept if i.triple is not None)
            return text, tokens, used, len(lines) - len(kept)
        kept.pop()  # a tokenizer that is not additive: drop the lowest priority

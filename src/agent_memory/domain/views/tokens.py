"""Token estimation, byte budgets and the `max_inject_tokens` trimming helper.

Views are budgeted in encoded UTF-8 bytes (`DEFAULT_BUDGET_BYTES` = 8,000, i.e.
2,000 tokens at `BYTES_PER_TOKEN` = 4). Token counts come from a `Tokenizer`
(the port in `agent_memory.ports.models`; any object with `count(text) -> int`
fits) when the caller has one, else from `estimate_tokens`: about 1.3 tokens
per Latin word unit and 1.5 per Han, Hiragana, Katakana or Hangul character,
summed and rounded up, so space-free CJK text counts per character. Text is
counted in grapheme clusters (`graphemes`), so a combining mark, joiner or
variation selector never adds a unit, and canonically equivalent spellings
(NFC and NFD) estimate the same. A run of letters or digits counts a unit per 8
clusters begun (`UNIT_CLUSTERS`), and a cluster of more than 8 code points adds
a unit per further 8 begun: one 50,000-letter word, or a letter under 50,000
combining marks, is thousands of tokens, not one.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from attrs import frozen

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.views.graphemes import grapheme_clusters

__all__ = [
    "BYTES_PER_TOKEN",
    "DEFAULT_BUDGET_BYTES",
    "DEFAULT_BUDGET_TOKENS",
    "UNIT_CLUSTERS",
    "TokenCounter",
    "TokenTrim",
    "budget_bytes_for_tokens",
    "count_tokens",
    "estimate_tokens",
    "trim_to_token_budget",
]

BYTES_PER_TOKEN = 4
#: A run of letters/digits counts one word unit per this many grapheme clusters
#: begun, and a cluster of more code points adds units (`estimate_tokens`), so
#: one long word, a run of a script written without spaces, or a letter under
#: thousands of combining marks cannot pass as one unit.
UNIT_CLUSTERS = 8
DEFAULT_BUDGET_TOKENS = 2_000
DEFAULT_BUDGET_BYTES = DEFAULT_BUDGET_TOKENS * BYTES_PER_TOKEN

_CJK_RANGES = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f"  # Hangul Jamo extended A
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uff9f"  # half-width Katakana
    "\U00020000-\U0003134f"  # CJK extensions B-G
)
_CJK = re.compile(f"[{_CJK_RANGES}]")
#: A Latin word unit: a run of letters/digits, or one punctuation/symbol character.
_WORD_UNIT = re.compile(r"[^\W_]+|[^\w\s]|_")


class TokenCounter(Protocol):
    """Anything that counts tokens exactly (`agent_memory.ports.Tokenizer` fits)."""

    def count(self, text: str) -> int: ...


def _tokens(units: int, cjk: int) -> int:
    return math.ceil((13 * units + 15 * cjk) / 10)


def _estimate_by_clusters(text: str) -> int:
    """The estimate over grapheme clusters, each classed by its first character;
    a run of letters/digits is a unit per `UNIT_CLUSTERS` clusters begun, and a
    cluster of more than `UNIT_CLUSTERS` code points (in NFD, so NFC and NFD
    agree) adds a unit per further `UNIT_CLUSTERS` begun."""
    units = cjk = 0
    run = 0
    for cluster in grapheme_clusters(text):
        base = cluster[0]
        if len(cluster) > 1:
            width = len(unicodedata.normalize("NFD", cluster))
            units += (width - 1) // UNIT_CLUSTERS
        if _CJK.match(base):
            cjk += 1
            run = 0
        elif base.isalnum():
            units += run % UNIT_CLUSTERS == 0
            run += 1
        else:  # a mark on a space is a visible symbol too ("\r\n" is not)
            units += not cluster.isspace()
            run = 0
    return _tokens(units, cjk)


def estimate_tokens(text: str) -> int:
    """Script-aware estimate: ceil(1.3 x Latin word units + 1.5 x CJK characters),
    counted in grapheme clusters (a word unit: a run of letters/digits, one unit
    per `UNIT_CLUSTERS` clusters begun, or one punctuation or symbol character;
    a cluster of more than `UNIT_CLUSTERS` code points adds a unit per further
    `UNIT_CLUSTERS` begun)."""
    if not text.isascii():
        return _estimate_by_clusters(text)
    # ASCII: every code point is a cluster
    units = sum(-(-len(unit) // UNIT_CLUSTERS) for unit in _WORD_UNIT.findall(text))
    return _tokens(units, 0)


def count_tokens(text: str, tokenizer: TokenCounter | None = None) -> int:
    """Exact count from `tokenizer` when given, else `estimate_tokens`."""
    return tokenizer.count(text) if tokenizer is not None else estimate_tokens(text)


def budget_bytes_for_tokens(tokens: int) -> int:
    """The byte budget of a view meant to stay within `tokens` tokens."""
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        raise InvalidInput("tokens", f"a non-negative integer is required, got {tokens!r}")
    return tokens * BYTES_PER_TOKEN


T = TypeVar("T")


@frozen
class TokenTrim(Generic[T]):
    """What `trim_to_token_budget` kept (in the given order) and what it left out."""

    kept: tuple[T, ...]
    omitted: int
    tokens_used: int
    budget_tokens: int


def trim_to_token_budget(
    items: Sequence[T],
    max_inject_tokens: int,
    *,
    text: Callable[[T], str] = str,
    tokenizer: TokenCounter | None = None,
) -> TokenTrim[T]:
    """Keep retrieved memories, best first, within `max_inject_tokens`.

    `items` come in priority order. Each is kept when its tokens still fit; one
    that does not fit is left out and the next, smaller one may still fit, so a
    kept item never displaced an earlier one that would have fit.
    """
    if (
        not isinstance(max_inject_tokens, int)
        or isinstance(max_inject_tokens, bool)
        or max_inject_tokens < 0
    ):
        raise InvalidInput(
            "max_inject_tokens", f"a non-negative integer is required, got {max_inject_tokens!r}"
        )
    kept: list[T] = []
    used = 0
    for item in items:
        tokens = count_tokens(text(item), tokenizer)
        if used + tokens <= max_inject_tokens:
            kept.append(item)
            used += tokens
    return TokenTrim(
        kept=tuple(kept),
        omitted=len(items) - len(kept),
        tokens_used=used,
        budget_tokens=max_inject_tokens,
    )

"""Extended grapheme clusters, approximately (after UAX #29), with no dependency.

A cluster is what a reader sees as one character. This approximation keeps
together: CR LF; a base and every following combining mark (general category
Mn, Me or Mc), zero-width (non-)joiner, variation selector, emoji modifier and
tag character; whatever follows a zero-width joiner (emoji ZWJ sequences);
regional-indicator pairs (flags); Hangul jamo that form one syllable (L, V, T
and precomposed LV/LVT); and a high surrogate followed by a low one (which a
JSON parser reads as one character). Nothing attaches to a control character,
line or paragraph separator, or a lone surrogate, and they attach to nothing.

The rules only ever join canonically equivalent spellings the same way, so NFC
and NFD text have the same clusters with the same first character class.
"""

from __future__ import annotations

import enum
import unicodedata
from collections.abc import Iterator
from functools import lru_cache

__all__ = ["cluster_ends", "grapheme_clusters"]


class _Kind(enum.Enum):
    OTHER = enum.auto()
    CR = enum.auto()
    LF = enum.auto()
    CONTROL = enum.auto()
    EXTEND = enum.auto()
    ZWJ = enum.auto()
    REGIONAL = enum.auto()
    L = enum.auto()
    V = enum.auto()
    T = enum.auto()
    LV = enum.auto()
    LVT = enum.auto()
    HIGH = enum.auto()
    LOW = enum.auto()


_EXTEND_CATEGORIES = frozenset({"Mn", "Me", "Mc"})
_CONTROL_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})


@lru_cache(maxsize=8192)
def _kind(char: str) -> _Kind:
    cp = ord(char)
    if cp < 0x7F and cp >= 0x20:  # printable ASCII: the common case
        return _Kind.OTHER
    if cp == 0x0D:
        return _Kind.CR
    if cp == 0x0A:
        return _Kind.LF
    if cp == 0x200D:
        return _Kind.ZWJ
    if 0xD800 <= cp < 0xDC00:
        return _Kind.HIGH
    if 0xDC00 <= cp < 0xE000:
        return _Kind.LOW
    if 0x1F1E6 <= cp <= 0x1F1FF:
        return _Kind.REGIONAL
    if 0x1100 <= cp <= 0x115F or 0xA960 <= cp <= 0xA97F:
        return _Kind.L
    if 0x1160 <= cp <= 0x11A7 or 0xD7B0 <= cp <= 0xD7C6:
        return _Kind.V
    if 0x11A8 <= cp <= 0x11FF or 0xD7CB <= cp <= 0xD7FB:
        return _Kind.T
    if 0xAC00 <= cp <= 0xD7A3:
        return _Kind.LV if (cp - 0xAC00) % 28 == 0 else _Kind.LVT
    if (
        cp == 0x200C
        or 0x1F3FB <= cp <= 0x1F3FF  # emoji modifiers
        or 0xE0020 <= cp <= 0xE007F  # tag characters
    ):
        return _Kind.EXTEND
    category = unicodedata.category(char)
    if category in _EXTEND_CATEGORIES:  # combining marks, variation selectors
        return _Kind.EXTEND
    if category in _CONTROL_CATEGORIES:
        return _Kind.CONTROL
    return _Kind.OTHER


_BREAKS_AROUND = frozenset({_Kind.CR, _Kind.LF, _Kind.CONTROL})
_HANGUL_JOINS = {
    _Kind.L: frozenset({_Kind.L, _Kind.V, _Kind.LV, _Kind.LVT}),
    _Kind.V: frozenset({_Kind.V, _Kind.T}),
    _Kind.LV: frozenset({_Kind.V, _Kind.T}),
    _Kind.T: frozenset({_Kind.T}),
    _Kind.LVT: frozenset({_Kind.T}),
}
_NOTHING: frozenset[_Kind] = frozenset()


def _joins(prev: _Kind, cur: _Kind, regional_run: int) -> bool:
    """Whether `cur` continues the cluster that `prev` ends (`regional_run`:
    regional indicators ending the cluster so far)."""
    if prev is _Kind.CR:
        return cur is _Kind.LF
    if prev in _BREAKS_AROUND or cur in _BREAKS_AROUND:
        return False
    if prev is _Kind.HIGH or cur is _Kind.LOW:
        return prev is _Kind.HIGH and cur is _Kind.LOW
    if cur in (_Kind.EXTEND, _Kind.ZWJ) or prev is _Kind.ZWJ:
        return prev is not _Kind.LOW
    if cur in _HANGUL_JOINS.get(prev, _NOTHING):
        return True
    return prev is cur is _Kind.REGIONAL and regional_run % 2 == 1


def cluster_ends(text: str) -> Iterator[int]:
    """The index just past each grapheme cluster of `text`, in order (the last is `len(text)`)."""
    if not text:
        return
    prev = _kind(text[0])
    regional = 1 if prev is _Kind.REGIONAL else 0
    for index in range(1, len(text)):
        cur = _kind(text[index])
        if not _joins(prev, cur, regional):
            yield index
            regional = 0
        regional = regional + 1 if cur is _Kind.REGIONAL else 0
        prev = cur
    yield len(text)


def grapheme_clusters(text: str) -> Iterator[str]:
    """The grapheme clusters of `text`, in order (see module doc)."""
    start = 0
    for end in cluster_ends(text):
        yield text[start:end]
        start = end

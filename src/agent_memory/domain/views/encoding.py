"""Safe text encoding for prompt views, and UTF-8-safe shortening.

Every free text a view shows (summaries, ids, agent names, facts) goes through
`encode_text`: a JSON string literal in which `<`, `>` and `&` are additionally
written as `\\u003c`, `\\u003e`, `\\u0026`, line separators that `str.splitlines`
honours (U+0085, U+2028, U+2029) as escapes, and lone surrogates as `\\udXXX`
escapes. So stored text can neither open or close a view tag, nor start a new
line (and so forge a record), nor make the output invalid UTF-8; a JSON parser
still reads the exact original string back.

Shortening cuts the *original* string at a code point boundary (backing off
so a combining mark, variation selector or zero-width joiner stays with its
base) and encodes the prefix, so a cut never lands inside a character or an
escape sequence.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from json.encoder import encode_basestring as _encode_basestring  # C-accelerated

from agent_memory.domain.errors import InvalidInput

__all__ = [
    "SHORTENED_MARKER",
    "encode_text",
    "encoded_size",
    "shorten_encoded",
    "shorten_text",
    "utf8_size",
]

#: Appended after a plain-text value that was cut; never counted in its allowance.
SHORTENED_MARKER = "[shortened]"

_EXTRA_ESCAPES: dict[int, str] = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x85: "\\u0085",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}
_EXTRA_ESCAPES.update({cp: f"\\u{cp:04x}" for cp in range(0xD800, 0xE000)})

#: Code points that must stay attached to the code point before them.
_JOINERS = frozenset({0x200D, 0x200C, 0x034F}) | frozenset(range(0xFE00, 0xFE10))


_NEEDS_EXTRA = re.compile("[<>&\x85\u2028\u2029\ud800-\udfff]")


def encode_text(text: str) -> str:
    """`text` as a JSON string literal that is safe inside any view (see module doc)."""
    literal: str = _encode_basestring(text)
    if _NEEDS_EXTRA.search(literal) is None:
        return literal
    return literal.translate(_EXTRA_ESCAPES)


def utf8_size(text: str) -> int:
    """Bytes of `text` in UTF-8 (text produced by `encode_text` always encodes)."""
    return len(text.encode("utf-8"))


@lru_cache(maxsize=4096)
def _char_cost(char: str) -> int:
    return utf8_size(encode_text(char)) - 2


def encoded_size(text: str) -> int:
    """`utf8_size(encode_text(text))`, the quotes included."""
    return utf8_size(encode_text(text))


def _attached(char: str) -> bool:
    return ord(char) in _JOINERS or unicodedata.combining(char) != 0


def _safe_cut(text: str, end: int) -> int:
    """Move a cut at `end` left until it does not separate a mark from its base."""
    while 0 < end < len(text) and (_attached(text[end]) or ord(text[end - 1]) == 0x200D):
        end -= 1
    return end


def _prefix_within(text: str, allowance: int) -> int:
    """Length (in code points) of the longest prefix whose escaped bytes fit `allowance`."""
    used = 0
    for index, char in enumerate(text):
        used += _char_cost(char)
        if used > allowance:
            return _safe_cut(text, index)
    return len(text)


def shorten_encoded(text: str, max_bytes: int) -> tuple[str, bool]:
    """`encode_text` of the longest safe prefix of `text` that fits in `max_bytes`.

    Returns the encoded literal (quotes included, at most `max_bytes` UTF-8
    bytes) and whether it was shortened. `max_bytes` must leave room for the
    two quotes.
    """
    if max_bytes < 2:
        raise InvalidInput(
            "max_bytes", f"at least 2 bytes (the quotes) are required, got {max_bytes}"
        )
    whole = encode_text(text)
    if utf8_size(whole) <= max_bytes:
        return whole, False
    return encode_text(text[: _prefix_within(text, max_bytes - 2)]), True


def shorten_text(
    text: str, max_bytes: int, *, marker: str = SHORTENED_MARKER, separator: str = " "
) -> str:
    """Plain-text shortening: the longest safe prefix within `max_bytes` UTF-8 bytes.

    When `text` was cut, `separator + marker` is appended *beyond* the allowance,
    so the allowance measures the kept text only. No escaping happens here: use it
    for trusted text or encode the result afterwards.
    """
    if max_bytes < 0:
        raise InvalidInput("max_bytes", f"a non-negative byte count is required, got {max_bytes}")
    if len(text.encode("utf-8", "surrogatepass")) <= max_bytes:
        return text
    used = 0
    end = len(text)
    for index, char in enumerate(text):
        used += len(char.encode("utf-8", "surrogatepass"))
        if used > max_bytes:
            end = _safe_cut(text, index)
            break
    return f"{text[:end]}{separator}{marker}"

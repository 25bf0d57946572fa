"""Safe text encoding for prompt views, and grapheme-safe shortening.

Every free text a view shows (summaries, ids, agent names, facts) goes through
`encode_text`: a JSON string literal in which `<`, `>` and `&` are additionally
written as `\\u003c`, `\\u003e`, `\\u0026`, line separators that `str.splitlines`
honours (U+0085, U+2028, U+2029) as escapes, and lone surrogates as `\\udXXX`
escapes. So stored text can neither open or close a view tag, nor start a new
line (and so forge a record), nor make the output invalid UTF-8; a JSON parser
still reads the exact original string back (a high surrogate directly followed
by a low one is read as the character the pair encodes, as JSON defines).

Look-alikes are escaped too, so the view keeps its shape after Unicode
normalisation (a model's tokenizer may apply NFKC): every code point whose
compatibility decomposition contains `<`, `>`, `&`, `"` or `\\` (fullwidth and
small forms, `≮`, `≯`; `NFKD_STRUCTURAL`), angle brackets and arrowheads that
look like `<` or `>` (`LOOKALIKES`), and a combining mark that directly
follows an escape (it would otherwise compose with the escape's last letter,
`\\n` + U+0303 becoming `\\ñ`), and so the whole run of marks after it (an
escaped mark ends in a hex digit itself); beyond the BMP as a surrogate pair.

Shortening cuts the *original* string between grapheme clusters (`graphemes`:
a base with its combining marks, joiners, variation selectors, flags, Hangul
syllables, surrogate pairs) and encodes the prefix, so a cut never lands inside
a character, a cluster or an escape sequence. When not even the first cluster
fits, the value becomes `ELLIPSIS` alone, never empty.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from functools import lru_cache
from json.encoder import encode_basestring as _encode_basestring  # C-accelerated

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.views.graphemes import cluster_ends

__all__ = [
    "ELLIPSIS",
    "LOOKALIKES",
    "MIN_LITERAL_BYTES",
    "NFKD_STRUCTURAL",
    "SHORTENED_MARKER",
    "encode_text",
    "encode_texts",
    "encoded_size",
    "shorten_encoded",
    "shorten_text",
    "utf8_size",
]

#: Appended after a plain-text value that was cut; never counted in its allowance.
SHORTENED_MARKER = "[shortened]"
#: The whole value of a shortened text of which not even one grapheme cluster fits.
ELLIPSIS = "\u2026"
#: The fewest bytes `shorten_encoded` accepts: the quotes and `ELLIPSIS`.
MIN_LITERAL_BYTES = 2 + len(ELLIPSIS.encode("utf-8"))

#: Every code point whose NFKD (so also NFKC) contains `<`, `>`, `&`, `"` or `\`
#: (Unicode 14.0; a test recomputes it from `unicodedata` and fails if one is missing).
NFKD_STRUCTURAL = frozenset(
    {0x226E, 0x226F, 0xFE60, 0xFE64, 0xFE65, 0xFE68, 0xFF02, 0xFF06, 0xFF1C, 0xFF1E, 0xFF3C}
)
#: Characters that look like `<` or `>` without normalising to them: angle
#: quotation marks and brackets, arrowheads, and their confusables.
LOOKALIKES = frozenset(
    {
        0x02C2,  # modifier letter arrowheads
        0x02C3,
        0x1433,  # canadian syllabics po, pa
        0x1438,
        0x16B2,  # runic kauna
        0x2039,  # single angle quotation marks
        0x203A,
        0x2329,  # angle brackets (canonically U+3008/U+3009)
        0x232A,
        0x276C,  # angle bracket ornaments
        0x276D,
        0x276E,
        0x276F,
        0x2770,
        0x2771,
        0x27E8,  # mathematical angle brackets
        0x27E9,
        0x27EA,
        0x27EB,
        0x29FC,  # curved angle brackets
        0x29FD,
        0x2AA1,  # double nested less/greater-than
        0x2AA2,
        0x3008,  # CJK angle brackets
        0x3009,
        0xFE3F,  # vertical forms (NFKC: U+3008/U+3009)
        0xFE40,
        0x16F3F,  # miao letter archaic zza
        0x1D236,  # greek instrumental notation symbols
        0x1D237,
    }
)


def _u_escape(cp: int) -> str:
    """JSON's escape of one code point: `\\uXXXX`, a surrogate pair beyond the BMP."""
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    high, low = divmod(cp - 0x10000, 0x400)
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


_EXTRA_ESCAPES: dict[int, str] = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x85: "\\u0085",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}
_EXTRA_ESCAPES.update({cp: _u_escape(cp) for cp in range(0xD800, 0xE000)})
for _cp in NFKD_STRUCTURAL | LOOKALIKES:
    _EXTRA_ESCAPES[_cp] = _u_escape(_cp)
del _cp

_NEEDS_EXTRA = re.compile(
    "[<>&\x85\u2028\u2029\ud800-\udfff"
    + "".join(chr(cp) for cp in sorted(NFKD_STRUCTURAL | LOOKALIKES))
    + "]"
)
#: Every escape of a JSON literal, in order, and the run of non-ASCII characters
#: right after it.
_ESCAPE_AND_NEXT = re.compile(r"\\(?:u[0-9a-f]{4}|[^u])([^\x00-\x7f]*)")


@lru_cache(maxsize=1024)
def _composes_after_escape(char: str) -> bool:
    """Whether normalising could fuse `char` with the ASCII letter or digit before it."""
    return unicodedata.combining(unicodedata.normalize("NFKD", char)[0]) != 0


def _protect_escape_ends(match: re.Match[str]) -> str:
    """Escape the marks that would fuse with the escape's last letter or digit. An
    escaped mark ends in a hex digit itself, so the marks after it are escaped too,
    up to the first character that cannot compose."""
    run = match.group(1)
    marks = 0
    while marks < len(run) and _composes_after_escape(run[marks]):
        marks += 1
    if not marks:
        return match.group(0)
    escape = match.group(0)[: match.start(1) - match.start(0)]
    return escape + "".join(_u_escape(ord(c)) for c in run[:marks]) + run[marks:]


def _escape_ascii(literal: str) -> str:
    return literal.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def encode_text(text: str) -> str:
    """`text` as a JSON string literal that is safe inside any view (see module doc)."""
    literal: str = _encode_basestring(text)
    if _NEEDS_EXTRA.search(literal) is not None:
        if literal.isascii():  # only <, > and & to escape: three C-speed passes
            return _escape_ascii(literal)
        literal = literal.translate(_EXTRA_ESCAPES)
    if "\\" in literal and not literal.isascii():
        literal = _ESCAPE_AND_NEXT.sub(_protect_escape_ends, literal)
    return literal


def encode_texts(texts: Sequence[str]) -> list[str]:
    """`[encode_text(t) for t in texts]`, checking the common case (nothing to
    escape beyond JSON's own escapes) once for all of them."""
    literals = [_encode_basestring(text) for text in texts]
    joined = "".join(literals)
    if _NEEDS_EXTRA.search(joined) is not None or ("\\" in joined and not joined.isascii()):
        return [encode_text(text) for text in texts]
    return literals


def utf8_size(text: str) -> int:
    """Bytes of `text` in UTF-8 (text produced by `encode_text` always encodes)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


@lru_cache(maxsize=4096)
def _char_cost(char: str) -> int:
    return utf8_size(encode_text(char)) - 2


def encoded_size(text: str) -> int:
    """`utf8_size(encode_text(text))`, the quotes included."""
    return utf8_size(encode_text(text))


def _cuts_within(text: str, allowance: int, cost: Callable[[str], int]) -> list[int]:
    """The cluster ends of the longest prefix whose `cost` (summed per code
    point) fits `allowance`, in order, starting with 0."""
    cuts = [0]
    used = 0
    start = 0
    for end in cluster_ends(text):
        used += sum(cost(char) for char in text[start:end])
        if used > allowance:
            break
        cuts.append(end)
        start = end
    return cuts


def shorten_encoded(text: str, max_bytes: int) -> tuple[str, bool]:
    """`encode_text` of the longest prefix of whole grapheme clusters of `text`
    that fits in `max_bytes`.

    Returns the encoded literal (quotes included, at most `max_bytes` UTF-8
    bytes) and whether it was shortened. A shortened literal is never empty:
    when not even the first cluster fits, it holds `ELLIPSIS` alone.
    `max_bytes` must leave room for the two quotes and the ellipsis
    (`MIN_LITERAL_BYTES`, 5).
    """
    if max_bytes < MIN_LITERAL_BYTES:
        raise InvalidInput(
            "max_bytes",
            f"at least {MIN_LITERAL_BYTES} bytes (the quotes and an ellipsis) are required,"
            f" got {max_bytes}",
        )
    whole = encode_text(text)
    if utf8_size(whole) <= max_bytes:
        return whole, False
    cuts = _cuts_within(text, max_bytes - 2, _char_cost)
    literal = encode_text(text[: cuts.pop()])
    while utf8_size(literal) > max_bytes:  # an escape's context added bytes
        literal = encode_text(text[: cuts.pop()])
    if literal == '""':
        literal = encode_text(ELLIPSIS)
    return literal, True


def _plain_cost(char: str) -> int:
    return len(char.encode("utf-8", "surrogatepass"))


def shorten_text(
    text: str, max_bytes: int, *, marker: str = SHORTENED_MARKER, separator: str = " "
) -> str:
    """Plain-text shortening: the longest prefix of whole grapheme clusters
    within `max_bytes` UTF-8 bytes.

    When `text` was cut, `separator + marker` is appended *beyond* the allowance,
    so the allowance measures the kept text only (the marker alone when nothing
    fits). No escaping happens here: use it for trusted text or encode the
    result afterwards.
    """
    if max_bytes < 0:
        raise InvalidInput("max_bytes", f"a non-negative byte count is required, got {max_bytes}")
    if len(text.encode("utf-8", "surrogatepass")) <= max_bytes:
        return text
    end = _cuts_within(text, max_bytes, _plain_cost)[-1]
    return f"{text[:end]}{separator}{marker}" if end else marker

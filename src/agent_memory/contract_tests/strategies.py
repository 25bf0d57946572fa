"""Hypothesis strategies for users' own tests: adversarial scopes and ids, texts,
vectors and whole `MemoryRecord`s that satisfy record validation.

Scopes and ids mix characters that break naive key layouts and query syntaxes
(`: * { } | @ - \\`, spaces, quotes, non-ASCII). Texts exclude NUL and lone
surrogates only: neither can be encoded as UTF-8 text by most backends.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import strategies as st

from agent_memory.contract_tests._support import BASE_TIME
from agent_memory.domain.records import MemoryRecord

__all__ = [
    "ADVERSARIAL_SCOPES",
    "LOOKALIKE_SCOPE_PAIRS",
    "attributes",
    "ids",
    "lookalike_scope_pairs",
    "memory_records",
    "scopes",
    "texts",
    "utc_datetimes",
    "vectors",
]

#: Hand-picked scope/id values that have broken real key layouts and query syntaxes.
ADVERSARIAL_SCOPES: tuple[str, ...] = (
    "a}b",
    "*",
    "@owner:{x}",
    "-1",
    "x|y",
    "ü 名",
    "a\\b",
    "a:b",
    "a b",
    "{a}",
    "'quoted'",
    '"dq"',
    "%_",
    "a/b",
    "?",
    "[x]",
    "(y)",
    "$",
    "~!#^&",
    "🙂",
    # Dotted (a separator in many key schemes) and values one normalisation
    # away from another: trailing/leading space, case, Unicode compatibility
    # (U+FB01 "ﬁ" vs "fi") and combining forms. Stores must keep them apart.
    "a.b",
    ".",
    "team.ana",
    "ana ",
    " ana",
    "Ana",
    "\ufb01nance",
    "e\u0301",
)

#: Pairs of distinct scopes that a trimming, case-folding or NFKC-normalising
#: backend would merge (the contract's MS-ISO-10 uses the same kind of pairs).
LOOKALIKE_SCOPE_PAIRS: tuple[tuple[str, str], ...] = (
    ("ana", "ana "),
    ("ana", " ana"),
    ("ana", "Ana"),
    ("finance", "\ufb01nance"),
    ("\u00e9", "e\u0301"),
    ("a.b", "a"),
    ("a.b", "a_b"),
)

# Characters that mean something to key layouts or query languages.
_SPECIALS = ":*{}|@-\\ '\"%_/?[]()$~!#^&,.;=+<>"
_ALPHABET = st.characters(
    codec="utf-8",
    exclude_characters="\x00",
)
_SCOPE_ALPHABET = st.one_of(
    st.sampled_from(_SPECIALS), st.sampled_from("abcXYZ019üé名字"), _ALPHABET
)


def _non_blank(s: str) -> bool:
    return bool(s.strip())


def scopes(max_size: int = 24) -> st.SearchStrategy[str]:
    """Non-blank owner/namespace/domain values, biased towards hostile characters,
    dotted values and values one normalisation (trim, case, NFKC) from another."""
    return st.one_of(
        st.sampled_from(ADVERSARIAL_SCOPES),
        st.text(_SCOPE_ALPHABET, min_size=1, max_size=max_size).filter(_non_blank),
        st.sampled_from(LOOKALIKE_SCOPE_PAIRS).flatmap(st.sampled_from),
    )


def lookalike_scope_pairs() -> st.SearchStrategy[tuple[str, str]]:
    """Pairs of distinct scopes a normalising backend would merge."""
    return st.sampled_from(LOOKALIKE_SCOPE_PAIRS)


def ids(max_size: int = 24) -> st.SearchStrategy[str]:
    """Non-blank record ids (the same hostile alphabet as `scopes`)."""
    return scopes(max_size)


def texts(max_size: int = 200, *, allow_control: bool = True) -> st.SearchStrategy[str]:
    """Free text (content, context): any UTF-8 encodable character except NUL;
    control characters such as tab, newline and escape are included unless
    `allow_control` is False. May be empty."""
    if allow_control:
        alphabet = _ALPHABET
    else:
        alphabet = st.characters(codec="utf-8", exclude_categories=("Cc", "Cs"))
    return st.text(alphabet, max_size=max_size)


def vectors(dim: int, *, max_magnitude: float = 1e3) -> st.SearchStrategy[npt.NDArray[np.float32]]:
    """Finite float32 vectors of `dim` components with a non-zero norm.

    Up to 64 dimensions every component is drawn (and shrinks); larger vectors
    are drawn from a seed with a few hostile components (tiny, huge, negative
    zero) spliced in, so a 1536-dimensional space stays cheap to generate.
    """
    component = st.floats(
        -max_magnitude, max_magnitude, allow_nan=False, allow_infinity=False, width=32
    )

    def usable(v: npt.NDArray[np.float32]) -> bool:
        return bool(np.linalg.norm(v.astype(np.float64)) > 1e-3)

    def build(values: list[float]) -> npt.NDArray[np.float32]:
        return np.asarray(values, dtype=np.float32)

    def seeded(args: tuple[int, float, list[tuple[int, float]]]) -> npt.NDArray[np.float32]:
        seed, scale, spikes = args
        v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32) * np.float32(scale)
        for index, value in spikes:
            v[index % dim] = value
        return v

    large = st.tuples(
        st.integers(0, 2**32 - 1),
        st.floats(1e-3, max_magnitude),
        st.lists(st.tuples(st.integers(0, dim - 1), component), max_size=4),
    ).map(seeded)
    if dim > 64:
        return large.filter(usable)
    return st.lists(component, min_size=dim, max_size=dim).map(build).filter(usable)


def utc_datetimes(
    start: datetime = BASE_TIME - timedelta(days=365),
    end: datetime = BASE_TIME + timedelta(days=365),
) -> st.SearchStrategy[datetime]:
    """Timezone-aware UTC datetimes with millisecond precision (what backends keep)."""
    span_ms = int((end - start) / timedelta(milliseconds=1))
    return st.integers(0, span_ms).map(lambda n: start + timedelta(milliseconds=n))


_JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    texts(40),
)


def attributes() -> st.SearchStrategy[dict[str, Any]]:
    """JSON-compatible attribute mappings (nested lists and objects)."""
    values = st.recursive(
        _JSON_SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(texts(12), inner, max_size=4)
        ),
        max_leaves=12,
    )
    return st.dictionaries(texts(16), values, max_size=5)


@st.composite
def _records(
    draw: st.DrawFn,
    dim: int,
    owner: str | None,
    namespace: str | None,
    kind: str | None,
) -> MemoryRecord:
    created = draw(utc_datetimes())
    updated = created + timedelta(milliseconds=draw(st.integers(0, 10**7)))
    return MemoryRecord(
        id=draw(ids()),
        owner=owner if owner is not None else draw(scopes()),
        namespace=namespace if namespace is not None else draw(scopes()),
        kind=kind if kind is not None else draw(ids(12)),
        content=draw(texts()),
        vector=draw(vectors(dim)),
        created_at=created,
        updated_at=updated,
        importance=draw(st.floats(0.0, 1.0)),
        attributes=draw(attributes()),
        context=draw(texts(80)),
    )


def memory_records(
    dim: int,
    *,
    owner: str | None = None,
    namespace: str | None = None,
    kind: str | None = None,
) -> st.SearchStrategy[MemoryRecord]:
    """Valid `MemoryRecord`s with hostile ids/scopes, any text, JSON attributes and
    millisecond timestamps; pin `owner`/`namespace`/`kind` to fix them."""
    return _records(dim, owner, namespace, kind)

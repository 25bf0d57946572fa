"""Vector index parameters of an approximate (HNSW) backend, from a URL's query
string or from code, validated the same way on Redis, PostgreSQL and Qdrant.

| URL parameter | meaning | applies |
| --- | --- | --- |
| `hnsw_m` | graph degree M | to an index created after the change |
| `hnsw_ef_construction` | candidate list while building | to an index created after the change |
| `hnsw_ef_search` | candidate list while searching (Redis: EF_RUNTIME) | to every query |
| `exact_threshold` | an owner with at most this many records is searched exactly | to every query |

An unset parameter keeps the backend's own default (see each backend's
document). A bad value raises `ConfigurationError` naming the parameter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from attrs import frozen

from agent_memory.domain.errors import ConfigurationError

__all__ = ["INDEX_PARAMETERS", "IndexOptions", "split_index_options"]

_DIGITS: Final = re.compile(r"[+-]?[0-9]+", re.ASCII)

# URL parameter -> IndexOptions field; the bounds are the engines' own limits
# (Redis, pgvector and Qdrant accept the same ranges or wider ones), except
# ef_search: up to 10,000 (the embedded graph's default reaches 2,000 at 1M
# records), pgvector's hnsw.ef_search stops at 1,000 (PostgreSQL checks that).
INDEX_PARAMETERS: Final[dict[str, tuple[str, int, int]]] = {
    "hnsw_m": ("m", 2, 100),
    "hnsw_ef_construction": ("ef_construction", 4, 1000),
    "hnsw_ef_search": ("ef_search", 1, 10_000),
    "exact_threshold": ("exact_threshold", 0, 10_000_000),
}


@frozen
class IndexOptions:
    """Index parameters; `None` keeps the backend's default."""

    m: int | None = None
    ef_construction: int | None = None
    ef_search: int | None = None
    exact_threshold: int | None = None

    def __attrs_post_init__(self) -> None:
        for name, (field, low, high) in INDEX_PARAMETERS.items():
            _check(name, getattr(self, field), low, high)

    def kwargs(self) -> dict[str, int]:
        """The set fields, by field name."""
        out: dict[str, int] = {}
        for field, _, _ in INDEX_PARAMETERS.values():
            value = getattr(self, field)
            if value is not None:
                out[field] = value
        return out

    def merged(self, base: IndexOptions | None) -> IndexOptions:
        """These options, with `base` filling the unset ones."""
        if base is None:
            return self
        return IndexOptions(**{**base.kwargs(), **self.kwargs()})


def _check(name: str, value: object, low: int, high: int) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigurationError(
            f"{name}: an integer from {low} to {high} is required, got {value!r}"
        )


def parse_index_options(
    params: Mapping[str, str], *, aliases: Mapping[str, str] | None = None
) -> IndexOptions:
    """`IndexOptions` from query parameters (only the index ones)."""
    values: dict[str, Any] = {}
    for raw_name, raw in params.items():
        name = (aliases or {}).get(raw_name, raw_name)
        field, low, high = INDEX_PARAMETERS[name]
        if field in values:
            raise ConfigurationError(f"{raw_name}: {name} is given twice in the URL")
        # ASCII digits only: int() would also read `1_000` and full-width digits
        text = raw.strip()
        value = int(text) if _DIGITS.fullmatch(text) else None
        if value is None or not low <= value <= high:
            raise ConfigurationError(
                f"{raw_name}: an integer from {low} to {high} is required, got {raw!r}"
            )
        values[field] = value
    return IndexOptions(**values)


def split_index_options(
    url: str, *, aliases: Mapping[str, str] | None = None
) -> tuple[str, IndexOptions]:
    """The URL without its index parameters, and those parameters parsed.

    `aliases` maps a backend's own spelling to a parameter (Redis:
    `hnsw_ef_runtime` -> `hnsw_ef_search`). Other query parameters stay in the URL
    for the backend's client, in their order."""
    parts = urlsplit(url)
    known = set(INDEX_PARAMETERS) | set(aliases or {})
    kept: list[tuple[str, str]] = []
    ours: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in known:
            if name in ours:
                raise ConfigurationError(f"{name}: given twice in the URL")
            ours[name] = value
        else:
            kept.append((name, value))
    if not ours:
        return url, IndexOptions()
    query = urlencode(kept)
    return urlunsplit(parts._replace(query=query)), parse_index_options(ours, aliases=aliases)

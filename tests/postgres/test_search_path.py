"""The per-call shortcuts of the vector search path agree with the slow spellings.

`check_query_vector` (shared by every store's `search`) takes the usual query,
a native float32 vector of the space's dimension, without `as_vector`'s
conversion; anything else goes through `as_vector`. These properties pin the
shortcut to `as_vector` + `require_dimension`: the same bytes, a read-only
copy, the same typed error for the same input.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.adapters._common.validation import check_query_vector
from agent_memory.adapters.postgres import PostgresMemoryStore
from agent_memory.domain.errors import DimensionMismatch, InvalidInput
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord, require_dimension
from agent_memory.domain.validation import as_vector, require_vector_norm

from .conftest import SPACE, OpenDatabase

_SPECIAL = st.sampled_from([0.0, -0.0, 1.0, -1.5, 3.4e38, -3.4e38, 1e-45, np.nan, np.inf, -np.inf])


def _outcome(check: Callable[[], object]) -> object:
    """What a check gives: its bytes, or the type and field of its typed error."""
    try:
        query = check()
    except (InvalidInput, DimensionMismatch) as exc:
        return (type(exc), getattr(exc, "field", None))
    assert isinstance(query, np.ndarray)
    assert query.dtype == np.float32
    assert not query.flags.writeable
    return query.tobytes()


def _reference(space: EmbeddingSpace, vector: object) -> object:
    query = as_vector(vector, "query vector")
    require_dimension(space, query)
    require_vector_norm(query, "query vector")
    return query


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.one_of(_SPECIAL, st.floats(width=32)), min_size=1, max_size=10),
    dimension=st.integers(1, 10),
)
def test_query_vector_check_agrees_with_as_vector(values: list[float], dimension: int) -> None:
    space = EmbeddingSpace(model="m", dimension=dimension)
    native = np.array(values, dtype=np.float32)
    for vector in (
        native,  # the shortcut (when of the space's dimension)
        np.array(values, dtype=">f4"),  # non-native byte order: `as_vector`
        native[::-1],  # a strided view: the shortcut
        np.array(values, dtype=np.float64),
        values,
    ):
        expected = _outcome(lambda: _reference(space, vector))  # noqa: B023
        got = _outcome(lambda: check_query_vector(space, vector))  # noqa: B023
        assert got == expected


def test_query_vector_is_a_copy_of_its_own() -> None:
    """The caller's array is neither kept nor frozen: changing it after the
    check changes nothing the search holds."""
    space = EmbeddingSpace(model="m", dimension=3)
    given = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    query = check_query_vector(space, given)
    assert not np.shares_memory(query, given)
    assert given.flags.writeable
    given[0] = np.nan
    assert query.tolist() == [1.0, 2.0, 3.0]


class TestSearchQueryVector:
    async def test_non_finite_float32_queries_are_refused(
        self, open_database: OpenDatabase
    ) -> None:
        store = PostgresMemoryStore(await open_database(), SPACE)
        e = np.eye(SPACE.dimension, dtype=np.float32)[0]
        at = datetime(2026, 1, 1, tzinfo=UTC)
        record = MemoryRecord(
            id="a",
            owner="o",
            namespace="notes",
            kind="fact",
            content="x",
            vector=e,
            created_at=at,
            updated_at=at,
        )
        await store.add([record])
        for bad in (np.nan, np.inf, -np.inf):
            q = e.copy()
            q[3] = bad
            with pytest.raises(InvalidInput) as err:
                await store.search("o", q)
            assert err.value.field == "query vector"
        hits = await store.search("o", e)
        assert [(h.record.id, h.score) for h in hits] == [("a", 1.0)]

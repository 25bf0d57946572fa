"""`domain.ranking` computes, bit for bit, what its reference numpy spelling does.

The ranking functions run on every search of every backend, so they spell
`np.linalg.norm` and `np.clip` as the ufuncs those run, without their Python
argument handling. Scores decide exact ties by id across backends, so "close"
is not enough: these properties compare bytes against the straightforward
spelling (kept here as the reference), on vectors with zero rows, repeated
rows and magnitudes from tiny to overflowing.
"""

from __future__ import annotations

import warnings

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from agent_memory.domain.ranking import cosine_scores, normalise_rows, rank_rows, top_k


def _normalise_reference(matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    out: npt.NDArray[np.float32] = (matrix / norms).astype(np.float32, copy=False)
    return out


def _cosine_reference(
    normalised: npt.NDArray[np.float32], query: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    qn = float(np.linalg.norm(query))
    if qn == 0.0 or normalised.shape[0] == 0:
        return np.zeros(normalised.shape[0], dtype=np.float32)
    scores = np.einsum("ij,j->i", normalised, (query / qn).astype(np.float32))
    out: npt.NDArray[np.float32] = np.clip(scores, -1.0, 1.0).astype(np.float32, copy=False)
    return out


def _top_k_reference(
    scores: npt.NDArray[np.float32], ids: list[str], limit: int, min_score: float | None
) -> list[tuple[int, float]]:
    kept = [
        i for i in range(scores.shape[0]) if min_score is None or scores[i] >= np.float32(min_score)
    ]
    # A stable sort: rows equal in score and id stay in index order.
    ordered = sorted(kept, key=lambda i: (-float(scores[i]), ids[i]))
    return [(i, float(scores[i])) for i in ordered[:limit]]


_BIG = float(np.float32(1e30))  # squares overflow float32
_values = st.sampled_from([0.0, 1.0, -1.0, 0.5]) | st.floats(
    min_value=-_BIG, max_value=_BIG, allow_nan=False, allow_subnormal=False, width=32
)


@st.composite
def _matrices(draw: st.DrawFn) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    dim = draw(st.integers(1, 40))
    rows = draw(st.integers(0, 8))
    matrix = draw(hnp.arrays(np.float32, (rows, dim), elements=_values))
    if rows > 1 and draw(st.booleans()):
        matrix[1] = matrix[0]  # a repeated row: an exact tie
    query = draw(hnp.arrays(np.float32, (dim,), elements=_values))
    return matrix, query


@settings(max_examples=150)
@given(
    data=_matrices(),
    limit=st.integers(1, 10),
    min_score=st.none() | st.floats(-1.0, 1.0),
    repeated_ids=st.booleans(),
)
def test_ranking_equals_its_reference_spelling_bit_for_bit(
    data: tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]],
    limit: int,
    min_score: float | None,
    repeated_ids: bool,
) -> None:
    matrix, query = data
    given_matrix, given_query = matrix.tobytes(), query.tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow: both sides alike
        normalised = normalise_rows(matrix)
        expected = _normalise_reference(matrix)
        assert normalised.dtype == expected.dtype
        assert normalised.tobytes() == expected.tobytes()
        scores = cosine_scores(normalised, query)
        reference = _cosine_reference(expected, query)
    assert scores.dtype == reference.dtype
    assert scores.tobytes() == reference.tobytes()
    # The inputs are left as they were (the ranking works in buffers of its own).
    assert (matrix.tobytes(), query.tobytes()) == (given_matrix, given_query)
    # Repeated ids (not in a store, but allowed here) tie on score and id alike.
    ids = [f"r{i % 3}" if repeated_ids else f"r{i % 3}-{i}" for i in range(matrix.shape[0])]
    if not np.isnan(scores).any():  # NaN scores (overflowing rows) have no order
        got = top_k(scores, ids, limit, min_score)
        assert got == _top_k_reference(scores, ids, limit, min_score)


@st.composite
def _candidates(draw: st.DrawFn) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """`_matrices`, often with rows along the query (cosine 1 or -1 up to
    rounding: the clip), as a search's best candidates are."""
    matrix, query = draw(_matrices())
    for i in range(matrix.shape[0]):
        if draw(st.booleans()):
            scale = draw(st.sampled_from([1.0, 3.0, -1.0, 1e-3, 7.5]))
            matrix[i] = (query * np.float32(scale)).astype(np.float32)
    return matrix, query


@settings(max_examples=400)
@given(
    data=_candidates(),
    limit=st.integers(1, 10),
    min_score=st.none() | st.floats(-1.0, 1.0),
    repeated_ids=st.booleans(),
)
def test_rank_rows_equals_the_composed_ranking_bit_for_bit(
    data: tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]],
    limit: int,
    min_score: float | None,
    repeated_ids: bool,
) -> None:
    """`rank_rows` (the fewer-calls spelling a search's re-rank uses) gives the
    very hits, scores and lowest score of `top_k(cosine_scores(normalise_rows))`."""
    matrix, query = data
    given_matrix, given_query = matrix.tobytes(), query.tobytes()
    ids = [f"r{i % 3}" if repeated_ids else f"r{i % 3}-{i}" for i in range(matrix.shape[0])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow: both sides alike
        scores = cosine_scores(normalise_rows(matrix), query)
        got, low = rank_rows(matrix, query, ids, limit, min_score)
    assert (matrix.tobytes(), query.tobytes()) == (given_matrix, given_query)
    if np.isnan(scores).any():  # NaN scores (overflowing rows) have no order
        return
    want = top_k(scores, ids, limit, min_score)
    assert [i for i, _ in got] == [i for i, _ in want]
    # Scores compared as bytes of their float32 values (0.0 and -0.0 differ).
    as_bytes = [np.float32(x).tobytes() for _, x in got]
    assert as_bytes == [np.float32(x).tobytes() for _, x in want]
    assert all(isinstance(x, float) for _, x in got)
    if matrix.shape[0]:
        assert low == float(scores.min())  # by value: 0.0 and -0.0 are both lowest
    else:
        assert low == float("inf")

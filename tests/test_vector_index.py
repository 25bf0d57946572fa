"""`ExactIndex`: after any sequence of add / update / remove, a search returns
exactly what a freshly built index returns, and both match a float64 brute force
(score descending, ties by id ascending)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from agent_memory.domain.vector_index import ExactIndex

DIM = 5
_ids = st.sampled_from([f"r{i}" for i in range(12)])
# Small integer components: many exact ties and duplicate vectors.
_vec = st.lists(st.integers(-2, 2), min_size=DIM, max_size=DIM)
_op = st.one_of(
    st.tuples(st.just("add"), st.lists(st.tuples(_ids, _vec), min_size=1, max_size=4)),
    st.tuples(st.just("update"), st.tuples(_ids, _vec)),
    st.tuples(st.just("remove"), st.lists(_ids, max_size=3)),
)


_TOL = 1e-5  # float32 rounding of normalised rows moves a cosine by far less


def _brute(
    live: dict[str, list[int]], query: list[int], min_score: float | None
) -> list[tuple[str, float]]:
    """Every candidate's cosine in float64, best first (ties by id)."""
    q = np.asarray(query, dtype=np.float64)
    qn = float(np.linalg.norm(q))
    scored = []
    for id_, vec in live.items():
        v = np.asarray(vec, dtype=np.float64)
        vn = float(np.linalg.norm(v))
        score = 0.0 if qn == 0.0 or vn == 0.0 else float(v @ q / (vn * qn))
        # A score within rounding of min_score may fall either side: not decidable.
        assume(min_score is None or abs(score - min_score) > _TOL)
        if min_score is None or score >= min_score:
            scored.append((id_, score))
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return scored


def _agrees(got: list[tuple[str, float]], ranked: list[tuple[str, float]], limit: int) -> None:
    """`got` is the top `limit` of `ranked` up to rounding: same scores, and ids
    equal except that scores within `_TOL` of each other may come in any order
    (a tie group cut by the limit may contribute any of its members)."""
    want = ranked[:limit]
    assert len(got) == len(want)
    assert np.allclose([s for _, s in got], [s for _, s in want], atol=_TOL)
    for (gid, gscore), (wid, _) in zip(got, want, strict=True):
        if gid != wid:
            group = {i for i, s in ranked if abs(s - gscore) <= _TOL}
            assert gid in group, (got, want)
            assert wid in group, (got, want)
    assert len({i for i, _ in got}) == len(got)


def _arr(rows: list[list[int]]) -> npt.NDArray[np.float32]:
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), DIM)


@settings(deadline=None)  # examples from the profile (ci: 100)
@given(
    ops=st.lists(_op, max_size=25),
    query=_vec,
    limit=st.integers(1, 6),
    min_score=st.none() | st.sampled_from([-1.0, 0.0, 0.5]),
    filtered=st.booleans(),
)
@example(
    ops=[("add", [("r1", [1, 0, 0, 0, 0]), ("r0", [1, 0, 0, 0, 0]), ("r2", [2, 0, 0, 0, 0])])],
    query=[1, 0, 0, 0, 0],
    limit=2,
    min_score=None,
    filtered=False,
)
def test_incremental_index_equals_a_rebuilt_one_and_brute_force(
    ops: list[tuple[str, object]],
    query: list[int],
    limit: int,
    min_score: float | None,
    filtered: bool,
) -> None:
    index = ExactIndex(DIM)
    live: dict[str, list[int]] = {}
    for kind, arg in ops:
        if kind == "add":
            pairs = dict(arg)  # type: ignore[call-overload]
            index.add(list(pairs), _arr(list(pairs.values())))
            live.update(pairs)
        elif kind == "update":
            id_, vec = arg  # type: ignore[misc]
            if id_ in live:
                index.update(id_, np.asarray(vec, dtype=np.float32))
                live[id_] = vec
        else:
            index.remove(arg)  # type: ignore[arg-type]
            for id_ in arg:  # type: ignore[attr-defined]
                live.pop(id_, None)
    assert sorted(index.ids) == sorted(live)
    assert len(index) == len(live)

    rebuilt = ExactIndex(DIM)
    if live:
        rebuilt.add(list(live), _arr(list(live.values())))
    q = np.asarray(query, dtype=np.float32)
    keep = sorted(live)[::2] if filtered else None

    def run(ix: ExactIndex) -> list[tuple[str, float]]:
        positions = None
        if keep is not None:
            positions = np.asarray([ix.position(i) for i in keep], dtype=np.intp)
        hits = ix.search(q, limit, min_score=min_score, positions=positions)
        return [(ix.ids[p], s) for p, s in hits]

    got = run(index)
    assert got == run(rebuilt)
    subset = live if keep is None else {i: live[i] for i in keep}
    _agrees(got, _brute(subset, query, min_score), limit)
    # Identical vectors are exact ties wherever they sit: they score the same and
    # come by id, and one is never returned ahead of (or without) a lower id twin.
    order = [i for i, _ in got]
    for pos, (gid, gscore) in enumerate(got):
        for other, vec in subset.items():
            if other < gid and vec == subset[gid]:
                assert other in order[:pos], (other, gid, got)
                assert got[order.index(other)][1] == gscore, (other, gid, got)


def test_identical_vectors_score_identically_wherever_they_sit() -> None:
    """Rows far apart in a large buffer (where BLAS kernels block differently)
    still tie exactly and come back in id order."""
    rng = np.random.default_rng(7)
    dim = 384
    base = rng.standard_normal((5_000, dim)).astype(np.float32)
    twin = rng.standard_normal(dim).astype(np.float32)
    base[3] = twin
    base[4_998] = twin
    ids = [f"id{i:05d}" for i in range(5_000)]
    ids[3], ids[4_998] = "b-twin", "a-twin"
    index = ExactIndex(dim)
    index.add(ids, base)
    hits = index.search(twin + np.float32(1e-3), 2)
    assert [index.ids[p] for p, _ in hits] == ["a-twin", "b-twin"]
    assert hits[0][1] == hits[1][1]


def test_rounding_in_the_scan_never_cuts_the_true_best_row() -> None:
    """Where the float32 scan ranks two near-identical rows the other way round
    from their exact scores, the exact best must still win: the scan keeps every
    row within its rounding margin of the cut and re-scores them exactly."""
    rng = np.random.default_rng(11)
    dim = 384
    q = rng.standard_normal(dim).astype(np.float32)
    found = None
    for _ in range(2_000):
        a = rng.standard_normal(dim).astype(np.float32)
        b = (a + rng.standard_normal(dim).astype(np.float32) * np.float32(1e-6)).astype(np.float32)
        rows = np.stack([a, b])
        index = ExactIndex(dim)
        index.add(["a", "b"], rows)
        unit = index.matrix
        approx = unit @ (q / np.linalg.norm(q)).astype(np.float32)
        exact = unit.astype(np.float64) @ (q.astype(np.float64) / np.linalg.norm(q))
        if (approx[0] - approx[1]) * (exact[0] - exact[1]) < 0:
            found = index, "a" if exact[0] > exact[1] else "b"
            break
    assert found is not None, "no rounding disagreement found: the case is not exercised"
    index, best = found
    hits = index.search(q, 1)
    assert index.ids[hits[0][0]] == best

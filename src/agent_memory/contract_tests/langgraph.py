"""Differential conformance for LangGraph stores (extras `conformance` and `langgraph`).

A hypothesis state machine drives any `langgraph.store.base.BaseStore` and
LangGraph's own `InMemoryStore` with the same batches (puts, deletes, gets,
searches with and without a query, filters, `limit`/`offset`, namespace
listings with prefix/suffix wildcards and `max_depth`, mixed batches) and
compares what they return::

    index = differential_index(dims)            # the reference embeds with this
    store = MyStore(index=index)                # yours: the same index config
    await run_differential(store, max_examples=30)   # an EMPTY store, on this loop

Every example starts with a seed batch of 2-8 items, most values hold an
indexed `text`, and later puts, searches and prefixes favour namespaces already
written to: about half the searches find items, so rankings, ties, pages and
filters are compared in most examples, not only in the rare one that happened
to build state. `run_differential` returns what it ran (`DifferentialRun`).

Where LangGraph leaves a rule open, or where `InMemoryStore` does something no
persistent store does, the suite states the rule instead of copying it:

- ORDER: search without a query returns the same items as the reference, in
  an order LangGraph does not fix (`InMemoryStore`: insertion order). Pages
  must be consistent slices of the full result; `plain_order` (a sort key over
  `SearchItem`s), when given, must order it.
- RANKING: with a query, the same items carry the same scores (within
  `SCORE_TOL`); items score-descending, equal scores by (namespace, key);
  items without a vector follow, and pages are slices of that ranking.
  (`InMemoryStore` breaks ties by insertion order and restarts its unscored
  tail at every offset.)
- NAMESPACES: `list_namespaces` lists namespaces holding at least one item.
  (`InMemoryStore` keeps listing a namespace after its last item is deleted,
  and even after a `get` on a namespace that never held one; the reference
  is pruned to the rule.)
- DUPLICATE TEXTS: `InMemoryStore` fails a batch in which two indexed texts
  are equal (it embeds each distinct text once, then counts the embeddings
  against every text); the reference repeats the embedding.
- WHOLE VALUE: a put's `index=["$"]` embeds the whole value, as `fields=["$"]`
  does (`InMemoryStore` embeds nothing for it); the reference follows.
- VECTORS: re-putting an item replaces all its vectors. (`InMemoryStore` keeps
  vectors of paths the new put does not produce; the reference drops them.)
- TIMESTAMPS are not compared with the reference (it resets `created_at` on
  every put); the store must keep `created_at <= updated_at`.
- INPUT: labels and keys hold any characters but NUL, `.` included (ops go to
  `batch` directly: LangGraph's `put()` itself refuses `.`), and labels may be
  longer than 512 bytes of UTF-8; values are JSON.

`strict_order=False` is for stores that, like LangGraph's own, leave open what
LangGraph leaves open (the canaries in tests/integrations run it on
`InMemoryStore`, `SqliteStore` and `PostgresStore`): equal scores may come in
any order (LG-RANK-4 is skipped), and a page is compared with the slice
`[offset:offset+limit]` of the full result as a set: as many items, each one
of the full result, none twice, and the same scores (so only items of equal
score, or unscored items, may trade places). Scores, score-descending order,
the unscored tail, filters, gets and namespace listings are checked as in
strict mode, which is the default (and what `AgentMemoryStore` runs).

`unsupported` names inputs a store documents it refuses (`UNSUPPORTED`), which
the suite then does not draw; each is a known difference from `InMemoryStore`,
for LangGraph's `SqliteStore` and `PostgresStore` (pinned in
tests/integrations/test_langgraph_canaries.py):

- "dotted-labels": `.` in a namespace label (they keep namespaces as
  `.`-joined text and raise `InvalidNamespaceError`, in `batch` too). Drawn
  labels have `.` replaced by `_`, so `("a_b",)` and `("a", "b")` still meet.
- "nested-filters": a filter whose value is a mapping of fields, e.g.
  `{"meta": {"tag": "x"}}` (they read its keys as operators and raise
  `ValueError: Unsupported operator`). Such searches run without a filter.
- "unscored-hits": a search with a query returns only items with a vector
  (`PostgresStore` joins on its vector table; `InMemoryStore` lists the others
  unscored after them). The reference's unscored items are left out.
- "query-offsets": a search with a query and an `offset` (`PostgresStore`
  fetches `2 * limit + 1` nearest rows before it skips `offset` of them, so a
  page past them comes back short). Such searches run with offset 0.
- "whole-value-index": a put's `index=["$"]` embedding the whole value (the
  suite's WHOLE VALUE rule; `PostgresStore`, like `InMemoryStore`, embeds
  nothing for it). Such puts are drawn with `index=None`.
- "unscored-offsets": consistent pages past the scored items (`InMemoryStore`
  restarts its unscored tail at every `offset`). A query search with an
  offset whose full result holds an unscored item has its page unchecked.
- "stale-vectors": a re-put replacing all the item's vectors (`PostgresStore`,
  like `InMemoryStore`, keeps the vectors of paths the new put does not
  produce). The reference keeps them too.
- "negative-zero": a float `-0.0` in a value round-tripping (`PostgresStore`'s
  JSONB gives back `0.0`). Drawn values hold `0.0` instead.
- "text-orderings": an ordering filter (`$gt $gte $lt $lte`) comparing
  numbers (`PostgresStore` compares the JSON text, `value->>'n' >= '-1'`, so
  `{"$gte": -1}` matches `-3`). Such searches run without a filter.

Edge clauses, each an async function of its own (run them on an empty store,
beside `run_differential`):

- `check_concurrent_writers(store)` (LG-CONC-1/2): 10 threads x 300 sync calls
  (put, get, search, put, delete, list) on 3 shared keys while the loop runs
  raise nothing, and the store is consistent afterwards.
- `check_non_finite_filters(store)` (LG-FILTER-2): `inf`, `-inf` and `nan` in
  filters select what `InMemoryStore` selects.
- `check_distance_types(factory, dims)` (LG-DIST-1/2): `distance_type` scores
  as PostgresStore's, or is refused at construction; unknown ones and unknown
  index keys are refused.
- `check_embedder_dimensions(factory)` (LG-DIMS-1): indexes of 12 and 1536
  dimensions (a provider's embeddings) rank and score as `InMemoryStore`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import time
import uuid
import zlib
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    rule,
    run_state_machine_as_test,
)
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    get_text_at_path,
    tokenize_path,
)
from langgraph.store.memory import InMemoryStore

from agent_memory.contract_tests._support import clause, shrink_budget

__all__ = [
    "DIFFERENTIAL_FIELDS",
    "SCORE_TOL",
    "UNSUPPORTED",
    "DifferentialRun",
    "ReferenceStore",
    "check_concurrent_writers",
    "check_distance_types",
    "check_embedder_dimensions",
    "check_non_finite_filters",
    "differential_embed",
    "differential_index",
    "run_differential",
]

SCORE_TOL = 1e-4
UNSUPPORTED = frozenset(
    {
        "dotted-labels",
        "nested-filters",
        "unscored-hits",
        "query-offsets",
        "whole-value-index",
        "unscored-offsets",
        "stale-vectors",
        "negative-zero",
        "text-orderings",
    }
)
_ORDERINGS = frozenset({"$gt", "$gte", "$lt", "$lte"})
DIFFERENTIAL_FIELDS = ["text"]
STEP_COUNT = 12
_ALL = 10_000
_T = TypeVar("_T")

_WORDS = ["coffee", "tea", "paris", "dark", "roast", "user", "likes", "tokyo"]
#: Labels longer than a store's ids (MAX_ID_BYTES, 512 bytes of UTF-8) too: a
#: rest label and a first label (a user id near the bound) of 520 bytes.
_LONG_LABEL = "L" * 520
_LONG_FIRST = "é" * 260
_LABELS = ["a", "b", "a.b", " ", "é", "*", "x y", "langgraph-ish", "user:1", _LONG_LABEL]
_FIRST = [label for label in _LABELS if label != "*"] + ["langgraph.", _LONG_FIRST]
_KEYS = ["k1", "k2", "k.3", " ", "", "ключ"]


def differential_embed(dims: int) -> Callable[[Sequence[str]], list[list[float]]]:
    """A deterministic bag-of-words embedding (never a zero vector)."""

    def embed(texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            row = [0.0] * dims
            row[0] = 0.5
            for word in str(text).lower().split():
                row[1 + zlib.crc32(word.encode("utf-8")) % (dims - 1)] += 1.0
            out.append(row)
        return out

    return embed


def differential_index(
    dims: int, embed: Callable[[Sequence[str]], Any] | None = None
) -> IndexConfig:
    """The index config both stores use: fields `["text"]`, the given embedding
    function (default `differential_embed(dims)`)."""
    return IndexConfig(
        dims=dims, embed=embed or differential_embed(dims), fields=list(DIFFERENTIAL_FIELDS)
    )


class ReferenceStore(InMemoryStore):
    """`InMemoryStore`, normalised where the suite states its own rule: a
    namespace without items is not listed, and a put replaces all vectors
    (unless `replace_vectors` is False: then only a delete drops them)."""

    replace_vectors = True

    def _extract_texts(self, put_ops: Any) -> Any:
        for (namespace, key), op in put_ops.items():  # after the batch's reads, before its writes
            if self.replace_vectors or op.value is None:
                self._vectors[namespace].pop(key, None)
        if not (put_ops and self.index_config and self.embeddings):
            return {}
        to_embed: dict[str, list[tuple[tuple[str, ...], str, str]]] = defaultdict(list)
        for op in put_ops.values():
            if op.value is None or op.index is False:
                continue
            if op.index is None:
                paths = self.index_config["__tokenized_fields"]  # type: ignore[typeddict-item]
            else:  # `$` means the whole value here too (InMemoryStore embeds nothing)
                paths = [(p, p if p == "$" else tokenize_path(p)) for p in op.index]
            for path, tokens in paths:
                texts = get_text_at_path(op.value, tokens)
                if len(texts) > 1:
                    for i, text in enumerate(texts):
                        to_embed[text].append((op.namespace, op.key, f"{path}.{i}"))
                elif texts:
                    to_embed[texts[0]].append((op.namespace, op.key, path))
        return to_embed

    def _insertinmem_store(self, to_embed: Any, embeddings: Any) -> None:
        # InMemoryStore embeds each distinct text once, then counts embeddings
        # against every (item, path) holding a text: repeat them to match.
        rows = [
            row for row, places in zip(embeddings, to_embed.values(), strict=True) for _ in places
        ]
        super()._insertinmem_store(to_embed, rows)

    def _prune(self) -> None:
        for namespace in [ns for ns, items in self._data.items() if not items]:
            del self._data[namespace]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        try:
            return super().batch(ops)
        finally:
            self._prune()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        try:
            return await super().abatch(ops)
        finally:
            self._prune()


# -- strategies -------------------------------------------------------------------
# Short texts often, so equal scores (ties) are common.
_text = st.sampled_from(["coffee", "tea"]) | st.lists(
    st.sampled_from(_WORDS), min_size=1, max_size=4
).map(" ".join)
_extra = {
    "tag": st.sampled_from(["x", "y", "z"]),
    "meta": st.fixed_dictionaries({"note": _text, "tag": st.sampled_from(["x", "y"])}),
    "items": st.lists(_text, max_size=3),
    "f": st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
}
# Most values hold a `text` (the indexed field), so searches rank several items.
_value = st.fixed_dictionaries(
    {"n": st.integers(-3, 3), "text": _text}, optional=_extra
) | st.fixed_dictionaries({"n": st.integers(-3, 3)}, optional={"text": _text, **_extra})
# A put's value, or None (a delete) one time in four.
_put_value = st.one_of(_value, _value, _value, st.none())
# Namespaces that differ only by where a `.` splits them are drawn often.
# (No flatmap here or below: building a strategy per draw was most of the cost.)
_namespace = st.sampled_from([("a.b",), ("a", "b"), ("a", "b", "a.b"), ("a.b", "a.b")]) | st.tuples(
    st.sampled_from(_FIRST), st.lists(st.sampled_from(_LABELS), max_size=2)
).map(lambda parts: (parts[0], *parts[1]))


def _cut(namespaces: st.SearchStrategy[tuple[str, ...]]) -> st.SearchStrategy[tuple[str, ...]]:
    """One of `namespaces` cut to its first 0-3 labels (often all of them)."""
    return st.tuples(namespaces, st.integers(0, 3)).map(lambda cut: cut[0][: cut[1]])


_prefix = _cut(_namespace)
_index = st.sampled_from([None, None, None, False, ["text"], ["meta.note"], ["items[*]"], ["$"]])
_filter = st.one_of(  # no filter half the time
    st.none(),
    st.none(),
    st.none(),
    st.fixed_dictionaries({"tag": st.sampled_from(["x", "y", "z"])}),
    st.fixed_dictionaries({"n": st.sampled_from([{"$gt": 0}, {"$lte": 1}, {"$ne": 2}, 1])}),
    st.fixed_dictionaries(  # operators combined (orderings on `n`: every value holds it)
        {"n": st.sampled_from([{"$gte": -1, "$lt": 2}, {"$eq": 1}, {"$gt": 0.5, "$ne": 3}])}
    ),
    st.fixed_dictionaries({"meta": st.fixed_dictionaries({"tag": st.sampled_from(["x", "y"])})}),
)
_path = st.lists(st.sampled_from([*_FIRST, "*"]), max_size=2).map(tuple)


@dataclass
class DifferentialRun:
    """What one `run_differential` did: `valid` examples as hypothesis counts
    them (the ones `max_examples` bounds; None when this hypothesis version does
    not report them), `examples` state machines run to their teardown (the valid
    ones plus any hypothesis abandoned part-way, having run out of data),
    `batches` compared between the two stores, `seconds` of wall time."""

    valid: int | None = None
    examples: int = 0
    batches: int = 0
    seconds: float = 0.0

    def __str__(self) -> str:
        valid = "" if self.valid is None else f"{self.valid} valid of "
        return f"{valid}{self.examples} examples, {self.batches} batches, {self.seconds:.1f} s"

    def note(self, statistics: Any) -> None:
        """Hypothesis's statistics callback: counts its valid test cases."""
        with contextlib.suppress(AttributeError, KeyError, TypeError):
            phases = [p for p in statistics.values() if isinstance(p, dict)]
            cases = [c for p in phases for c in p.get("test-cases", ())]
            self.valid = sum(1 for c in cases if c["status"] == "valid")


def _counting(note: Callable[[Any], None], run: Callable[[], None]) -> None:
    """Runs `run` with hypothesis's statistics reported to `note` (the hook its
    pytest plugin uses; without it, `run` just runs)."""
    try:
        from hypothesis.statistics import collector
    except ImportError:  # pragma: no cover - a future hypothesis
        run()
        return
    with cast(Any, collector).with_value(note):
        run()


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __repr__(self) -> str:
        return f"<raised {type(self.exc).__name__}: {self.exc}>"


def _shape(item: Item) -> tuple[tuple[str, ...], str, str]:
    return (tuple(item.namespace), item.key, json.dumps(item.value, sort_keys=True))


def _tie_order(hit: SearchItem) -> tuple[tuple[str, ...], str]:
    return (tuple(hit.namespace), hit.key)


async def _call(factory: Callable[[], Awaitable[BaseStore]]) -> BaseStore:
    return await factory()


class _Differential(RuleBasedStateMachine):
    def __init__(
        self,
        store: BaseStore | Callable[[], Awaitable[BaseStore]],
        loop: asyncio.AbstractEventLoop,
        index: IndexConfig | None,
        plain_order: Callable[[SearchItem], Any] | None,
        stats: DifferentialRun,
        strict_order: bool = True,
        unsupported: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__()
        self.stats = stats
        self.loop = loop
        self.store = store if isinstance(store, BaseStore) else self._await(_call(store))
        self.reference = ReferenceStore(index=index)
        self.reference.replace_vectors = "stale-vectors" not in unsupported
        self.indexed = index is not None
        self.plain_order = plain_order
        self.strict_order = strict_order
        self.unsupported = unsupported
        self.written: set[tuple[tuple[str, ...], str]] = set()
        self.run = uuid.uuid4().hex[:6]

    # -- plumbing -----------------------------------------------------------------
    def _unzeroed(self, value: Any) -> Any:
        """A drawn value, with `0.0` for `-0.0` under "negative-zero"."""
        if "negative-zero" not in self.unsupported:
            return value
        if isinstance(value, dict):
            return {k: self._unzeroed(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._unzeroed(v) for v in value]
        return 0.0 if isinstance(value, float) and value == 0 else value

    def _ns(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        """A drawn namespace (or path), without `.` when `dotted_labels=False`."""
        if "dotted-labels" not in self.unsupported:
            return namespace
        return tuple(label.replace(".", "_") for label in namespace)

    def _await(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    def _both(self, ops: list[Op], *, sync: bool = False) -> tuple[Any, Any]:
        """(store's results, reference's results): each a list, or `_Failed`."""
        self.stats.batches += 1
        got: Any
        want: Any
        try:
            got = self.store.batch(ops) if sync else self._await(self.store.abatch(ops))
        except Exception as exc:
            got = _Failed(exc)
        try:
            want = self.reference.batch(ops)
        except Exception as exc:
            want = _Failed(exc)
        rule_ = "both stores accept the same valid batch"
        assert not isinstance(got, _Failed), clause("LG-DIFF-1", rule_, (ops, got, want))
        assert not isinstance(want, _Failed), clause("LG-DIFF-1", rule_, (ops, got, want))
        return got, want

    def _check_item(self, got: Item | None, want: Item | None, where: str) -> None:
        assert (got is None) == (want is None), clause(
            "LG-GET-1", f"{where}: found in the store iff found in the reference", (got, want)
        )
        if got is None or want is None:
            return
        assert _shape(got) == _shape(want), clause(
            "LG-GET-2", f"{where}: namespace, key and value round-trip", (got, want)
        )
        assert got.created_at <= got.updated_at, clause(
            "LG-GET-3", f"{where}: created_at <= updated_at", (got.created_at, got.updated_at)
        )

    # -- rules --------------------------------------------------------------------
    @initialize(
        seed=st.lists(
            st.tuples(_namespace, st.sampled_from(_KEYS), _value, _index), min_size=2, max_size=8
        )
    )
    def starts_empty(self, seed: list[tuple[tuple[str, ...], str, dict[str, Any], Any]]) -> None:
        """The store starts empty; then a first put batch, so that searches
        compare rankings of several items from the first step on."""
        listed = self._await(self.store.alist_namespaces(limit=_ALL))
        assert listed == [], clause(
            "LG-CANARY-1", "the store starts empty (a fixture or a teardown leaks)", listed
        )
        if seed:
            self._put_all(seed, sync=False)

    def _namespaces(self) -> st.SearchStrategy[tuple[str, ...]]:
        """Any namespace, or (as often) one written to: items meet in namespaces."""
        if not self.written:
            return _namespace
        return _namespace | st.sampled_from(sorted({ns for ns, _ in self.written}))

    @rule(data=st.data(), sync=st.booleans())
    def put(self, data: st.DataObject, sync: bool) -> None:
        puts = data.draw(
            st.lists(
                st.tuples(self._namespaces(), st.sampled_from(_KEYS), _put_value, _index),
                min_size=1,
                max_size=4,
            ),
            label="puts",
        )
        self._put_all(puts, sync=sync)

    def _put_all(
        self, puts: Sequence[tuple[tuple[str, ...], str, dict[str, Any] | None, Any]], *, sync: bool
    ) -> None:
        whole = "whole-value-index" in self.unsupported
        puts = [
            (self._ns(ns), key, self._unzeroed(value), None if whole and index == ["$"] else index)
            for ns, key, value, index in puts
        ]
        ops: list[Op] = [PutOp(ns, key, value, index=index) for ns, key, value, index in puts]
        self.written.update((ns, key) for ns, key, _, _ in puts)
        got, want = self._both(ops, sync=sync)
        assert got == want == [None] * len(ops), clause("LG-PUT-1", "puts return None", got)

    @rule(namespace=_namespace, key=st.sampled_from(_KEYS))
    def get(self, namespace: tuple[str, ...], key: str) -> None:
        namespace = self._ns(namespace)
        got, want = self._both([GetOp(namespace, key)])
        self._check_item(got[0], want[0], f"get {namespace!r}/{key!r}")

    @rule(data=st.data())
    def get_written(self, data: st.DataObject) -> None:
        if not self.written:
            return
        namespace, key = data.draw(st.sampled_from(sorted(self.written)))
        got, want = self._both([GetOp(namespace, key)])
        self._check_item(got[0], want[0], f"get {namespace!r}/{key!r}")

    def _prefixes(self) -> st.SearchStrategy[tuple[str, ...]]:
        """Any prefix, or (twice as often) a prefix of a namespace written to: searches
        that find something are most of what the suite compares."""
        if not self.written:
            return _prefix
        held = _cut(st.sampled_from(sorted({ns for ns, _ in self.written})))
        return st.one_of(_prefix, held, held)

    @rule(
        data=st.data(),
        query=st.none() | _text,
        filter_=_filter,
        limit=st.integers(0, 4),
        offset=st.integers(0, 3),
    )
    def search(
        self,
        data: st.DataObject,
        query: str | None,
        filter_: dict[str, Any] | None,
        limit: int,
        offset: int,
    ) -> None:
        prefix = self._ns(data.draw(self._prefixes(), label="prefix"))
        nested = filter_ and any(
            isinstance(v, dict) and not all(k.startswith("$") for k in v) for v in filter_.values()
        )
        if nested and "nested-filters" in self.unsupported:
            filter_ = None
        ordered = filter_ and any(
            isinstance(v, dict) and not _ORDERINGS.isdisjoint(v) for v in filter_.values()
        )
        if ordered and "text-orderings" in self.unsupported:
            filter_ = None
        if query and "query-offsets" in self.unsupported:
            offset = 0
        op = SearchOp(prefix, filter_, limit, offset, query)
        full = SearchOp(prefix, filter_, _ALL, 0, query)
        (page, everything), (ref_page, ref_all) = self._both([op, full])
        where = f"search {prefix!r} query={query!r} filter={filter_!r}"
        if query and self.indexed and "unscored-hits" in self.unsupported:
            ref_all = [h for h in ref_all if h.score is not None]
            ref_page = ref_all[offset : offset + limit]
        got = {_shape(h): h for h in everything}
        want = {_shape(h): h for h in ref_all}
        assert sorted(got) == sorted(want), clause(
            "LG-SEARCH-1", f"{where}: the same items match", (sorted(got), sorted(want))
        )
        assert len(everything) == len(got), clause(
            "LG-SEARCH-1", f"{where}: each item once", everything
        )
        if query and self.indexed:
            self._check_ranking(where, everything, want)
            scoreless = any(h.score is None for h in ref_all)
            if offset == 0 or not scoreless:
                assert len(page) == len(ref_page), clause(
                    "LG-SEARCH-2", f"{where}: a page holds as many items", (page, ref_page)
                )
        else:
            for hit in everything:
                assert hit.score is None, clause(
                    "LG-SEARCH-3", f"{where}: no query (or no index), no score", hit
                )
            if self.plain_order is not None:
                order = sorted(everything, key=self.plain_order)
                assert [_shape(h) for h in everything] == [_shape(h) for h in order], clause(
                    "LG-SEARCH-4", f"{where}: the store's documented order", everything
                )
            assert len(page) == len(ref_page), clause(
                "LG-SEARCH-2", f"{where}: a page holds as many items", (page, ref_page)
            )
        tail = query and self.indexed and offset and any(h.score is None for h in everything)
        if tail and "unscored-offsets" in self.unsupported:
            return
        if self.strict_order:
            self._check_page(where, page, everything[offset : offset + limit])
        else:
            self._check_page_as_set(where, page, everything, everything[offset : offset + limit])

    def _check_ranking(
        self, where: str, ranked: list[SearchItem], want: dict[Any, SearchItem]
    ) -> None:
        for hit in ranked:
            ref = want[_shape(hit)]
            assert (hit.score is None) == (ref.score is None), clause(
                "LG-RANK-1", f"{where}: scored iff the reference scores it", (hit, ref)
            )
            if hit.score is not None and ref.score is not None:
                assert math.isclose(hit.score, ref.score, abs_tol=SCORE_TOL), clause(
                    "LG-RANK-1", f"{where}: the same score", (hit, ref.score)
                )
        scores = [h.score for h in ranked]
        first_none = next((i for i, s in enumerate(scores) if s is None), len(scores))
        assert all(s is None for s in scores[first_none:]), clause(
            "LG-RANK-2", f"{where}: items without a vector come last", scores
        )
        for a, b in itertools.pairwise(ranked[:first_none]):
            sa, sb = cast(float, a.score), cast(float, b.score)
            assert sa >= sb - SCORE_TOL, clause("LG-RANK-3", f"{where}: score descending", (sa, sb))
            if sa == sb and self.strict_order:
                assert _tie_order(a) < _tie_order(b), clause(
                    "LG-RANK-4", f"{where}: equal scores by (namespace, key)", (a, b)
                )

    @staticmethod
    def _check_page(where: str, page: list[SearchItem], want: list[SearchItem]) -> None:
        assert len(page) == len(want), clause(
            "LG-PAGE-1", f"{where}: a page is the slice [offset:offset+limit]", (page, want)
        )
        for a, b in zip(page, want, strict=True):
            if _shape(a) == _shape(b):
                continue
            tie = (
                a.score is not None
                and b.score is not None
                and math.isclose(a.score, b.score, abs_tol=SCORE_TOL)
            )
            assert tie, clause(
                "LG-PAGE-1", f"{where}: pages agree with the full result", (page, want)
            )

    @staticmethod
    def _check_page_as_set(
        where: str, page: list[SearchItem], everything: list[SearchItem], want: list[SearchItem]
    ) -> None:
        """`strict_order=False`: the page holds as many items as the slice, each
        one of the full result, none twice, with the slice's scores."""
        assert len(page) == len(want), clause(
            "LG-PAGE-1",
            f"{where}: a page holds as many items as [offset:offset+limit]",
            (page, want),
        )
        full = {_shape(h) for h in everything}
        shapes = [_shape(h) for h in page]
        assert len(set(shapes)) == len(shapes), clause(
            "LG-PAGE-1", f"{where}: a page holds no item twice", page
        )
        assert set(shapes) <= full, clause(
            "LG-PAGE-1", f"{where}: a page holds items of the full result", (page, everything)
        )

        def scores(hits: list[SearchItem]) -> list[float]:
            return sorted(-math.inf if h.score is None else h.score for h in hits)

        same = all(
            a == b or math.isclose(a, b, abs_tol=SCORE_TOL)
            for a, b in zip(scores(page), scores(want), strict=True)
        )
        assert same, clause("LG-PAGE-1", f"{where}: a page has the slice's scores", (page, want))

    @rule(
        prefix=st.none() | _path,
        suffix=st.none() | _path,
        max_depth=st.none() | st.integers(1, 3),
        limit=st.integers(0, 5),
        offset=st.integers(0, 3),
    )
    def list_namespaces(
        self,
        prefix: tuple[str, ...] | None,
        suffix: tuple[str, ...] | None,
        max_depth: int | None,
        limit: int,
        offset: int,
    ) -> None:
        prefix = None if prefix is None else self._ns(prefix)
        suffix = None if suffix is None else self._ns(suffix)
        conditions = []
        if prefix:
            conditions.append(MatchCondition("prefix", prefix))
        if suffix:
            conditions.append(MatchCondition("suffix", suffix))
        op = ListNamespacesOp(tuple(conditions), max_depth, limit, offset)
        got, want = self._both([op])
        assert got[0] == want[0], clause(
            "LG-NS-1", f"list_namespaces {op!r}: namespaces holding items, sorted", got[0]
        )

    @rule(
        namespace=_namespace,
        key=st.sampled_from(_KEYS),
        value=_put_value,
        sync=st.booleans(),
    )
    def mixed_batch(
        self, namespace: tuple[str, ...], key: str, value: dict[str, Any] | None, sync: bool
    ) -> None:
        """Reads in a batch see the state before the batch's puts."""
        namespace, value = self._ns(namespace), self._unzeroed(value)
        self.written.add((namespace, key))
        ops: list[Op] = [
            GetOp(namespace, key),
            PutOp(namespace, key, value),
            SearchOp(namespace[:1], None, _ALL, 0, None),
            GetOp(namespace, key),
        ]
        got, want = self._both(ops, sync=sync)
        self._check_item(got[0], want[0], "get before a put in the same batch")
        self._check_item(got[3], want[3], "get after a put in the same batch")
        assert sorted(map(_shape, got[2])) == sorted(map(_shape, want[2])), clause(
            "LG-BATCH-1", "a search in a batch sees the state before its puts", got[2]
        )

    def teardown(self) -> None:
        ops: list[Op] = [PutOp(ns, key, None) for ns, key in sorted(self.written)]
        if ops:
            self._await(self.store.abatch(ops))
        left = self._await(self.store.alist_namespaces(limit=_ALL))
        assert left == [], clause("LG-CANARY-2", "deleting every item empties the store", left)
        self.stats.examples += 1


async def run_differential(
    store: BaseStore | Callable[[], Awaitable[BaseStore]],
    *,
    index: IndexConfig | None,
    max_examples: int,
    step_count: int = STEP_COUNT,
    plain_order: Callable[[SearchItem], Any] | None = None,
    strict_order: bool = True,
    unsupported: Iterable[str] = (),
    shrink: bool = True,
    derandomize: bool = False,
) -> DifferentialRun:
    """Run the state machine: `store` (EMPTY, open on this loop, built with the
    same `index` as given here, or without one when `index` is None; or an
    async factory of such stores, called on this loop for every example, which
    keeps a store that leaks from one example out of the next) against
    `ReferenceStore(index=index)`. The state machine runs in a worker thread and
    calls the store's `abatch` on this loop (and its sync `batch` from the
    thread). `max_examples` is yours to bound (e.g. from a hypothesis profile);
    `shrink=False` reports the first failing sequence unshrunk (faster);
    `derandomize=True` draws the same sequences on every run;
    `strict_order=False` leaves the order of equal scores open and compares
    pages as sets; `unsupported` (names in `UNSUPPORTED`) leaves out inputs
    the store refuses (see the module docstring; an unknown name raises
    `ValueError`). Returns what ran
    (`DifferentialRun`: examples, batches, seconds)."""
    refused = frozenset(unsupported)
    if refused - UNSUPPORTED:
        raise ValueError(
            f"unsupported: unknown {sorted(refused - UNSUPPORTED)}; known {sorted(UNSUPPORTED)}"
        )
    loop = asyncio.get_running_loop()
    base = settings.default
    inherited = list(base.suppress_health_check) if base is not None else []
    config = settings(
        max_examples=max_examples,
        deadline=None,
        stateful_step_count=step_count,
        suppress_health_check=[*inherited, HealthCheck.too_slow],
        phases=list(Phase) if shrink else [Phase.explicit, Phase.reuse, Phase.generate],
        derandomize=derandomize,
        database=None if derandomize or base is None else base.database,
    )

    stats = DifferentialRun()

    def factory() -> _Differential:
        return _Differential(store, loop, index, plain_order, stats, strict_order, refused)

    machine = cast(type[RuleBasedStateMachine], factory)
    started = time.perf_counter()
    with shrink_budget():
        await asyncio.to_thread(
            _counting, stats.note, lambda: run_state_machine_as_test(machine, settings=config)
        )
    stats.seconds = time.perf_counter() - started
    return stats


# -- edge clauses (each one async function; an EMPTY store unless stated) ------------
_EDGE_NS = ("lg-edge",)


async def check_non_finite_filters(store: BaseStore) -> None:
    """LG-FILTER-2: an ordering or equality filter against `inf`, `-inf` or
    `nan` selects what `InMemoryStore` selects (`$lt inf` and `$gt -inf` every
    number, `$eq nan` nothing), and raises nothing. Writes, then deletes, three
    items under `("lg-edge", "prices")`."""
    namespace = (*_EDGE_NS, "prices")
    reference = InMemoryStore()
    for i, price in enumerate([1.5, 10, -3]):
        for target in (store, reference):
            await target.aput(namespace, f"p{i}", {"price": price})
    try:
        for filter_ in (
            {"price": {"$lt": math.inf}},
            {"price": {"$gt": -math.inf}},
            {"price": {"$lte": math.inf, "$gte": -math.inf}},
            {"price": {"$eq": math.nan}},
            {"price": {"$gt": math.nan}},
            {"price": {"$ne": math.nan}},
            {"price": math.inf},
        ):
            try:
                got = await store.asearch(namespace, filter=filter_, limit=10)
            except Exception as exc:
                raise AssertionError(
                    clause("LG-FILTER-2", f"a non-finite filter {filter_!r} is accepted", exc)
                ) from exc
            want = await reference.asearch(namespace, filter=filter_, limit=10)
            assert sorted(h.key for h in got) == sorted(h.key for h in want), clause(
                "LG-FILTER-2",
                f"filter {filter_!r} selects what InMemoryStore selects",
                ([h.key for h in got], [h.key for h in want]),
            )
    finally:
        for i in range(3):
            await store.adelete(namespace, f"p{i}")


#: PostgresStore's scores per `index["distance_type"]` (1 - cosine distance,
#: minus the Euclidean distance, the dot product), the ones LangGraph users know.
DISTANCE_SCORES: dict[str, Callable[[Sequence[float], Sequence[float]], float]] = {
    "cosine": lambda a, b: (
        sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))
    ),
    "l2": lambda a, b: -math.dist(a, b),
    "inner_product": lambda a, b: sum(x * y for x, y in zip(a, b, strict=True)),
}


def _axis_embed(dims: int) -> Callable[[Sequence[str]], list[list[float]]]:
    """Texts "x", "2y", "xy" -> (1,0,..), (0,2,..), (1,1,..) in `dims` dimensions."""

    def embed(texts: Sequence[str]) -> list[list[float]]:
        rows = {"x": [1.0, 0.0], "2y": [0.0, 2.0], "xy": [1.0, 1.0]}
        return [[*rows[t], *[0.0] * (dims - 2)] for t in texts]

    return embed


async def check_distance_types(
    factory: Callable[[IndexConfig], Awaitable[BaseStore]], dims: int
) -> None:
    """LG-DIST-1: an `index` with `distance_type` "cosine", "l2" or
    "inner_product" either scores as PostgresStore does (`DISTANCE_SCORES`)
    or is refused at construction with a `ValueError` naming it (e.g.
    agent-memory's `ConfigurationError`); it is never silently scored another
    way. LG-DIST-2: an unknown `distance_type` or index key is refused the same
    way. `factory(index)` builds an EMPTY store with that index, whose
    embeddings have `dims` (>= 2) components; each store gets three items
    under `("lg-edge", "distance")`, deleted afterwards."""
    namespace = (*_EDGE_NS, "distance")
    embed = _axis_embed(dims)
    texts = {"a": "x", "b": "2y", "c": "xy"}
    for distance in ("cosine", "l2", "inner_product"):
        index = cast(IndexConfig, {**differential_index(dims, embed), "distance_type": distance})
        refusal: ValueError | None = None
        try:
            store = await factory(index)
        except ValueError as exc:
            refusal = exc
        if refusal is not None:
            assert distance in str(refusal), clause(
                "LG-DIST-1", f"a refusal of distance_type {distance!r} names it", refusal
            )
            continue
        for key, text in texts.items():
            await store.aput(namespace, key, {"text": text})
        try:
            hits = await store.asearch(namespace, query="x", limit=10)
            query = embed(["x"])[0]
            want = {k: DISTANCE_SCORES[distance](query, embed([t])[0]) for k, t in texts.items()}
            got = {h.key: h.score for h in hits}
            same = set(got) == set(want) and all(
                (score := got[k]) is not None and math.isclose(score, w, abs_tol=SCORE_TOL)
                for k, w in want.items()
            )
            assert same, clause(
                "LG-DIST-1", f"distance_type {distance!r} scores as PostgresStore does", (got, want)
            )
        finally:
            for key in texts:
                await store.adelete(namespace, key)
    for wrong in ({"distance_type": "hamming"}, {"no_such_option": 1}):
        index = cast(IndexConfig, {**differential_index(dims, embed), **wrong})
        refused: ValueError | None = None
        try:
            await factory(index)
        except ValueError as exc:
            refused = exc
        assert refused is not None, clause(
            "LG-DIST-2", f"index {wrong!r} is refused at construction"
        )
        name = next(iter(wrong.values() if "distance_type" in wrong else wrong))
        assert str(name) in str(refused), clause(
            "LG-DIST-2", f"the refusal of {wrong!r} names it", refused
        )


async def check_embedder_dimensions(
    factory: Callable[[IndexConfig], Awaitable[BaseStore]],
    dims: Iterable[int] = (12, 1536),
) -> None:
    """LG-DIMS-1: for each of `dims`, a store built by `factory(index)` with an
    index of that `dims` and an `embed` of that many components (a LangGraph
    user's provider embeddings: 1536 for OpenAI's) stores, ranks and scores
    three items as `InMemoryStore` with the same index does. `factory` builds
    an EMPTY store (agent-memory: a memory opened with
    `connect(url, embedder=index["embed"])`); the items are deleted afterwards."""
    namespace = (*_EDGE_NS, "dims")
    values = {"a": "dark roast coffee", "b": "green tea", "c": "coffee with tea"}
    for size in dims:
        index = differential_index(size)
        try:
            store = await factory(index)
        except Exception as exc:
            raise AssertionError(
                clause("LG-DIMS-1", f"a store with an index of dims={size} can be built", exc)
            ) from exc
        reference = InMemoryStore(index=differential_index(size))
        try:
            for key, text in values.items():
                await store.aput(namespace, key, {"text": text})
                await reference.aput(namespace, key, {"text": text})
            got = await store.asearch(namespace, query="coffee", limit=10)
            want = await reference.asearch(namespace, query="coffee", limit=10)
            scores = {h.key: h.score for h in got}
            same = {h.key for h in got} == {h.key for h in want} and all(
                (score := scores[h.key]) is not None
                and h.score is not None
                and math.isclose(score, h.score, abs_tol=SCORE_TOL)
                for h in want
            )
            assert same, clause(
                "LG-DIMS-1",
                f"dims={size}: the same items and scores as InMemoryStore",
                (scores, {h.key: h.score for h in want}),
            )
        finally:
            for key in values:
                await store.adelete(namespace, key)


def _writer(store: BaseStore, worker: int, calls: int, keys: int) -> list[BaseException]:
    """One thread's calls on shared keys: put, get, search, put, delete, list."""
    namespace = (*_EDGE_NS, "concurrent")
    errors: list[BaseException] = []
    steps = itertools.cycle(["put", "get", "search", "put", "delete", "list"])
    for call in range(calls):
        key = f"k{(worker + call) % keys}"
        try:
            match next(steps):
                case "put":
                    store.put(namespace, key, {"text": "coffee", "n": worker * calls + call})
                case "get":
                    item = store.get(namespace, key)
                    if item is not None and item.created_at > item.updated_at:
                        raise AssertionError(f"created_at > updated_at on {item!r}")
                case "search":
                    store.search(_EDGE_NS, query="coffee" if call % 12 == 2 else None, limit=5)
                case "delete":
                    store.delete(namespace, key)
                case _:
                    store.list_namespaces(prefix=_EDGE_NS)
        except BaseException as exc:  # every failure counts
            errors.append(exc)
    return errors


async def check_concurrent_writers(
    store: BaseStore, *, threads: int = 10, calls: int = 300, keys: int = 3
) -> int:
    """LG-CONC-1: `threads` threads calling the sync API (put, get, search, put
    again, delete, list_namespaces) on `keys` shared keys while this loop runs
    (LangGraph's `test_large_batches` workload; parallel graph branches writing
    one key) make no call raise: a put is an upsert, a delete of a missing item
    a no-op. LG-CONC-2: afterwards the store is consistent (each live item is
    found by a search and its namespace listed; a put to each key lands).
    `store` is open on this loop; its items under `("lg-edge", "concurrent")`
    are deleted at the end. Returns the number of calls made."""
    namespace = (*_EDGE_NS, "concurrent")
    with ThreadPoolExecutor(threads) as pool:
        futures = [
            asyncio.wrap_future(pool.submit(_writer, store, w, calls, keys)) for w in range(threads)
        ]
        outcomes = await asyncio.gather(*futures)
    errors = [e for errs in outcomes for e in errs]
    assert errors == [], clause(
        "LG-CONC-1",
        f"no call of {threads * calls} concurrent ones raises ({len(errors)} did)",
        errors[:5],
    )
    try:
        live = [f"k{k}" for k in range(keys) if await store.aget(namespace, f"k{k}")]
        found = sorted(h.key for h in await store.asearch(namespace, limit=keys + 1))
        listed = await store.alist_namespaces(prefix=_EDGE_NS)
        assert found == live, clause("LG-CONC-2", "a search finds every live item", (found, live))
        assert listed == ([namespace] if live else []), clause(
            "LG-CONC-2", "the namespace is listed iff it holds an item", (listed, live)
        )
        for k in range(keys):
            await store.aput(namespace, f"k{k}", {"text": "tea"})
            item = await store.aget(namespace, f"k{k}")
            assert item is not None, clause("LG-CONC-2", "a put after the storm lands", k)
            assert item.value == {"text": "tea"}, clause(
                "LG-CONC-2", "a put after the storm lands", item
            )
    finally:
        for k in range(keys):
            await store.adelete(namespace, f"k{k}")
    return threads * calls

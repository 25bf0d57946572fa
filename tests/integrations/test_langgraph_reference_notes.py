"""What the installed LangGraph's `InMemoryStore` does that the differential
suite leaves unspecified (agent_memory.contract_tests.langgraph, its notes;
docs/integrations.md, the comparison table): each note holds on this version,
and `ReferenceStore` normalises the ones it says it does. When LangGraph
changes one of these, a test here fails and the notes are due an update."""

from __future__ import annotations

import time

import pytest
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from agent_memory.contract_tests.langgraph import ReferenceStore, differential_index

INDEX = differential_index(8)


def test_an_emptied_namespace_stays_listed() -> None:
    raw, ref = InMemoryStore(), ReferenceStore()
    for store in (raw, ref):
        store.put(("a",), "k", {"n": 1})
        store.delete(("a",), "k")
    assert raw.list_namespaces() == [("a",)]
    assert ref.list_namespaces() == []


def test_a_get_lists_a_namespace_that_never_held_an_item() -> None:
    raw, ref = InMemoryStore(), ReferenceStore()
    for store in (raw, ref):
        assert store.get(("ghost",), "k") is None
    assert raw.list_namespaces() == [("ghost",)]
    assert ref.list_namespaces() == []


def test_equal_indexed_texts_in_one_batch_fail_it() -> None:
    ops = [PutOp(("a",), "k1", {"text": "tea"}), PutOp(("a",), "k2", {"text": "tea"})]
    with pytest.raises(ValueError, match="Number of embeddings"):
        InMemoryStore(index=INDEX).batch(ops)
    ref = ReferenceStore(index=INDEX)
    ref.batch(ops)
    assert [h.score is not None for h in ref.search(("a",), query="tea")] == [True, True]


def test_index_dollar_on_a_put_embeds_nothing() -> None:
    raw, ref = InMemoryStore(index=INDEX), ReferenceStore(index=INDEX)
    for store in (raw, ref):
        store.put(("a",), "k", {"text": "tea"}, index=["$"])
    assert [h.score for h in raw.search(("a",), query="tea")] == [None]
    assert [h.score is not None for h in ref.search(("a",), query="tea")] == [True]


def test_a_re_put_keeps_vectors_of_paths_it_no_longer_indexes() -> None:
    raw, ref = InMemoryStore(index=INDEX), ReferenceStore(index=INDEX)
    for store in (raw, ref):
        store.put(("a",), "k", {"text": "tea", "note": "coffee"}, index=["text", "note"])
        store.put(("a",), "k", {"text": "paris"}, index=["text"])
    raw_score = raw.search(("a",), query="coffee")[0].score
    ref_score = ref.search(("a",), query="coffee")[0].score
    assert raw_score is not None
    assert ref_score is not None
    assert raw_score > 0.99 > ref_score  # the stale 'coffee' vector still matches


def test_created_at_is_reset_by_every_put() -> None:
    store = InMemoryStore()
    store.put(("a",), "k", {"n": 1})
    first = store.get(("a",), "k")
    time.sleep(0.002)
    store.put(("a",), "k", {"n": 2})
    again = store.get(("a",), "k")
    assert first is not None
    assert again is not None
    assert again.created_at > first.created_at


def test_equal_scores_keep_insertion_order() -> None:
    store = InMemoryStore(index=INDEX)
    store.put(("a",), "z", {"text": "tea"})
    store.put(("a",), "b", {"text": "tea"})
    assert [h.key for h in store.search(("a",), query="tea")] == ["z", "b"]


def test_the_unscored_tail_restarts_at_every_offset() -> None:
    store = InMemoryStore(index=INDEX)
    store.put(("a",), "v", {"text": "tea"})
    store.put(("a",), "w", {"text": "coffee"})
    for key in ("u1", "u2"):
        store.put(("a",), key, {"n": 1}, index=False)
    full = [h.key for h in store.search(("a",), query="tea", limit=10)]
    assert full == ["v", "w", "u1", "u2"]
    assert [h.key for h in store.search(("a",), query="tea", offset=3)] == ["u1", "u2"]


def test_an_ordering_filter_on_a_non_number_raises() -> None:
    store = InMemoryStore()
    store.put(("a",), "k", {"t": "x"})
    with pytest.raises(ValueError):
        store.search(("a",), filter={"t": {"$gt": 1}})

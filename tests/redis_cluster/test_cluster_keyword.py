"""Keyword search on a Redis Cluster takes the grouped path of one server (the
cluster's Search module loads no document fields, so it groups on the sortable
`terms`): equal to the in-process store, no search reading every candidate,
owners in different slots. An index of an earlier release (`terms` not
sortable) still answers, by reading the candidates."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from redis_keyword_cases import (
    COMMON,
    GUESS_TOO_HIGH,
    Watched,
    agree_on_bounds,
    agree_on_ties,
    bound_rows,
    tie_texts,
)

OWNERS = ("alice", "bob {x}:*", "carol")  # three slots (the records' hash tags)


@settings(max_examples=15, deadline=None)
@given(rows=bound_rows)
def test_common_terms_left_out_rank_as_the_in_process_store(
    redis_cluster_url: str, rows: list[tuple[list[str], int, bool]]
) -> None:
    asyncio.run(agree_on_bounds(redis_cluster_url, rows, [1, 2, 5, 12], OWNERS))


def test_a_guess_too_high_runs_the_query_again(redis_cluster_url: str) -> None:
    grouped = asyncio.run(agree_on_bounds(redis_cluster_url, GUESS_TOO_HIGH, [1, 3], OWNERS))
    assert [COMMON in q for q in grouped[0]] == [False, True]


@settings(max_examples=15, deadline=None)
@given(texts=tie_texts, ids=st.randoms(use_true_random=False), limit=st.integers(1, 40))
def test_tie_heavy_text_ranks_as_the_in_process_store(
    redis_cluster_url: str, texts: list[str], ids: Any, limit: int
) -> None:
    names = [f"{'Rr'[i % 2]}{i:03d}" for i in range(len(texts))]
    ids.shuffle(names)
    store = asyncio.run(agree_on_ties(redis_cluster_url, texts, names, limit, OWNERS))
    assert store.candidate_reads == 0, "no search read every candidate"


class _EarlierIndex(Watched):
    """Creates the index as an earlier release did: `terms` not sortable."""

    def _create_args(self, name: str) -> list[Any]:
        args = super()._create_args(name)
        at = args.index("terms")
        assert args[at + 1 : at + 5] == ["TEXT", "NOSTEM", "SORTABLE", "UNF"]
        return [*args[: at + 3], *args[at + 5 :]]


def test_an_index_without_sortable_terms_reads_the_candidates(redis_cluster_url: str) -> None:
    texts = ["apple pie", "pie apple", "apple apple cherry", "cherry tart and pie"] * 5
    names = [f"r{i:02d}" for i in range(len(texts))]
    store = asyncio.run(
        agree_on_ties(redis_cluster_url, texts, names, 3, OWNERS, store_type=_EarlierIndex)
    )
    assert store.candidate_reads > 0
    assert store._grouping is True, "drop_index: the next index has sortable terms"

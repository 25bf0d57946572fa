"""Keyword search cases run on one Redis server (`tests/redis`) and on a cluster
(`tests/redis_cluster`): results compared with the in-process store (the oracle),
with the path the search took recorded."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
from hypothesis import strategies as st

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.redis import RedisMemoryStore
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

__all__ = [
    "COMMON",
    "GUESS_TOO_HIGH",
    "Watched",
    "agree_on_bounds",
    "agree_on_ties",
    "bound_rows",
    "tie_texts",
]

SPACE = EmbeddingSpace(model="keyword-cases", dimension=8)
_VEC = np.eye(8, dtype=np.float32)[0]
_T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Watched(RedisMemoryStore):
    """Records, per keyword search, the candidates' query of each grouping step,
    and counts the reads of every candidate (the one-script path)."""

    grouped: list[list[str]]
    candidate_reads: int

    async def search_text(self, *args: Any, **kwargs: Any) -> Any:
        self.grouped.append([])
        return await super().search_text(*args, **kwargs)

    async def _text_ft(self, owner: str, stats: str, script: Any, script_c: Any, args: Any) -> Any:
        if script is self._groups:
            self.grouped[-1].append(args[1])
        return await super()._text_ft(owner, stats, script, script_c, args)

    async def _text_candidates(self, *args: Any, **kwargs: Any) -> Any:
        self.candidate_reads += 1
        return await super()._text_candidates(*args, **kwargs)


def _open(url: str, store_type: type[Watched] = Watched) -> Watched:
    store = store_type.from_url(url, SPACE, deployment="t" + uuid.uuid4().hex[:12])
    store.grouped = []
    store.candidate_reads = 0
    return store


def _record(owner: str, rid: str, content: str) -> MemoryRecord:
    return MemoryRecord(
        owner=owner, id=rid, namespace="facts", kind="fact", content=content or "-",
        vector=_VEC, created_at=_T0, updated_at=_T0,
    )  # fmt: skip


def _ranked(hits: list[Any]) -> list[tuple[str, float]]:
    return [(h.record.id, h.score) for h in hits]


async def _agree(
    store: Watched,
    records: list[MemoryRecord],
    owners: tuple[str, ...],
    queries: tuple[str, ...],
    limits: list[int],
) -> None:
    oracle = InMemoryMemoryStore(SPACE)
    for s in (store, oracle):
        await s.add(records)
    for owner in owners:
        for query in queries:
            for limit in limits:
                got = await store.search_text(owner, query, limit=limit)
                want = await oracle.search_text(owner, query, limit=limit)
                # Equal, not close: the same BM25 over the same statistics.
                assert _ranked(got) == _ranked(want), (owner, query, limit)
                assert [h.record for h in got] == [h.record for h in want]


# A speaker's name in most records (as in a conversation's turns), words of two
# frequencies, and a filler that makes some records long (so a rare word there
# scores below its guess: the guess is checked and the query runs again).
COMMON = "john"
_MID = ("walk", "dinner")
_RARE = ("alchemist", "telescope", "marathon")
_FILLER = "lorem ipsum dolor sit amet consectetur"
_BOUND_QUERIES = (
    f"{COMMON} {_RARE[0]}",
    f"{COMMON} {_MID[0]} {_RARE[1]}",
    f"{COMMON} {' '.join(_MID)} {' '.join(_RARE)}",
    f"{_MID[1]} {_RARE[2]}",
)
bound_rows = st.lists(
    st.tuples(
        st.lists(st.sampled_from(_MID + _RARE), max_size=3),
        st.integers(0, 4),  # filler repeats
        st.booleans(),  # the speaker's name
    ),
    min_size=1,
    max_size=60,
)
# 40 records: 20 hold the name only (short), 2 the rare word with a long filler,
# the rest the mid word: `john` alone outscores the long rare records.
GUESS_TOO_HIGH = [([], 0, True)] * 20 + [([_RARE[0]], 4, False)] * 2 + [([_MID[0]], 0, False)] * 18


async def agree_on_bounds(
    url: str,
    rows: list[tuple[list[str], int, bool]],
    limits: list[int],
    owners: tuple[str, ...] = ("alice",),
    store_type: type[Watched] = Watched,
) -> list[list[str]]:
    """`bound_rows`' records (for each owner) agree with the oracle on every query
    and limit; the grouping queries per search."""
    store = _open(url, store_type)
    records = [
        _record(owner, f"r{i:03d}", " ".join([COMMON] * name + words + [_FILLER] * filler))
        for owner in owners
        for i, (words, filler, name) in enumerate(rows)
    ]
    try:
        await _agree(store, records, owners, _BOUND_QUERIES, limits)
        assert store.candidate_reads == 0, "no search read every candidate"
    finally:
        await store.drop_index()
        await store.close()
    return store.grouped


_TIE_QUERIES = ("apple", "pie cherry", "apple pie tart painted")
tie_texts = st.lists(
    st.sampled_from(
        ("apple pie", "pie apple", "apple apple cherry", "cherry tart and pie", "painted apples")
    ),
    min_size=1,
    max_size=60,
)


async def agree_on_ties(
    url: str,
    texts: list[str],
    names: list[str],
    limit: int,
    owners: tuple[str, ...] = ("alice",),
    store_type: type[Watched] = Watched,
) -> Watched:
    """Many records sharing a few texts (whole groups of equal scores, ids in the
    given order) agree with the oracle, for each owner; returns the closed store."""
    store = _open(url, store_type)
    records = [
        _record(owner, rid, text)
        for owner in owners
        for rid, text in zip(names, texts, strict=True)
    ]
    try:
        await _agree(
            store, records, owners, ("apple", "pie cherry", "apple pie tart painted"), [limit]
        )
    finally:
        await store.drop_index()
        await store.close()
    return store

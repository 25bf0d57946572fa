"""The in-memory store's keyword search keeps a postings map (term -> ids) in step
with every write; its results must equal BM25 computed from scratch over the
owner's filtered records after any sequence of adds, replacements and deletes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.domain.lexical import bm25_by_postings, bm25_scores, query_terms, term_counts
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

SPACE = EmbeddingSpace(model="postings-test", dimension=4)
T0 = datetime(2025, 1, 1, tzinfo=UTC)
WORDS = ["kestrel", "ridge", "quarry", "lake", "camping", "painted", "paint", "dog", "the"]

texts = st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join)
ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.sampled_from("abcdef"),
            texts,
            texts,
            st.sampled_from(["n1", "n2"]),
            st.sampled_from(["turn", "fact"]),
        ),
        st.tuples(st.just("delete"), st.sampled_from("abcdef")),
        st.tuples(st.just("search"), texts, st.sampled_from([None, "n1"])),
    ),
    max_size=25,
)


def _record(rid: str, content: str, context: str, namespace: str, kind: str) -> MemoryRecord:
    return MemoryRecord(
        id=rid,
        owner="o",
        namespace=namespace,
        kind=kind,
        content=content or "-",
        context=context,
        vector=np.ones(4, dtype=np.float32),
        created_at=T0,
        updated_at=T0,
    )


def _expected(
    records: dict[str, MemoryRecord], query: str, namespace: str | None
) -> list[tuple[str, float]]:
    terms = query_terms(query)
    ids = sorted(i for i, r in records.items() if namespace is None or r.namespace == namespace)
    docs = [term_counts(f"{records[i].content}\n{records[i].context}") for i in ids]
    if not terms or not docs:
        return []
    scores = bm25_scores(
        terms,
        docs,
        total_docs=len(docs),
        avg_length=sum(length for _, length in docs) / len(docs),
        doc_freq={t: sum(1 for counts, _ in docs if t in counts) for t in terms},
    )
    ranked = sorted(
        ((s, i) for s, i in zip(scores, ids, strict=True) if s > 0), key=lambda p: (-p[0], p[1])
    )
    return [(i, s) for s, i in ranked[:50]]


@settings(max_examples=150)
@given(ops)
def test_keyword_search_equals_bm25_from_scratch(steps: list[tuple[object, ...]]) -> None:
    async def run() -> None:
        store = InMemoryMemoryStore(SPACE)
        mirror: dict[str, MemoryRecord] = {}
        for step in steps:
            if step[0] == "put":
                _, rid, content, context, namespace, kind = step
                record = _record(str(rid), str(content), str(context), str(namespace), str(kind))
                if record.id in mirror:
                    await store.update(record)  # a replacement re-indexes its terms
                else:
                    await store.add([record])
                mirror[record.id] = record
            elif step[0] == "delete":
                rid = str(step[1])
                if rid in mirror:
                    await store.delete("o", rid)
                    del mirror[rid]
            else:
                _, query, namespace = step
                if not query_terms(str(query)):
                    continue
                got = await store.search_text("o", str(query), limit=50, namespace=namespace)
                want = _expected(
                    mirror, str(query), namespace if isinstance(namespace, str) else None
                )
                assert [(h.record.id, h.score) for h in got] == want
        await store.close()

    asyncio.run(run())


@given(
    st.lists(texts, min_size=1, max_size=12),
    texts,
    st.one_of(st.none(), st.sets(st.integers(0, 11))),
)
def test_bm25_by_postings_equals_bm25_scores_exactly(
    contents: list[str], query: str, allowed: set[int] | None
) -> None:
    docs = {f"d{i}": term_counts(text) for i, text in enumerate(contents)}
    terms = query_terms(query)
    postings: dict[str, dict[str, int]] = {}
    for rid, (counts, _) in docs.items():
        for term, tf in counts.items():
            postings.setdefault(term, {})[rid] = tf
    lengths = {rid: length for rid, (_, length) in docs.items()}
    within = None if allowed is None else {f"d{i}" for i in allowed}
    ids = sorted(docs if within is None else set(docs) & within)
    n = len(ids)
    avg = sum(docs[i][1] for i in ids) / n if n else 0.0
    doc_freq = {t: sum(1 for i in ids if t in docs[i][0]) for t in terms}
    want = bm25_scores(
        terms, [docs[i] for i in ids], total_docs=n, avg_length=avg, doc_freq=doc_freq
    )
    got = bm25_by_postings(
        terms,
        postings,
        lengths,
        total_docs=n,
        avg_length=avg,
        doc_freq=doc_freq,
        within=within,
    )
    assert {i: s for i, s in zip(ids, want, strict=True) if s > 0} == got

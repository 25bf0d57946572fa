"""The batch codec writes exactly the stored format: the same point ids and
payloads as the plain one-record-at-a-time definitions below, so collections
written before the batch codec read the same, and vice versa."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from qdrant_client import models as qm

from agent_memory.adapters.qdrant._codec import (
    _POINT_NAMESPACE,
    batch_payloads,
    make_point,
    point_ids,
    record_from_payload,
    record_to_payload,
)
from agent_memory.adapters.qdrant._lexical import record_terms
from agent_memory.domain.lexical import LEXICAL_VERSION, term_counts, tokenize
from agent_memory.domain.records import MemoryRecord

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Text without lone surrogates (records reject those); names are non-blank, without NUL.
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
_NAME = _TEXT.filter(lambda s: s.strip() != "" and "\x00" not in s)  # ids hold no NUL
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_MOMENT = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)


def _reference_payload(r: MemoryRecord) -> dict[str, Any]:
    """The stored payload format, one record at a time."""
    micros = timedelta(microseconds=1)
    return {
        "owner": r.owner,
        "id": r.id,
        "namespace": r.namespace,
        "kind": r.kind,
        "content": r.content,
        "context": r.context,
        "created_us": (r.created_at - _EPOCH) // micros,
        "updated_us": (r.updated_at - _EPOCH) // micros,
        "importance": r.importance,
        "attributes_json": json.dumps(r.attributes) if r.attributes else "{}",
        "v": base64.b64encode(r.vector.astype("<f4").tobytes()).decode("ascii"),
        **_reference_terms(r.content, r.context),
    }


def _reference_terms(content: str, context: str) -> dict[str, Any]:
    """The keyword fields: `domain.lexical` terms of content + context."""
    tokens = tokenize(content) + tokenize(context)
    distinct = list(dict.fromkeys(tokens))
    return {
        "terms": distinct,
        "term_counts": [tokens.count(t) for t in distinct],
        "token_count": len(tokens),
        "lexical": LEXICAL_VERSION,
    }


@st.composite
def _records(draw: st.DrawFn, dim: int) -> MemoryRecord:
    created = draw(_MOMENT)
    vector = draw(
        st.lists(
            st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=dim, max_size=dim
        )
    )
    return MemoryRecord(
        id=draw(_NAME),
        owner=draw(st.sampled_from(["alice", "bob", "ü:所"]) | _NAME),
        namespace=draw(_NAME),
        kind=draw(_NAME),
        content=draw(_TEXT),
        context=draw(_TEXT),
        vector=np.array(vector, dtype=np.float32),
        created_at=created,
        updated_at=draw(st.just(created) | _MOMENT),
        importance=draw(st.floats(min_value=0.0, max_value=1.0)),
        attributes=draw(st.dictionaries(_TEXT, _JSON, max_size=3)),
    )


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dim=st.integers(min_value=1, max_value=13))
def test_batch_payloads_equal_the_stored_format(data: st.DataObject, dim: int) -> None:
    """Every dimension (row sizes on and off base64's 3-byte groups), text,
    attributes and timestamps: one batch call gives each record's payload."""
    records = data.draw(st.lists(_records(dim), min_size=1, max_size=6))
    matrix = np.stack([r.vector for r in records])
    payloads = batch_payloads(records, matrix)
    assert payloads == [_reference_payload(r) for r in records]
    assert [record_to_payload(r) for r in records] == payloads
    # keyword=False: the same payloads without the four keyword fields.
    keyword_fields = {"terms", "term_counts", "token_count", "lexical"}
    bare = [{k: v for k, v in p.items() if k not in keyword_fields} for p in payloads]
    assert batch_payloads(records, matrix, keyword=False) == bare
    assert [record_to_payload(r, keyword=False) for r in records] == bare
    for r, payload in zip(records, payloads, strict=True):
        back = record_from_payload(payload)
        assert back == r
        assert back.vector.tobytes() == r.vector.tobytes()


@settings(max_examples=60, deadline=None)
@given(pairs=st.lists(st.tuples(st.sampled_from(["a", "ab", "ü:所"]) | _NAME, _TEXT), max_size=8))
def test_point_ids_are_uuid5_of_length_prefixed_pairs(pairs: list[tuple[str, str]]) -> None:
    """Owners repeat within a batch (their hash prefix is reused): each id is
    still uuid5 of its own pair."""
    want = [str(uuid.uuid5(_POINT_NAMESPACE, f"{len(o)}:{o}{i}")) for o, i in pairs]
    assert point_ids(pairs) == want


@settings(max_examples=200, deadline=None)
@given(
    content=st.text(st.characters(exclude_categories=("Cs",))) | st.text("aZ09_ -.,;é\t"),
    context=st.text("ab painted paints the\n ,"),
)
def test_record_terms_are_the_domain_s_term_counts(content: str, context: str) -> None:
    """What a point stores is what `memory://` ranks with: the same counts and length."""
    terms, counts, length = record_terms(content, context)
    want, want_length = term_counts(f"{content}\n{context}")
    assert dict(zip(terms, counts, strict=True)) == dict(want)
    assert len(set(terms)) == len(terms)
    assert terms == list(want)  # first-seen order, as the domain's counts
    assert length == want_length


@settings(max_examples=40, deadline=None)
@given(records=st.lists(_records(3), min_size=1, max_size=4))
def test_points_equal_model_construct(records: list[MemoryRecord]) -> None:
    """`make_point` builds the instance `PointStruct.model_construct` builds (and
    is the fast path on this pydantic, not the fallback)."""
    assert make_point.__name__ == "make"
    matrix = np.stack([r.vector for r in records])
    ids = point_ids([(r.owner, r.id) for r in records])
    for pid, vector, payload in zip(
        ids, matrix.tolist(), batch_payloads(records, matrix), strict=True
    ):
        got = make_point(pid, vector, payload)
        want = qm.PointStruct.model_construct(id=pid, vector=vector, payload=payload)
        assert type(got) is qm.PointStruct
        assert got == want
        assert got.__dict__ == want.__dict__
        assert got.model_fields_set == want.model_fields_set
        assert got.model_dump() == want.model_dump()
        assert got.model_dump_json() == want.model_dump_json()

"""The exported hypothesis strategies produce valid, hostile input, and records
they build survive the in-memory store unchanged."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.contract_tests.strategies import (
    ADVERSARIAL_SCOPES,
    ids,
    memory_records,
    scopes,
    texts,
    vectors,
)
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from agent_memory.domain.validation import require_id, require_scope

SPACE = EmbeddingSpace(model="strategies", dimension=6)


@given(scope=scopes(), rid=ids())
def test_scopes_and_ids_are_valid(scope: str, rid: str) -> None:
    """When this fails, a strategy emits a blank scope/id that validation rejects."""
    assert require_scope(scope) == scope
    assert require_id(rid) == rid


@given(text=texts())
def test_texts_encode_as_utf8_without_nul(text: str) -> None:
    """When this fails, texts() emits characters backends cannot store."""
    assert "\x00" not in text
    text.encode("utf-8")


@pytest.mark.parametrize("dim", [2, 8, 1536])
@given(data=st.data())
def test_vectors_are_finite_float32_of_dim(dim: int, data: st.DataObject) -> None:
    """When this fails, vectors() emits a vector a store must reject."""
    v = data.draw(vectors(dim))
    assert v.dtype == np.float32
    assert v.shape == (dim,)
    assert np.isfinite(v).all()
    assert float(np.linalg.norm(v.astype(np.float64))) > 0.0


def test_adversarial_scopes_cover_the_hostile_characters() -> None:
    """When this fails, a character the design calls hostile is missing."""
    joined = "".join(ADVERSARIAL_SCOPES)
    for ch in ":*{}|@-\\ ü名":
        assert ch in joined, ch
    assert any("." in s for s in ADVERSARIAL_SCOPES), "a dotted owner"
    assert any(s != s.strip() for s in ADVERSARIAL_SCOPES), "a space-trailing owner"
    import unicodedata

    assert any(unicodedata.normalize("NFKC", s) != s for s in ADVERSARIAL_SCOPES), (
        "an owner a compatibility normalisation changes"
    )


@given(record=memory_records(SPACE.dimension, owner="fixed owner"))
def test_memory_records_round_trip_through_the_oracle(record: MemoryRecord) -> None:
    """When this fails, memory_records() builds records the in-memory store
    does not accept or does not return unchanged."""
    assert record.owner == "fixed owner"
    assert record.created_at.microsecond % 1000 == 0

    async def scenario() -> MemoryRecord | None:
        store = InMemoryMemoryStore(SPACE)
        await store.add([record])
        return await store.get(record.owner, record.id)

    assert asyncio.run(scenario()) == record

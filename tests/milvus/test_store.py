"""Milvus-specific checks beyond the contract: filter literals mean exactly their
value (property), VARCHAR bounds are typed errors that write nothing, records
whose keyword terms overflow their field are still found, and a collection of
another dimension or shape is refused."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_memory.adapters.milvus._codec import MAX_VARCHAR_BYTES, quote
from agent_memory.domain.errors import ConfigurationError, DimensionMismatch, InvalidInput
from agent_memory.domain.records import EmbeddingSpace
from milvus.support import OpenStore, rec

_any_text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"),
    min_size=1,
    max_size=30,
).filter(str.strip)


@given(value=_any_text)
def test_a_quoted_literal_parses_back_to_its_value(value: str) -> None:
    """The Milvus Lite expression lexer reads `quote(v)` as exactly `v`."""
    from milvus_lite.search.filter.tokens import tokenize

    tokens = [t for t in tokenize(f"owner == {quote(value)}") if t.value is not None]
    assert [t.value for t in tokens][-1] == value


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(owner=_any_text, other=_any_text)
async def test_any_owner_reads_back_only_its_records(
    open_store: OpenStore, owner: str, other: str
) -> None:
    store = await open_store()
    try:
        await store.delete_scope(owner)
        await store.delete_scope(other)
        await store.add([rec("same", owner=owner, namespace=owner, kind=owner)])
        if other != owner:
            await store.add([rec("same", owner=other, namespace=other, kind=other)])
        page = await store.list(owner, namespace=owner, kinds=[owner])
        assert [(r.owner, r.id) for r in page.records] == [(owner, "same")]
        assert await store.delete_scope(owner, namespace=owner, kinds=[owner]) == 1
        if other != owner:
            assert (await store.get(other, "same")) is not None
    finally:
        await store.close()


async def test_text_over_a_varchar_is_a_typed_error_and_writes_nothing(
    open_store: OpenStore,
) -> None:
    store = await open_store()
    big = "é" * (MAX_VARCHAR_BYTES // 2 + 1)
    with pytest.raises(InvalidInput) as info:
        await store.add([rec("ok"), rec("big", content=big)])
    assert info.value.field == "record.content"
    assert (await store.list("alice")).records == ()
    await store.add([rec("ok")])
    with pytest.raises(InvalidInput, match=r"record\.context"):
        await store.update(rec("ok", context=big))
    got = await store.get("alice", "ok")
    assert got is not None
    assert got.context == ""
    await store.close()


async def test_records_whose_terms_overflow_are_still_found(open_store: OpenStore) -> None:
    """7,000 distinct words do not fit the terms field: the row is marked
    incomplete and keyword search reads it as a candidate anyway."""
    store = await open_store()
    words = " ".join(f"w{i}x" for i in range(7_000))
    await store.add([rec("long", content=words), rec("short", content="w6999x and more")])
    hits = await store.search_text("alice", "w6999x")
    assert {h.record.id for h in hits} == {"long", "short"}
    await store.close()


async def test_a_collection_of_another_dimension_is_refused(open_store: OpenStore) -> None:
    first = await open_store(EmbeddingSpace("same-name", 8))
    await first.add([rec("a")])
    clash = await open_store(EmbeddingSpace("same-name", 8))
    clash._space = EmbeddingSpace("same-name", 16)  # same collection, other dimension
    with pytest.raises(DimensionMismatch):
        await clash.ping()
        await clash.get("alice", "a")
    await first.close()


async def test_a_foreign_collection_is_refused(open_store: OpenStore) -> None:
    store = await open_store()
    store.client.create_collection(store.collection_name, dimension=8)
    with pytest.raises(ConfigurationError, match="lacks the fields"):
        await store.get("alice", "a")
    await store.close()

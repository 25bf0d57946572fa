"""The Redis search index stays consistent with the stored records under random
write sequences with adversarial owners and ids: after every sequence the index
holds exactly the record hashes that exist (`FT.INFO num_docs`), none failed to
index, and vector and keyword results (ids, order and scores) equal the
in-memory oracle's, which also proves the per-owner keyword statistics were
kept in step with every add, update and delete."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from redis_helpers import SPACE, make_record

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.redis import RedisMemoryStore, connect
from agent_memory.adapters.redis._keys import KeySchema
from agent_memory.domain.errors import DuplicateRecord, NotFound

_ODD = "aA0 *?[]{}:|@\\%_'\"-.()^$~!#&/\té東😀\u200d\u0301ﬁ"
_ident = st.text(st.sampled_from(_ODD), min_size=1, max_size=8).filter(
    lambda s: s.strip() and s != "sentinel-owner"
)
_words = st.lists(
    st.sampled_from(["apple", "Apple", "cherry", "cherries", "東京", "x_y"]), max_size=4
)
_op = st.tuples(
    st.sampled_from(["add", "add", "update", "delete", "delete_scope"]),
    st.sampled_from(["ana", "ana ", "acme.corp", "{tag}"]) | _ident,
    _ident,
    _words.map(" ".join),
    st.lists(st.integers(-2, 2), min_size=SPACE.dimension, max_size=SPACE.dimension).filter(any),
)


async def _info(store: RedisMemoryStore, redis_url: str) -> dict[str, object]:
    client = connect(redis_url)
    try:
        raw = await client.execute_command("FT.INFO", store.index_name)
    finally:
        await client.aclose()
    return {
        (k.decode() if isinstance(k, bytes) else k): v
        for k, v in zip(raw[::2], raw[1::2], strict=True)
    }


async def _record_keys(redis_url: str, deployment: str) -> int:
    prefix = KeySchema(deployment=deployment).ms_record_prefix(SPACE.identity)
    client = connect(redis_url)
    try:
        return len([k async for k in client.scan_iter(match=f"{prefix}*", count=1000)])
    finally:
        await client.aclose()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_op, min_size=1, max_size=25))
@example(ops=[("delete", "ana", "0", "", [0, 0, 0, 0, 0, 0, 0, 1])])  # no write at all
async def test_index_matches_records_and_the_oracle(
    redis_url: str, ops: list[tuple[str, str, str, str, list[int]]]
) -> None:
    deployment = "ic" + format(abs(hash(repr(ops))) % 10**12, "012d")
    store = RedisMemoryStore.from_url(redis_url, SPACE, deployment=deployment)
    oracle = InMemoryMemoryStore(SPACE)
    owners: set[str] = set()
    try:
        # The index is created with the first write: make sure it exists even when
        # every generated operation is a no-op (a sentinel outside the ops' owners).
        await store.add([make_record("sentinel", "sentinel-owner")])
        assert await store.delete("sentinel-owner", "sentinel")
        for kind, owner, id_, content, vec in ops:
            owners.add(owner)
            record = make_record(
                id_, owner, vector=np.asarray(vec, dtype=np.float32), content=content or "-"
            )
            outcomes = []
            for target in (store, oracle):
                try:
                    if kind == "add":
                        await target.add([record])
                    elif kind == "update":
                        await target.update(record)
                    elif kind == "delete":
                        outcomes.append(await target.delete(owner, id_))
                        continue
                    else:
                        outcomes.append(await target.delete_scope(owner))
                        continue
                    outcomes.append("ok")
                except (DuplicateRecord, NotFound) as exc:
                    outcomes.append(type(exc).__name__)
            assert outcomes[0] == outcomes[1], (kind, owner, id_, outcomes)

        info = await _info(store, redis_url)
        assert int(info["num_docs"]) == await _record_keys(redis_url, deployment)
        assert int(info["hash_indexing_failures"]) == 0
        q = np.ones(SPACE.dimension, dtype=np.float32)
        for owner in owners:
            got = await store.search(owner, q, limit=50)
            want = await oracle.search(owner, q, limit=50)
            assert [h.record.id for h in got] == [h.record.id for h in want]
            assert np.allclose([h.score for h in got], [h.score for h in want], atol=1e-4)
            got_kw = await store.search_text(owner, "apple cherry 東京", limit=50)
            want_kw = await oracle.search_text(owner, "apple cherry 東京", limit=50)
            assert [h.record.id for h in got_kw] == [h.record.id for h in want_kw]
            assert np.allclose(
                [h.score for h in got_kw], [h.score for h in want_kw], rtol=1e-6, atol=1e-9
            )
    finally:
        await store.drop_index()
        await store.close()

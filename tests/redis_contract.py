"""The shipped contract suite wired to the Redis adapters, for any Redis URL.

`tests/redis/test_redis_contract.py` (one server) and
`tests/redis_cluster/test_cluster_contract.py` (a cluster) subclass these with
their capabilities and provide the `redis_contract_url` fixture; the classes here
are not collected themselves (their names do not start with `Test`).
`LexicalVersionSuite` is Redis's own: stored search terms re-derived when
`domain.lexical.LEXICAL_VERSION` changes, on either topology.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

import agent_memory.adapters.redis._codec as redis_codec
import agent_memory.adapters.redis.store as redis_store
from agent_memory.adapters.redis import (
    RedisCache,
    RedisEventLog,
    RedisLeaseStore,
    RedisMemoryStore,
)
from agent_memory.contract_tests import (
    CacheContract,
    EventLogContract,
    LeaseStoreContract,
    MemoryStoreContract,
)
from agent_memory.domain import lexical
from agent_memory.domain.errors import ConfigurationError
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from budget import STATE_MACHINE_EXAMPLES

__all__ = [
    "CacheSuite",
    "EventLogSuite",
    "LeaseStoreSuite",
    "LexicalVersionSuite",
    "MemoryStoreSuite",
]

SPACE = EmbeddingSpace(model="test-model", dimension=8)


class MemoryStoreSuite(MemoryStoreContract):
    state_machine_examples = STATE_MACHINE_EXAMPLES

    @pytest.fixture
    async def store(
        self, redis_contract_url: str, deployment: str
    ) -> AsyncIterator[RedisMemoryStore]:
        s = RedisMemoryStore.from_url(redis_contract_url, SPACE, deployment=deployment)
        yield s
        await s.close()
        cleanup = RedisMemoryStore.from_url(redis_contract_url, SPACE, deployment=deployment)
        await cleanup.drop_index()
        await cleanup.close()

    @pytest.fixture
    async def reopen(
        self, redis_contract_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisMemoryStore]]:
        async def open_again() -> RedisMemoryStore:
            return RedisMemoryStore.from_url(redis_contract_url, SPACE, deployment=deployment)

        return open_again


class EventLogSuite(EventLogContract):
    @pytest.fixture
    async def event_log(
        self, redis_contract_url: str, deployment: str
    ) -> AsyncIterator[RedisEventLog]:
        log = RedisEventLog.from_url(redis_contract_url, deployment=deployment)
        yield log
        await log.close()

    @pytest.fixture
    async def reopen(
        self, redis_contract_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisEventLog]]:
        async def open_again() -> RedisEventLog:
            return RedisEventLog.from_url(redis_contract_url, deployment=deployment)

        return open_again


class LeaseStoreSuite(LeaseStoreContract):
    @pytest.fixture
    async def leases(
        self, redis_contract_url: str, deployment: str
    ) -> AsyncIterator[RedisLeaseStore]:
        s = RedisLeaseStore.from_url(redis_contract_url, deployment=deployment)
        yield s
        await s.close()

    @pytest.fixture
    async def reopen(
        self, redis_contract_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisLeaseStore]]:
        async def open_again() -> RedisLeaseStore:
            return RedisLeaseStore.from_url(redis_contract_url, deployment=deployment)

        return open_again


class CacheSuite(CacheContract):
    @pytest.fixture
    async def cache(self, redis_contract_url: str, deployment: str) -> AsyncIterator[RedisCache]:
        c = RedisCache.from_url(redis_contract_url, deployment=deployment)
        yield c
        await c.close()

    @pytest.fixture
    async def reopen(
        self, redis_contract_url: str, deployment: str
    ) -> Callable[[], Awaitable[RedisCache]]:
        async def open_again() -> RedisCache:
            return RedisCache.from_url(redis_contract_url, deployment=deployment)

        return open_again


# -- lexical version ------------------------------------------------------------
# "Version 2" of the rules in these tests: no stemming and one more stopword, so
# both the terms and the lengths (the owners' statistics) differ from the real rules.
_V2 = "test-2"
_V2_STOPWORDS = lexical.STOPWORDS | {"red"}
_WORD = re.compile(r"[^\W_]+")
_T0 = datetime(2026, 1, 1, tzinfo=UTC)
_TEXTS = (
    "painted the red barn",
    "paints and painting",
    "red red hiking boots",
    "the hikes were long",
    "boot painting class",
    "barns are red",
)
_QUERIES = ("painted", "paints", "red barn", "hiking boots", "hikes", "boot", "barns painting")
_OWNERS = tuple(f"o{i} {{x}}" for i in range(6))


def _v2_tokenize(text: str) -> list[str]:
    return [w for w in (raw.lower() for raw in _WORD.findall(text)) if w not in _V2_STOPWORDS]


def _v2_query_terms(query: str) -> list[str]:
    return list(dict.fromkeys(_v2_tokenize(query)))


def _use_v2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lexical, "LEXICAL_VERSION", _V2)
    monkeypatch.setattr(lexical, "tokenize", _v2_tokenize)
    monkeypatch.setattr(lexical, "query_terms", _v2_query_terms)
    monkeypatch.setattr(redis_codec, "tokenize", _v2_tokenize)
    monkeypatch.setattr(redis_store, "query_terms", _v2_query_terms)


def _records() -> list[MemoryRecord]:
    rng = np.random.default_rng(7)
    return [
        MemoryRecord(
            id=f"r{j}",
            owner=owner,
            namespace=f"n{j % 2}",
            kind=f"k{j % 3}",
            content=_TEXTS[(i + j) % len(_TEXTS)],
            context=_TEXTS[j % len(_TEXTS)] if j % 2 else "",
            vector=rng.standard_normal(8).astype(np.float32),
            created_at=_T0 + timedelta(seconds=j),
            updated_at=_T0 + timedelta(seconds=j),
        )
        for i, owner in enumerate(_OWNERS)
        for j in range(6)
    ]


async def _results(store: RedisMemoryStore) -> list[Any]:
    """Every owner's keyword hits for every query (with and without a filter)."""
    out: list[Any] = []
    for owner in _OWNERS:
        for q in _QUERIES:
            for filters in ({}, {"namespace": "n1"}, {"kinds": ["k0", "k2"]}):
                hits = await store.search_text(owner, q, limit=4, **filters)  # type: ignore[arg-type]
                out.append((owner, q, [(h.record.id, h.score) for h in hits]))
    return out


class LexicalVersionSuite:
    """A space written under one `LEXICAL_VERSION` and opened under another answers
    keyword searches exactly as a space written under the new one (terms and the
    owners' statistics re-derived on open); an interrupted rebuild is finished by
    the next handle; a space records the version its terms follow."""

    @pytest.fixture
    async def opener(
        self, redis_contract_url: str, deployment: str
    ) -> AsyncIterator[Callable[[str], RedisMemoryStore]]:
        opened: list[RedisMemoryStore] = []

        def open_store(suffix: str = "") -> RedisMemoryStore:
            s = RedisMemoryStore.from_url(redis_contract_url, SPACE, deployment=deployment + suffix)
            opened.append(s)
            return s

        yield open_store
        for s in opened:
            await s.close()
        for suffix in ("", "f"):
            cleanup = RedisMemoryStore.from_url(
                redis_contract_url, SPACE, deployment=deployment + suffix
            )
            await cleanup.drop_index()
            await cleanup.close()

    @staticmethod
    async def _version(store: RedisMemoryStore) -> bytes | None:
        raw: bytes | None = await store._r.get(store._keys.ms_lexical(store._sid))
        return raw

    async def _fresh_v2(self, opener: Callable[[str], RedisMemoryStore]) -> list[Any]:
        fresh = opener("f")
        await fresh.add(_records())
        return await _results(fresh)

    async def test_a_new_version_re_derives_terms_and_statistics(
        self, opener: Callable[[str], RedisMemoryStore], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        old = opener("")
        await old.add(_records())
        before = await _results(old)
        assert await self._version(old) == lexical.LEXICAL_VERSION.encode()
        _use_v2(monkeypatch)
        expected = await self._fresh_v2(opener)
        assert expected != before, "the test's version 2 must change some results"
        reopened = opener("")
        assert await _results(reopened) == expected
        assert await self._version(reopened) == _V2.encode()

    async def test_a_matching_version_is_one_read(
        self, opener: Callable[[str], RedisMemoryStore], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        first = opener("")
        assert await self._version(first) is None
        await first.add(_records()[:3])
        assert await self._version(first) == lexical.LEXICAL_VERSION.encode()
        want = await _results(first)

        async def no_rebuild(*args: object) -> int:
            raise AssertionError("a space at the code's version must not be rebuilt")

        monkeypatch.setattr(RedisMemoryStore, "_rebuild_terms", no_rebuild)
        second = opener("")
        assert await _results(second) == want

    async def test_an_interrupted_rebuild_is_finished_by_the_next_handle(
        self, opener: Callable[[str], RedisMemoryStore], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        old = opener("")
        await old.add(_records())
        v1 = await _results(old)
        _use_v2(monkeypatch)
        expected = await self._fresh_v2(opener)
        broken = opener("")
        broken._rebuild_page = 4
        calls = 0
        reterm = RedisMemoryStore._reterm_batch

        async def fail_second(self: RedisMemoryStore, keys: list[Any]) -> int:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise RuntimeError("interrupted")
            return await reterm(self, keys)

        monkeypatch.setattr(RedisMemoryStore, "_reterm_batch", fail_second)
        with pytest.raises(RuntimeError, match="interrupted"):
            await broken.search_text(_OWNERS[0], "paints")
        assert await self._version(broken) == b"rebuilding:" + _V2.encode()
        monkeypatch.setattr(RedisMemoryStore, "_reterm_batch", reterm)
        # A handle of the old rules finishes it back to them...
        monkeypatch.undo()
        assert await _results(opener("")) == v1
        # ...and one of the new rules again to the new ones.
        _use_v2(monkeypatch)
        broken = opener("")
        broken._rebuild_page = 4
        calls = 0
        monkeypatch.setattr(RedisMemoryStore, "_reterm_batch", fail_second)
        with pytest.raises(RuntimeError, match="interrupted"):
            await broken.search_text(_OWNERS[0], "paints")
        monkeypatch.setattr(RedisMemoryStore, "_reterm_batch", reterm)
        assert await _results(opener("")) == expected
        assert await self._version(opener("")) == _V2.encode()

    async def test_a_rebuild_raced_by_another_version_says_so(
        self, opener: Callable[[str], RedisMemoryStore], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        old = opener("")
        await old.add(_records())
        _use_v2(monkeypatch)
        store = opener("")
        key = store._keys.ms_lexical(store._sid)
        reterm = RedisMemoryStore._reterm_batch

        async def other_release_starts(self: RedisMemoryStore, keys: list[Any]) -> int:
            await self._r.set(key, "rebuilding:other")
            return await reterm(self, keys)

        monkeypatch.setattr(RedisMemoryStore, "_reterm_batch", other_release_starts)
        with pytest.raises(ConfigurationError, match="rebuilding:other"):
            await store.search_text(_OWNERS[0], "paints")
        monkeypatch.setattr(RedisMemoryStore, "_reterm_batch", reterm)
        assert len(await store.search_text(_OWNERS[0], "paints")) > 0  # the next try finishes
        assert await self._version(store) == _V2.encode()

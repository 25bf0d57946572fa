"""The shipped MemoryStore contract on Qdrant: local mode always, and the server
named by QDRANT_URL when it is set (the `target` fixture parameter).

Capabilities, honestly: the duplicate check reads before it writes. Within one
process the check and the write are serialised (a lock per client and
collection), so a duplicate-bearing batch writes nothing (`atomic_batches`);
two processes adding one id at the same moment can both succeed, so
`concurrent_duplicate_rejection` is not declared.

The `keyword=false` variant (no keyword terms stored on add or update) declares
the same: its keyword search derives the missing terms first, so every
keyword clause holds for it too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent_memory.adapters.qdrant import QdrantMemoryStore
from agent_memory.contract_tests import Capabilities, MemoryStoreContract
from agent_memory.contract_tests.memory_store import Reopen
from agent_memory.ports.storage import MemoryStore
from budget import STATE_MACHINE_EXAMPLES
from qdrant.support import OpenStore


def _keyword_false(store: QdrantMemoryStore) -> QdrantMemoryStore:
    prefix = store.collection_name.removesuffix(store.space.identity)
    return QdrantMemoryStore(store.client, store.space, collection_prefix=prefix, keyword=False)


class TestQdrantMemoryStore(MemoryStoreContract):
    state_machine_examples = STATE_MACHINE_EXAMPLES
    capabilities = Capabilities(
        atomic_batches=True,
        concurrent_duplicate_rejection=False,
        reopen=True,
        keyword_search=True,
    )

    @pytest.fixture
    async def store(self, open_store: OpenStore) -> AsyncIterator[MemoryStore]:
        s: QdrantMemoryStore = await open_store()
        yield s
        await s.close()

    @pytest.fixture
    def reopen(self, open_store: OpenStore) -> Reopen:
        async def open_again() -> MemoryStore:
            return await open_store()

        return open_again


class TestQdrantKeywordFalseMemoryStore(TestQdrantMemoryStore):
    """Every handle of the run opened with `keyword=False`."""

    @pytest.fixture
    async def store(self, open_store: OpenStore) -> AsyncIterator[MemoryStore]:
        s = _keyword_false(await open_store())
        yield s
        await s.close()

    @pytest.fixture
    def reopen(self, open_store: OpenStore) -> Reopen:
        async def open_again() -> MemoryStore:
            return _keyword_false(await open_store())

        return open_again

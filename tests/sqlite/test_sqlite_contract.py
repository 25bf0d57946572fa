"""The shipped contract suite on the SQLite adapters: a fresh file per test, and
`reopen` opening a second handle (its own connection and worker thread) on the
same file. Every capability is declared, so nothing may skip.

Each test's file is a copy of an empty database initialised once per session
(WAL mode, schema, the contract space's tables): creating a file costs a few
fsyncs, and first-open initialisation is covered by test_sqlite_adapter.py."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from agent_memory.adapters.sqlite import (
    SqliteCache,
    SqliteEventLog,
    SqliteLeaseStore,
    SqliteMemoryStore,
)
from agent_memory.contract_tests import (
    CacheContract,
    Capabilities,
    EventLogContract,
    LeaseStoreContract,
    MemoryStoreContract,
)
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.ports.storage import Cache, EventLog, LeaseStore, MemoryStore
from budget import STATE_MACHINE_EXAMPLES

SQLITE = Capabilities(
    atomic_batches=True,
    concurrent_duplicate_rejection=True,
    reopen=True,
    keyword_search=True,
    versioned_writes=True,
    ttl_resolution_ms=10,
)


SPACE = EmbeddingSpace(model="contract-model", dimension=8)


async def _initialise(path: Path) -> None:
    store = SqliteMemoryStore(path, SPACE)
    await store.ping()
    await store.close()


@pytest.fixture(scope="session")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "empty.db"
    asyncio.run(_initialise(path))
    return path


@pytest.fixture
def db_path(tmp_path: Path, template_db: Path) -> Path:
    path = tmp_path / "contract.db"
    shutil.copyfile(template_db, path)
    return path


class TestSqliteMemoryStore(MemoryStoreContract):
    state_machine_examples = STATE_MACHINE_EXAMPLES
    capabilities = SQLITE

    @pytest.fixture
    async def store(self, db_path: Path) -> AsyncIterator[MemoryStore]:
        handle = SqliteMemoryStore(db_path, SPACE)
        yield handle
        await handle.close()

    @pytest.fixture
    def reopen(
        self, db_path: Path, store: SqliteMemoryStore
    ) -> Callable[[], Awaitable[MemoryStore]]:
        async def _open() -> MemoryStore:
            return SqliteMemoryStore(db_path, store.space)

        return _open


class TestSqliteEventLog(EventLogContract):
    capabilities = SQLITE

    @pytest.fixture
    async def event_log(self, db_path: Path) -> AsyncIterator[EventLog]:
        log = SqliteEventLog(db_path)
        yield log
        await log.close()

    @pytest.fixture
    def reopen(self, db_path: Path) -> Callable[[], Awaitable[EventLog]]:
        async def _open() -> EventLog:
            return SqliteEventLog(db_path)

        return _open


class TestSqliteLeaseStore(LeaseStoreContract):
    capabilities = SQLITE

    @pytest.fixture
    async def leases(self, db_path: Path) -> AsyncIterator[LeaseStore]:
        store = SqliteLeaseStore(db_path)
        yield store
        await store.close()

    @pytest.fixture
    def reopen(self, db_path: Path) -> Callable[[], Awaitable[LeaseStore]]:
        async def _open() -> LeaseStore:
            return SqliteLeaseStore(db_path)

        return _open


class TestSqliteCache(CacheContract):
    capabilities = SQLITE

    @pytest.fixture
    async def cache(self, db_path: Path) -> AsyncIterator[Cache]:
        handle = SqliteCache(db_path)
        yield handle
        await handle.close()

    @pytest.fixture
    def reopen(self, db_path: Path) -> Callable[[], Awaitable[Cache]]:
        async def _open() -> Cache:
            return SqliteCache(db_path)

        return _open

"""The shipped `TripleStoreContract` on the memory, SQLite and PostgreSQL adapters."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from agent_memory.adapters.memory import InMemoryTripleStore, MemoryTripleBackend
from agent_memory.adapters.postgres.triples import PostgresTripleStore
from agent_memory.adapters.sqlite.triples import SqliteTripleStore
from agent_memory.contract_tests import Capabilities, TripleStoreContract
from postgres.conftest import OpenDatabase, cleanup_connection, open_database

__all__ = ["cleanup_connection", "open_database"]  # the PostgreSQL fixtures, used here


class TestMemoryTripleStore(TripleStoreContract):
    capabilities = Capabilities(reopen=True)

    @pytest.fixture
    def backend(self) -> MemoryTripleBackend:
        return MemoryTripleBackend()

    @pytest.fixture
    async def triples(self, backend: MemoryTripleBackend) -> AsyncIterator[InMemoryTripleStore]:
        store = InMemoryTripleStore(backend)
        yield store
        await store.close()

    @pytest.fixture
    def reopen(self, backend: MemoryTripleBackend) -> Callable[[], Awaitable[InMemoryTripleStore]]:
        async def open_again() -> InMemoryTripleStore:
            return InMemoryTripleStore(backend)

        return open_again


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An initialised, empty database file, copied for each test (cheaper than creating)."""
    import asyncio

    path = tmp_path_factory.mktemp("triples-template") / "template.db"

    async def init() -> None:
        store = SqliteTripleStore(path)
        await store.ping()
        await store.close()

    asyncio.run(init())
    return path


class TestSqliteTripleStore(TripleStoreContract):
    capabilities = Capabilities(reopen=True)

    @pytest.fixture
    def path(self, tmp_path: Path, sqlite_template: Path) -> Path:
        target = tmp_path / "triples.db"
        shutil.copyfile(sqlite_template, target)
        return target

    @pytest.fixture
    async def triples(self, path: Path) -> AsyncIterator[SqliteTripleStore]:
        store = SqliteTripleStore(path)
        yield store
        await store.close()

    @pytest.fixture
    def reopen(self, path: Path) -> Callable[[], Awaitable[SqliteTripleStore]]:
        async def open_again() -> SqliteTripleStore:
            return SqliteTripleStore(path)

        return open_again


class TestPostgresTripleStore(TripleStoreContract):
    capabilities = Capabilities(reopen=True)

    @pytest.fixture
    async def triples(self, open_database: OpenDatabase) -> AsyncIterator[PostgresTripleStore]:
        store = PostgresTripleStore(await open_database(), owns_database=True)
        yield store
        await store.close()

    @pytest.fixture
    def reopen(self, open_database: OpenDatabase) -> Callable[[], Awaitable[PostgresTripleStore]]:
        async def open_again() -> PostgresTripleStore:
            return PostgresTripleStore(await open_database(), owns_database=True)

        return open_again

"""Throw-away deployments of a storage URL: each a fresh, empty deployment (a
new in-process namespace for `memory://`, a new file next to the given one for
`sqlite:///`, a key prefix / schema / collection prefix on a server) that can be
removed again. The conformance runner tests a URL backend on these."""

from __future__ import annotations

import contextlib
import shutil
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agent_memory.bootstrap.connect import open_stores, scheme_of
from agent_memory.bootstrap.memory import Stores
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.records import EmbeddingSpace

__all__ = ["ThrowawayDeployments"]


class ThrowawayDeployments:
    """Fresh deployments of one URL (`agent_memory.contract_tests.runner.Deployments`)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.family = scheme_of(url)
        self.sqlite_dir: Path | None = None

    def fresh(self, deployment: str) -> str:
        if self.family == "memory":
            return f"memory://{deployment}"
        if self.family == "sqlite":
            from agent_memory.adapters.sqlite import path_from_url

            if self.sqlite_dir is None:
                given = Path(path_from_url(self.url)[0]).absolute()
                self.sqlite_dir = given.parent / f"{given.stem}.conformance-{uuid.uuid4().hex[:8]}"
                self.sqlite_dir.mkdir(parents=True, exist_ok=True)
            query = urlsplit(self.url).query
            return f"sqlite:///{self.sqlite_dir / f'{deployment}.db'}" + (
                f"?{query}" if query else ""
            )
        return self.url

    async def open(self, url: str, deployment: str, *, space: EmbeddingSpace) -> Stores:
        return await open_stores(url, space=space, settings=Settings(deployment=deployment))

    async def drop(self, url: str, deployment: str) -> None:
        if self.family == "sqlite":
            from agent_memory.adapters.sqlite import path_from_url

            _unlink_sqlite(Path(path_from_url(url)[0]))
        elif self.family == "postgres":
            await _drop_postgres(url, deployment)
        elif self.family == "redis":
            await _drop_redis(url, deployment)
        elif self.family == "qdrant":
            await _drop_qdrant(url, deployment)

    def finish(self) -> None:
        if self.sqlite_dir is not None:
            shutil.rmtree(self.sqlite_dir, ignore_errors=True)


def _unlink_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            Path(f"{path}{suffix}").unlink()


async def _drop_postgres(url: str, deployment: str) -> None:
    import psycopg
    from psycopg import sql

    from agent_memory.adapters.postgres import schema_for_deployment

    schema = schema_for_deployment(deployment)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


async def _drop_redis(url: str, deployment: str) -> None:
    from agent_memory.adapters.redis._client import connect

    client = connect(url)
    try:
        marker = f":{deployment}:"
        for raw in await client.execute_command("FT._LIST"):
            name = raw.decode() if isinstance(raw, bytes) else str(raw)
            if marker in name:
                await client.execute_command("FT.DROPINDEX", name)
        batch: list[Any] = []
        async for key in client.scan_iter(match=f"*{marker}*", count=500):
            batch.append(key)
            if len(batch) >= 500:
                await client.delete(*batch)
                batch.clear()
        if batch:
            await client.delete(*batch)
    finally:
        await client.aclose()


async def _drop_qdrant(url: str, deployment: str) -> None:
    from agent_memory.adapters.qdrant.factory import deployment_prefix, qdrant_client_from_url

    if url.startswith("qdrant+memory"):
        return
    client, _ = qdrant_client_from_url(url)
    prefix = deployment_prefix(deployment)
    try:
        for c in (await client.get_collections()).collections:
            if c.name.startswith(prefix):
                await client.delete_collection(c.name)
    finally:
        await client.close()

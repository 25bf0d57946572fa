"""Fixtures of the LangGraph and MCP integration tests: a connected memory per backend."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

import agent_memory
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Memory, Settings

DIMENSION = 32


def profile_examples(share: float = 1.0, floor: int = 3) -> int:
    """A share of the loaded hypothesis profile's max_examples (dev 30, ci 100);
    all of them under the `langgraph-deep` profile (500, for every caller)."""
    if settings.get_current_profile_name() == "langgraph-deep":
        return settings.default.max_examples
    return max(floor, int(settings.default.max_examples * share))


def backend_url(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if name == "memory":
        return f"memory://lg-{uuid.uuid4().hex}"
    if name == "sqlite":
        return f"sqlite:///{tmp_path / 'lg.db'}"
    if name == "qdrant":
        return "qdrant+memory://"
    if name == "redis":
        return str(request.getfixturevalue("redis_url"))
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def open_memory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[..., AsyncIterator[Memory]]:
    """`async with open_memory(backend[, embedder])`: an EMPTY memory (own
    deployment) on it, embedding with `embedder` (default: hashing, 32 dims)."""
    import contextlib

    @contextlib.asynccontextmanager
    async def opener(name: str, embedder: Any = None) -> AsyncIterator[Memory]:
        url = backend_url(name, request, tmp_path)
        config = Settings(deployment=f"lg-{uuid.uuid4().hex[:10]}")
        async with agent_memory.connect(
            url, settings=config, embedder=embedder or HashingEmbedder(DIMENSION)
        ) as memory:
            yield memory

    return opener  # type: ignore[return-value]


__all__ = ["DIMENSION", "os", "profile_examples"]

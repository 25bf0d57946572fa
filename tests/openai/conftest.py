"""One scripted OpenAI-compatible server per session; a clean script per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_openai_server import FakeOpenAIServer


@pytest.fixture(scope="session")
def _openai_server() -> Iterator[FakeOpenAIServer]:
    server = FakeOpenAIServer()
    server.start()  # raises when it cannot bind: a failure, never a skip
    yield server
    server.stop()


@pytest.fixture
def fake(_openai_server: FakeOpenAIServer) -> Iterator[FakeOpenAIServer]:
    _openai_server.reset()
    yield _openai_server
    _openai_server.reset()

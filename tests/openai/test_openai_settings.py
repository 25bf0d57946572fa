"""Wiring the providers from the validated AGENT_MEMORY_* settings."""

from __future__ import annotations

import pytest
from fake_openai_server import CHAT, EMBEDDINGS, FakeOpenAIServer

from agent_memory.adapters.openai import (
    OpenAICompatibleChatModel,
    OpenAICompatibleEmbedder,
    RetryPolicy,
    chat_model_from_settings,
    embedder_from_settings,
)
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.errors import ConfigurationError

KEY = "sk-from-env-0123456789"


async def test_settings_wire_both_providers(fake: FakeOpenAIServer) -> None:
    settings = Settings.from_env(
        {
            "AGENT_MEMORY_EMBEDDINGS_URL": fake.url,
            "AGENT_MEMORY_EMBEDDINGS_MODEL": "nomic-embed-text",
            "AGENT_MEMORY_EMBEDDING_DIMENSION": "8",
            "AGENT_MEMORY_LLM_URL": fake.url + "/v1",
            "AGENT_MEMORY_LLM_MODEL": "llama3.1:8b",
            "AGENT_MEMORY_API_KEY": KEY,
        }
    )
    fast = RetryPolicy(base_delay=0.001)
    embedder = embedder_from_settings(settings, retry=fast, batch_size=2)
    model = chat_model_from_settings(settings, retry=fast)
    assert isinstance(embedder, OpenAICompatibleEmbedder)
    assert isinstance(model, OpenAICompatibleChatModel)
    assert embedder.space.model == "nomic-embed-text"
    assert embedder.space.dimension == 8
    assert embedder.space.provable is False
    assert model.stable is False  # llama3.1:8b is a movable tag
    async with embedder, model:
        assert (await embedder.embed(["a", "b", "c"])).shape == (3, 8)
        assert await model.complete("hi", max_tokens=3, timeout=5) == "echo: hi"
    assert len(fake.requests_to(EMBEDDINGS)) == 2
    assert len(fake.requests_to(CHAT)) == 1
    assert {r.headers["authorization"] for r in fake.requests} == {f"Bearer {KEY}"}


def test_missing_settings_are_configuration_errors() -> None:
    settings = Settings.from_env({})
    with pytest.raises(ConfigurationError, match="AGENT_MEMORY_EMBEDDINGS_URL"):
        embedder_from_settings(settings)
    with pytest.raises(ConfigurationError, match="AGENT_MEMORY_LLM_URL"):
        chat_model_from_settings(settings)


def test_invalid_values_name_the_variable() -> None:
    settings = Settings(
        embeddings_url="ftp://models.example",
        embeddings_model="m",
        llm_url="http://llm.example",
        llm_model="m",
        api_key=KEY,
    )
    with pytest.raises(ConfigurationError, match=r"^AGENT_MEMORY_EMBEDDINGS_URL: scheme"):
        embedder_from_settings(settings)
    with pytest.raises(ConfigurationError, match=r"^AGENT_MEMORY_LLM_MODEL: a non-blank") as info:
        chat_model_from_settings(Settings(llm_url="http://llm.example", llm_model=" ", api_key=KEY))
    assert KEY not in str(info.value)

"""Build the providers from validated settings (what bootstrap calls).

Settings are read structurally (any object with these attributes, such as
`agent_memory.bootstrap.Settings`), so this adapter does not import bootstrap.
Bad values become `ConfigurationError`s naming the environment variable.
"""

from __future__ import annotations

from typing import Any, Protocol

from agent_memory.adapters.openai.chat import OpenAICompatibleChatModel
from agent_memory.adapters.openai.embedder import OpenAICompatibleEmbedder
from agent_memory.domain.errors import ConfigurationError, InvalidInput

__all__ = [
    "ChatSettings",
    "EmbeddingSettings",
    "chat_model_from_settings",
    "embedder_from_settings",
]

_EMBEDDING_VARS = {
    "base_url": "AGENT_MEMORY_EMBEDDINGS_URL",
    "model": "AGENT_MEMORY_EMBEDDINGS_MODEL",
    "dimension": "AGENT_MEMORY_EMBEDDING_DIMENSION",
    "api_key": "AGENT_MEMORY_API_KEY",
}
_CHAT_VARS = {
    "base_url": "AGENT_MEMORY_LLM_URL",
    "model": "AGENT_MEMORY_LLM_MODEL",
    "api_key": "AGENT_MEMORY_API_KEY",
}


class EmbeddingSettings(Protocol):
    @property
    def embeddings_url(self) -> str | None: ...

    @property
    def embeddings_model(self) -> str | None: ...

    @property
    def embedding_dimension(self) -> int: ...

    @property
    def api_key(self) -> str | None: ...


class ChatSettings(Protocol):
    @property
    def llm_url(self) -> str | None: ...

    @property
    def llm_model(self) -> str | None: ...

    @property
    def api_key(self) -> str | None: ...


def _config_error(exc: InvalidInput, names: dict[str, str]) -> ConfigurationError:
    name = names.get(exc.field, exc.field)
    return ConfigurationError(f"{name}: {exc.problem}")


def embedder_from_settings(settings: EmbeddingSettings, **options: Any) -> OpenAICompatibleEmbedder:
    """`OpenAICompatibleEmbedder(embeddings_url, embeddings_model, embedding_dimension,
    api_key=api_key, **options)`; `options` are the constructor's keyword arguments
    (provable, revision, batch_size, timeout, retry, ...)."""
    url, model = settings.embeddings_url, settings.embeddings_model
    if url is None or model is None:
        raise ConfigurationError(
            "AGENT_MEMORY_EMBEDDINGS_URL and AGENT_MEMORY_EMBEDDINGS_MODEL are both required "
            "for the OpenAI-compatible embedder"
        )
    try:
        return OpenAICompatibleEmbedder(
            url, model, settings.embedding_dimension, api_key=settings.api_key, **options
        )
    except InvalidInput as exc:
        raise _config_error(exc, _EMBEDDING_VARS) from None


def chat_model_from_settings(settings: ChatSettings, **options: Any) -> OpenAICompatibleChatModel:
    """`OpenAICompatibleChatModel(llm_url, llm_model, api_key=api_key, **options)`;
    `options` are the constructor's keyword arguments (temperature, pinned, retry, ...)."""
    url, model = settings.llm_url, settings.llm_model
    if url is None or model is None:
        raise ConfigurationError(
            "AGENT_MEMORY_LLM_URL and AGENT_MEMORY_LLM_MODEL are both required "
            "for the OpenAI-compatible chat model"
        )
    try:
        return OpenAICompatibleChatModel(url, model, api_key=settings.api_key, **options)
    except InvalidInput as exc:
        raise _config_error(exc, _CHAT_VARS) from None

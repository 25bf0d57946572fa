"""OpenAI-compatible model providers (OpenAI, Ollama, vLLM, LM Studio, ...).

`OpenAICompatibleEmbedder` implements the `Embedder` port over `/v1/embeddings`,
`OpenAICompatibleChatModel` the `LanguageModel` port over `/v1/chat/completions`.
Importing this package does not import httpx: the HTTP client is built on the
first call. `embedder_from_settings` / `chat_model_from_settings` build them
from bootstrap's validated settings. See docs/providers.md.
"""

from agent_memory.adapters.openai.chat import OpenAICompatibleChatModel, is_pinned_model_name
from agent_memory.adapters.openai.embedder import OpenAICompatibleEmbedder
from agent_memory.adapters.openai.endpoint import api_root
from agent_memory.adapters.openai.errors import ProviderError
from agent_memory.adapters.openai.factories import chat_model_from_settings, embedder_from_settings
from agent_memory.adapters.openai.retry import RetryPolicy

__all__ = [
    "OpenAICompatibleChatModel",
    "OpenAICompatibleEmbedder",
    "ProviderError",
    "RetryPolicy",
    "api_root",
    "chat_model_from_settings",
    "embedder_from_settings",
    "is_pinned_model_name",
]

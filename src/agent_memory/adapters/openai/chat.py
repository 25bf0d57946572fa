"""`LanguageModel` over an OpenAI-compatible `/v1/chat/completions` endpoint."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agent_memory.adapters.openai._provider import (
    HttpProvider,
    require_api_key,
)
from agent_memory.adapters.openai.endpoint import endpoint_identity
from agent_memory.adapters.openai.retry import RetryPolicy
from agent_memory.adapters.openai.transport import Answer, snippet
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.validation import (
    require_model_name,
    require_positive,
    require_positive_number,
    require_text,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["OpenAICompatibleChatModel", "is_pinned_model_name"]

_WHAT = "openai-compatible chat"
_FAMILY = "openai-compatible/chat-completions"

# A dated snapshot: 2024-08-06 or 20241022 as a name segment ...
_DATED = re.compile(
    r"(?:^|[-_.:/@])20\d{2}-?(?:0[1-9]|1[0-2])-?(?:0[1-9]|[12]\d|3[01])(?:$|[-_.:])"
)
# ... or OpenAI's MMDD suffix (gpt-4-0613, gpt-3.5-turbo-0125, gpt-4-1106-preview) ...
_MMDD = re.compile(r"-(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])(?:-preview)?$")
# ... or a content digest (ollama/registry style `name@sha256:<hex>`).
_DIGEST = re.compile(r"@sha256:[0-9a-f]{12,64}$", re.IGNORECASE)


def _answer_limit(max_tokens: int) -> int:
    """Bytes a sane answer of `max_tokens` tokens stays within: 256 per token
    (a token escaped in JSON is far less) plus 4 MiB for the envelope."""
    return (4 << 20) + max_tokens * 256


def is_pinned_model_name(model: str) -> bool:
    """Whether a model name names one fixed set of weights by itself.

    True for dated snapshots (`gpt-4o-2024-08-06`, `claude-3-5-sonnet-20241022`,
    `gpt-4-0613`, `gpt-4-1106-preview`) and content digests (`...@sha256:<hex>`).
    False for aliases that a provider may repoint (`gpt-4o`, `llama3.1:8b`,
    `anything:latest`). A deployment that pins the model another way says so
    with `pinned=True`.
    """
    if model.endswith(":latest"):
        return False
    return bool(_DIGEST.search(model) or _DATED.search(model) or _MMDD.search(model))


class OpenAICompatibleChatModel(HttpProvider):
    """Completes prompts through `POST {root}/chat/completions` (root: `base_url`
    normalised to end in `/v1`), returning `choices[0].message.content`.

    `fingerprint` is a sha256 over the provider family, the endpoint's host,
    port and path, the model name and the temperature: stable across processes
    and free of secrets (the key and headers never enter it). `stable` is True
    when temperature is 0 and the model is pinned (`pinned`, or when None,
    `is_pinned_model_name(model)`): only then can a cached answer stand for a new one.

    `complete(..., timeout=)` bounds the whole call, retries included
    (`ModelTimeout`). `max_tokens_field` names the request field for the token
    cap: `max_tokens` (default, widest support) or `max_completion_tokens`
    (OpenAI reasoning models).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float = 0.0,
        pinned: bool | None = None,
        retry: RetryPolicy | None = None,
        max_tokens_field: str = "max_tokens",
        headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
        rng: random.Random | None = None,
    ) -> None:
        require_model_name(model)
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or not math.isfinite(temperature)
            or not 0 <= temperature <= 2
        ):
            raise InvalidInput(
                "temperature", f"a number in [0, 2] is required, got {temperature!r}"
            )
        if pinned is not None and not isinstance(pinned, bool):
            raise InvalidInput("pinned", f"a bool or None is required, got {pinned!r}")
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise InvalidInput(
                "max_tokens_field",
                f"'max_tokens' or 'max_completion_tokens' is required, got {max_tokens_field!r}",
            )
        require_api_key(api_key)
        self._model = model
        self._temperature = float(temperature)
        self._pinned = is_pinned_model_name(model) if pinned is None else pinned
        self._max_tokens_field = max_tokens_field
        self._connect(
            what=_WHAT,
            base_url=base_url,
            api_key=api_key,
            headers=headers,
            retry=retry,
            http_client=http_client,
            rng=rng,
        )
        identity = {
            "family": _FAMILY,
            "endpoint": endpoint_identity(self._http.root),
            "model": model,
            "temperature": repr(self._temperature),
        }
        canonical = json.dumps(identity, sort_keys=True, ensure_ascii=True)
        self._fingerprint = hashlib.sha256(canonical.encode("ascii")).hexdigest()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self._http.root!r}, model={self._model!r})"

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def stable(self) -> bool:
        return self._temperature == 0.0 and self._pinned

    @property
    def model(self) -> str:
        return self._model

    async def complete(
        self, prompt: str, *, max_tokens: int, timeout: float, system: str | None = None
    ) -> str:
        """The model's text; `ModelTimeout` past `timeout` seconds, `ModelError` else."""
        require_text(prompt, "prompt")  # a lone surrogate cannot be sent as JSON
        if system is not None and not isinstance(system, str):
            raise InvalidInput("system", f"a string or None is required, got {type(system)}")
        if system is not None:
            require_text(system, "system")
        require_positive(max_tokens, "max_tokens")
        seconds = require_positive_number(timeout, "timeout")
        messages = [] if system is None else [{"role": "system", "content": system}]
        messages.append({"role": "user", "content": prompt})
        body: dict[str, Any] = {
            "model": self._model,
            "messages": messages,
            self._max_tokens_field: max_tokens,
            "temperature": self._temperature,
            "stream": False,
        }
        async with self._life.op():
            answer = await self._http.post(
                "/chat/completions", body, timeout=seconds, max_bytes=_answer_limit(max_tokens)
            )
        return self._content(answer)

    def _content(self, answer: Answer) -> str:
        payload = answer.data
        if not isinstance(payload, dict):
            raise self._http.malformed(
                answer, f"expected a JSON object, got {type(payload).__name__}"
            )
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices:
            # Redacted before the cut: a key echoed across it would keep its start.
            got = "nothing" if choices is None else snippet(self._http.redact(repr(choices)), 80)
            raise self._http.malformed(answer, f"'choices' must be a non-empty list, got {got}")
        first = choices[0]
        message = first.get("message") if isinstance(first, dict) else None
        if not isinstance(message, dict):
            raise self._http.malformed(answer, "choices[0].message must be an object")
        content = message.get("content")
        if not isinstance(content, str):
            reason = first.get("finish_reason") if isinstance(first, dict) else None
            got = "null" if content is None else type(content).__name__
            raise self._http.malformed(
                answer,
                f"choices[0].message.content must be a string, got {got} "
                f"(finish_reason={reason!r})",
            )
        return content

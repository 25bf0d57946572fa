"""The provider's failures as typed `ModelError`s carrying what a caller needs."""

from __future__ import annotations

from agent_memory.domain.errors import ModelError

__all__ = ["ProviderError"]


class ProviderError(ModelError):
    """An OpenAI-compatible endpoint answered with an error or could not be used.

    `status` is the HTTP status of the last answer (None for transport errors and
    malformed bodies of a 2xx), `attempts` how many requests were made, `url` the
    endpoint (never credentials). The message already contains all three and the
    server's own error message, with the API key redacted.
    """

    def __init__(self, message: str, *, url: str, status: int | None, attempts: int) -> None:
        super().__init__(message)
        self.url = url
        self.status = status
        self.attempts = attempts

"""One JSON POST to an OpenAI-compatible endpoint: deadline, retries, typed errors.

The httpx client is created lazily on the first call (and httpx imported only
then), so constructing a provider does no I/O and importing this package does
not import httpx. Secrets (the API key, extra header values) are redacted from
every message this module builds, and logs never carry headers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from attrs import frozen

from agent_memory.adapters.openai.endpoint import Secret
from agent_memory.adapters.openai.errors import ProviderError
from agent_memory.adapters.openai.retry import RetryPolicy, is_retryable_status, parse_retry_after
from agent_memory.domain.errors import ModelError, ModelTimeout, UnsupportedBackend

if TYPE_CHECKING:
    import httpx

__all__ = ["Answer", "JsonClient"]

_log = logging.getLogger(__name__)
_SNIPPET = 300
_USER_AGENT = "agent-memory (openai-compatible provider)"
#: Error codes that make a retryable status final.
_FINAL_CODES = frozenset({"insufficient_quota"})


def snippet(text: str, limit: int = _SNIPPET) -> str:
    """At most `limit` characters of `text`, marked when cut."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


@frozen
class Answer:
    """A parsed 2xx JSON body and where it came from."""

    data: Any
    url: str
    status: int
    attempts: int


class JsonClient:
    """POSTs JSON under `root` with a per-call deadline and retries; returns parsed JSON."""

    def __init__(
        self,
        *,
        root: str,
        what: str,
        api_key: str | None,
        headers: Mapping[str, str] | None,
        retry: RetryPolicy,
        http_client: httpx.AsyncClient | None,
        rng: random.Random | None,
    ) -> None:
        self.root = root
        self._what = what
        self._key = Secret(api_key or "")
        self._extra = {str(k): str(v) for k, v in (headers or {}).items()}
        self._retry = retry
        self._client = http_client
        self._owns_client = http_client is None
        self._client_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._rng = rng if rng is not None else random.Random()

    # -- secrets -----------------------------------------------------------------

    def redact(self, text: str) -> str:
        """`text` without the API key or any extra header value of 6+ characters."""
        text = self._key.redact(text)
        for value in self._extra.values():
            if len(value) >= 6:
                text = text.replace(value, "***")
        return text

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json", "content-type": "application/json"}
        headers.update(self._extra)
        key = self._key.reveal()
        if key:
            headers["authorization"] = f"Bearer {key}"
        return headers

    # -- client lifecycle --------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if (
            self._client is not None
            and self._owns_client
            and self._client_loop is not None
            and self._client_loop() is not loop
        ):
            # Pooled connections belong to the loop that opened them; a caller
            # that runs each call in a fresh loop (asyncio.run per call) gets a
            # fresh client instead of a hang or "Event loop is closed".
            _log.debug("%s: event loop changed, starting a new HTTP client", self._what)
            self._client = None
        if self._client is None:
            try:
                import httpx
            except ImportError:  # pragma: no cover - httpx is in the test extra
                raise UnsupportedBackend(
                    "the OpenAI-compatible provider needs httpx: pip install 'agent-memory[openai]'"
                ) from None
            self._client = httpx.AsyncClient(
                timeout=None, follow_redirects=False, headers={"user-agent": _USER_AGENT}
            )
            self._client_loop = weakref.ref(loop)
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is None or not self._owns_client:
            return
        opened_in = self._client_loop() if self._client_loop is not None else None
        if opened_in is not None and opened_in is not asyncio.get_running_loop():
            # Its connections belong to another (usually finished) loop and cannot
            # be closed from this one; they go with that loop.
            return
        await client.aclose()

    # -- the call ----------------------------------------------------------------

    def _error(self, message: str, url: str, status: int | None, attempts: int) -> ProviderError:
        return ProviderError(
            self.redact(f"{self._what}: {message}"), url=url, status=status, attempts=attempts
        )

    def malformed(self, answer: Answer, problem: str) -> ProviderError:
        """The error for a 2xx answer whose JSON does not have the documented shape."""
        return self._error(
            f"malformed answer from {answer.url}: {problem}",
            answer.url,
            answer.status,
            answer.attempts,
        )

    async def post(self, path: str, body: Mapping[str, Any], *, timeout: float) -> Answer:
        """The parsed JSON answer of a 2xx, retrying 408/429/5xx and transport errors.

        `timeout` bounds the whole call, retries and their waits included:
        `ModelTimeout` past it. A non-retryable status, exhausted attempts, or a
        retry that could not start before the deadline raise `ProviderError`.
        """
        import httpx

        url = f"{self.root}{path}"
        content = json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
        client = self._http()
        headers = self._headers()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        attempts = 0
        try:
            async with asyncio.timeout(timeout):
                while True:
                    attempts += 1
                    remaining = max(deadline - loop.time(), 1e-3)
                    retry_after: float | None = None
                    status: int | None = None
                    try:
                        response = await client.post(
                            url, content=content, headers=headers, timeout=remaining
                        )
                    except httpx.TimeoutException:
                        raise self._timeout(url, timeout, attempts) from None
                    except httpx.TransportError as exc:
                        problem = f"transport error {type(exc).__name__}: {exc or 'no detail'}"
                        retryable = True
                    except httpx.HTTPError as exc:
                        raise self._error(
                            f"request to {url} failed: {type(exc).__name__}: {exc}",
                            url,
                            None,
                            attempts,
                        ) from None
                    else:
                        status = response.status_code
                        if 200 <= status < 300:
                            return self._decode(response, url, attempts)
                        message, code = _server_error(response, self.redact)
                        problem = f"HTTP {status}: {message}"
                        # OpenAI answers 429 for an exhausted quota too: waiting won't help.
                        retryable = is_retryable_status(status) and code not in _FINAL_CODES
                        if retryable:
                            retry_after = parse_retry_after(response.headers)
                    if not retryable:
                        raise self._error(
                            f"{url} answered {problem} (attempt {attempts}; not retried)",
                            url,
                            status,
                            attempts,
                        )
                    if attempts >= self._retry.max_attempts:
                        raise self._error(
                            f"{url} failed after {attempts} attempts; last: {problem}",
                            url,
                            status,
                            attempts,
                        )
                    delay = self._retry.delay(attempts, retry_after, self._rng)
                    if loop.time() + delay >= deadline:
                        raise self._error(
                            f"{url} failed after {attempts} attempts ({problem}); the next "
                            f"retry in {delay:.3g} s would pass the {timeout:g} s timeout",
                            url,
                            status,
                            attempts,
                        )
                    _log.warning(
                        "%s",
                        self.redact(
                            f"{self._what}: {url} attempt {attempts} failed ({problem}); "
                            f"retrying in {delay:.3g} s"
                        ),
                    )
                    await asyncio.sleep(delay)
        except TimeoutError as exc:
            if isinstance(exc, ModelError):
                raise
            raise self._timeout(url, timeout, attempts) from None

    def _timeout(self, url: str, timeout: float, attempts: int) -> ModelTimeout:
        return ModelTimeout(
            f"{self._what}: no answer from {url} within {timeout:g} s "
            f"({attempts} attempt{'s' if attempts != 1 else ''})"
        )

    def _decode(self, response: httpx.Response, url: str, attempts: int) -> Answer:
        try:
            data = json.loads(response.content)
        except ValueError:
            ctype = response.headers.get("content-type", "no content-type")
            raise self._error(
                f"{url} answered HTTP {response.status_code} with a body that is not JSON "
                f"({ctype}): {snippet(self.redact(response.text))!r}",
                url,
                response.status_code,
                attempts,
            ) from None
        return Answer(data=data, url=url, status=response.status_code, attempts=attempts)


def _server_error(response: httpx.Response, redact: Callable[[str], str]) -> tuple[str, str | None]:
    """The server's own error message (from the usual error shapes, else the
    body) and its error code when it gives one. `redact` runs on the whole text
    before it is cut: a secret echoed across the cut would otherwise keep its
    start, which redacting the cut text no longer finds."""
    try:
        data = json.loads(response.content)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            message = error.get("message")
            code = error.get("code")
            details = [
                f"{key}={error[key]}"
                for key in ("type", "code")
                if isinstance(error.get(key), str | int) and error.get(key) not in ("", None)
            ]
            if isinstance(message, str) and message:
                extra = f" ({', '.join(details)})" if details else ""
                return snippet(redact(message)) + extra, code if isinstance(code, str) else None
        elif isinstance(error, str) and error:
            return snippet(redact(error)), None
        for key in ("message", "detail"):
            value = data.get(key)
            if isinstance(value, str) and value:
                return snippet(redact(value)), None
    text = response.text
    return (snippet(redact(text)) if text.strip() else (response.reason_phrase or "no body")), None

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
#: How much of an error answer is read: its message is quoted, shortened, anyway.
_ERROR_BODY_BYTES = 64 * 1024


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
        """The error for a 2xx answer whose JSON does not have the documented shape
        (with the server's own message when the body is an error, as some
        gateways answer 200 with `{"error": ...}`)."""
        said = _error_message(answer.data, self.redact, ("error",))
        if said is not None:
            problem = f"{problem}; the server said: {said[0]}"
        return self._error(
            f"malformed answer from {answer.url}: {problem}",
            answer.url,
            answer.status,
            answer.attempts,
        )

    async def post(
        self, path: str, body: Mapping[str, Any], *, timeout: float, max_bytes: int
    ) -> Answer:
        """The parsed JSON answer of a 2xx, retrying 408/429/5xx and transport errors.

        A 2xx body (decompressed) longer than `max_bytes` is refused with a
        `ProviderError` before it is parsed, and not retried: a hostile or broken
        server cannot make the caller buffer an unbounded answer (or inflate a
        gzip bomb). Redirects are never followed, not even by a client passed in.

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
                        response = await _exchange(
                            client, url, content, headers, remaining, max_bytes
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
                        status = response.status
                        if 200 <= status < 300:
                            return self._decode(response, url, attempts, max_bytes)
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

    def _decode(self, response: _Received, url: str, attempts: int, max_bytes: int) -> Answer:
        if response.too_large:
            raise self._error(
                f"{url} answered HTTP {response.status} with a body too large: more than "
                f"{max_bytes} bytes for this request",
                url,
                response.status,
                attempts,
            )
        try:
            data = json.loads(response.body)
        except (ValueError, RecursionError):
            # RecursionError: JSON nested deeper than the parser's recursion limit.
            ctype = response.headers.get("content-type", "no content-type")
            raise self._error(
                f"{url} answered HTTP {response.status} with a body that is not JSON "
                f"({ctype}): {snippet(self.redact(response.text))!r}",
                url,
                response.status,
                attempts,
            ) from None
        return Answer(data=data, url=url, status=response.status, attempts=attempts)


@frozen
class _Received:
    """One HTTP answer, its body read up to a limit (`too_large` when it went past)."""

    status: int
    headers: httpx.Headers
    reason: str
    body: bytes
    charset: str | None
    too_large: bool

    @property
    def text(self) -> str:
        try:
            return self.body.decode(self.charset or "utf-8", errors="replace")
        except LookupError:  # an unknown charset name
            return self.body.decode("utf-8", errors="replace")


async def _exchange(
    client: httpx.AsyncClient,
    url: str,
    content: bytes,
    headers: Mapping[str, str],
    timeout: float,
    max_bytes: int,
) -> _Received:
    """POST and read the answer: a 2xx body up to `max_bytes` (decompressed), an
    error body up to `_ERROR_BODY_BYTES` (only its start is ever quoted)."""
    async with client.stream(
        "POST", url, content=content, headers=headers, timeout=timeout, follow_redirects=False
    ) as response:
        ok = 200 <= response.status_code < 300
        limit = max_bytes if ok else _ERROR_BODY_BYTES
        declared = response.headers.get("content-length", "").strip()
        too_large = ok and declared.isdigit() and int(declared) > limit
        chunks: list[bytes] = []
        size = 0
        if not too_large:
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    too_large = ok
                    chunks.append(chunk[: len(chunk) - (size - limit)])
                    break
                chunks.append(chunk)
        return _Received(
            status=response.status_code,
            headers=response.headers,
            reason=response.reason_phrase,
            body=b"".join(chunks),
            charset=response.charset_encoding,
            too_large=too_large,
        )


def _server_error(response: _Received, redact: Callable[[str], str]) -> tuple[str, str | None]:
    """The server's own error message (from the usual error shapes, else the
    body) and its error code when it gives one. `redact` runs on the whole text
    before it is cut: a secret echoed across the cut would otherwise keep its
    start, which redacting the cut text no longer finds."""
    try:
        data = json.loads(response.body)
    except (ValueError, RecursionError):
        data = None
    found = _error_message(data, redact, ("error", "message", "detail"))
    if found is not None:
        return found
    text = response.text
    return (snippet(redact(text)) if text.strip() else (response.reason or "no body")), None


def _error_message(
    data: Any, redact: Callable[[str], str], keys: tuple[str, ...]
) -> tuple[str, str | None] | None:
    """The message and code of an error JSON body under the first of `keys` it
    has (`{"error": {"message", "type", "code"}}`, `{"error": "..."}`,
    `{"message": ...}`, `{"detail": ...}`), redacted then shortened; None if none."""
    if not isinstance(data, dict):
        return None
    for key in keys:
        value = data.get(key)
        if isinstance(value, dict) and key == "error":
            message = value.get("message")
            code = value.get("code")
            details = [
                f"{name}={snippet(redact(str(value[name])), 80)}"
                for name in ("type", "code")
                if isinstance(value.get(name), str | int) and value.get(name) not in ("", None)
            ]
            if isinstance(message, str) and message:
                extra = f" ({', '.join(details)})" if details else ""
                return snippet(redact(message)) + extra, code if isinstance(code, str) else None
        elif isinstance(value, str) and value:
            return snippet(redact(value)), None
    return None

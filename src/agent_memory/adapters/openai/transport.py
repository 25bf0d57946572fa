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
import zlib
from collections.abc import AsyncIterator, Callable, Mapping
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
#: What answers may be compressed with: the two `_Inflater` decodes within the limit.
_ACCEPT_ENCODING = "gzip, deflate"
#: At most this much is inflated at once.
_INFLATE_STEP = 256 * 1024


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
        for name in [n for n in headers if n.lower() == "accept-encoding"]:
            del headers[name]  # only what `_Inflater` reads within the body limit
        headers["accept-encoding"] = _ACCEPT_ENCODING
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
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        timeout: float,
        max_bytes: int,
        deadline: float | None = None,
    ) -> Answer:
        """The parsed JSON answer of a 2xx, retrying 408/429/5xx and transport errors.

        A 2xx body (decompressed) longer than `max_bytes` is refused with a
        `ProviderError` before it is parsed, and not retried: a hostile or broken
        server cannot make the caller buffer an unbounded answer (or inflate a
        gzip bomb). Redirects are never followed, not even by a client passed in.

        `timeout` bounds the whole call, retries and their waits included:
        `ModelTimeout` past it. A non-retryable status, exhausted attempts, or a
        retry that could not start before the deadline raise `ProviderError`.
        `deadline` (a time of the running loop's clock) replaces `loop.time() +
        timeout` when a caller makes several posts under one `timeout` (the
        embedder's batches); messages still name `timeout`.
        """
        import httpx

        url = f"{self.root}{path}"
        content = json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
        client = self._http()
        headers = self._headers()
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + timeout
        elif loop.time() >= deadline:  # spent by the caller's earlier posts
            raise self._timeout(url, timeout, 0)
        attempts = 0
        try:
            async with asyncio.timeout_at(deadline):
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
                    except _BadBody as exc:
                        raise self._error(
                            f"{url} answered HTTP {exc.status} with a body that cannot be "
                            f"read: {exc.problem} (attempt {attempts}; not retried)",
                            url,
                            exc.status,
                            attempts,
                        ) from None
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
    error body up to `_ERROR_BODY_BYTES` (only its start is ever quoted).

    The raw bytes are read and decoded here, by `_Inflater`, so that the limit
    holds on the decompressed size as it grows: httpx's own decoders inflate a
    whole network read at once (64 KiB of gzip can be 64 MB), and decode zstd
    and brotli, which are neither asked for nor accepted. `_BadBody` when a 2xx
    body cannot be decoded."""
    async with client.stream(
        "POST", url, content=content, headers=headers, timeout=timeout, follow_redirects=False
    ) as response:
        status = response.status_code
        ok = 200 <= status < 300
        limit = max_bytes if ok else _ERROR_BODY_BYTES
        # A transport may answer with the body already read (httpx's MockTransport,
        # a caching transport): httpx has decoded it then, and it is in memory.
        preread = response.is_stream_consumed
        encoding = "" if preread else response.headers.get("content-encoding", "")
        chunks: list[bytes] = []
        too_large = False
        try:
            inflater = _Inflater(encoding, status)
        except _BadBody:
            if ok:
                raise
            inflater = None  # an error answer keeps its status; its body is not read
        declared = response.headers.get("content-length", "").strip()
        if ok and inflater is not None and inflater.identity and declared.isdigit():
            too_large = int(declared) > limit
        if inflater is not None and not too_large:
            size = raw = 0
            complete = True
            try:
                async for chunk in _raw(response, preread):
                    raw += len(chunk)
                    piece = inflater.feed(chunk, limit - size)
                    size += len(piece)
                    # Compressed data is never much larger than what it holds: a raw
                    # stream far past the limit is refused even when it inflates to little.
                    if size > limit or raw > limit + _ERROR_BODY_BYTES:
                        too_large = ok
                        chunks.append(piece[: max(0, len(piece) - (size - limit))])
                        complete = False
                        break
                    chunks.append(piece)
                    if inflater.done:
                        break
                if ok and complete:
                    inflater.finish()
            except _BadBody:
                if ok:
                    raise
                # An error answer is only quoted: its status decides (a 503 is retried).
        return _Received(
            status=status,
            headers=response.headers,
            reason=response.reason_phrase,
            body=b"".join(chunks),
            charset=response.charset_encoding,
            too_large=too_large,
        )


async def _raw(response: httpx.Response, preread: bool) -> AsyncIterator[bytes]:
    """The body's bytes as they came (`aiter_raw`), or the body read already."""
    if preread:
        yield response.content
        return
    async for chunk in response.aiter_raw():
        yield chunk


class _BadBody(Exception):
    """A body that cannot be decoded (unsupported or corrupt content-encoding)."""

    def __init__(self, problem: str, status: int) -> None:
        super().__init__(problem)
        self.problem = problem
        self.status = status


class _Inflater:
    """Decodes a body of `Content-Encoding` identity, gzip or deflate (zlib or
    raw, as httpx accepts) a read at a time, never producing more than it is
    allowed at once: zlib's `max_length` stops inflating at the limit."""

    def __init__(self, encoding: str, status: int) -> None:
        codings = [c.strip().lower() for c in encoding.split(",")]
        codings = [c for c in codings if c and c != "identity"]
        self._status = status
        self._name = codings[0] if codings else "identity"
        self._zlib: Any = None
        # "deflate" may come as a raw stream without the zlib header (httpx reads
        # both): the first bytes are kept until the header is known to be good.
        self._raw_fallback = False
        self._head = bytearray()
        self._produced = False
        if not codings:
            return
        if len(codings) == 1 and self._name in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif len(codings) == 1 and self._name == "deflate":
            self._zlib = zlib.decompressobj()
            self._raw_fallback = True
        else:
            # Quoted whole or not at all: redacting a cut value could miss a key in it.
            value = encoding.strip()
            named = repr(value) if len(value) <= 100 else f"of {len(value)} characters"
            raise _BadBody(
                f"Content-Encoding {named} is not supported (asked for {_ACCEPT_ENCODING})",
                status,
            )

    @property
    def identity(self) -> bool:
        return self._zlib is None

    @property
    def done(self) -> bool:
        """The compressed stream has ended (what follows is ignored, as httpx does)."""
        return self._zlib is not None and bool(self._zlib.eof)

    def feed(self, data: bytes, room: int) -> bytes:
        """`data` decoded: all of it, or more than `room` bytes (the limit is
        passed) but never more than `room` + 1, whatever the compression ratio."""
        if self._zlib is None:
            return data
        out = bytearray()
        pending = data
        if self._raw_fallback:
            self._head += data
        while pending and len(out) <= room and not self._zlib.eof:
            want = min(room + 1 - len(out), _INFLATE_STEP)  # >= 1: 0 means unbounded
            try:
                out += self._zlib.decompress(pending, want)
            except zlib.error as exc:
                if self._raw_fallback and not out and not self._produced:
                    self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                    self._raw_fallback = False
                    pending, self._head = bytes(self._head), bytearray()
                    continue
                raise _BadBody(
                    f"the {self._name} body cannot be decompressed: {exc}", self._status
                ) from None
            pending = self._zlib.unconsumed_tail
        self._produced = self._produced or bool(out)
        if self._raw_fallback and len(self._head) >= 16:  # past the 2-byte header
            self._raw_fallback, self._head = False, bytearray()
        return bytes(out)

    def finish(self) -> None:
        """`_BadBody` when the compressed stream stopped before its end."""
        if self._zlib is not None and not self._zlib.eof:
            raise _BadBody(f"the {self._name} body ends before its end marker", self._status)


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

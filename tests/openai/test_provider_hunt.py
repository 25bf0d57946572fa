"""Adversarial provider answers, as an operator meets them: every hostile or broken
answer of an OpenAI-compatible server ends in a typed error within the timeout
and bounded retries; the API key never shows; the local embedders refuse bad
input with typed errors. Real HTTP on 127.0.0.1: the scripted fake server of
this directory, plus a raw socket server for what `http.server` cannot do
(slow drip, reset mid-body, a second host)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import math
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from fake_openai_server import CHAT, EMBEDDINGS, FakeOpenAIServer, Reply, vector_for
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.adapters.minilm import MiniLMEmbedder
from agent_memory.adapters.openai import (
    OpenAICompatibleChatModel,
    OpenAICompatibleEmbedder,
    ProviderError,
    RetryPolicy,
    chat_model_from_settings,
    embedder_from_settings,
)
from agent_memory.adapters.openai.retry import parse_retry_after
from agent_memory.adapters.sentence_transformers import SentenceTransformerEmbedder
from agent_memory.domain.errors import (
    AgentMemoryError,
    ConfigurationError,
    DimensionMismatch,
    InvalidInput,
    ModelError,
    ModelTimeout,
)

KEY = "sk-hunt-SECRET-9f8e7d6c5b4a3210"
FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.005)
TIMEOUT = 3.0


def embedder(url: str, **kwargs: Any) -> OpenAICompatibleEmbedder:
    options: dict[str, Any] = {"api_key": KEY, "retry": FAST, "timeout": TIMEOUT}
    options.update(kwargs)
    return OpenAICompatibleEmbedder(url, "e", 8, **options)


def chat(url: str, **kwargs: Any) -> OpenAICompatibleChatModel:
    options: dict[str, Any] = {"api_key": KEY, "retry": FAST}
    options.update(kwargs)
    return OpenAICompatibleChatModel(url, "m", **options)


def chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and every exception behind it (cause and context), each once."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        todo += [item.__cause__, item.__context__]


def assert_no_key(exc: BaseException, key: str = KEY, logs: str = "") -> None:
    """No part of `key` longer than 8 characters in the chain's str/repr or the logs."""
    pieces = {key[i : i + 9] for i in range(len(key) - 8)}
    texts = [logs] + [t for e in chain(exc) for t in (str(e), repr(e))]
    for text in texts:
        for piece in pieces:
            assert piece not in text, f"key fragment {piece!r} leaked in {text[:300]!r}"


def vec(dim: int = 8, value: float = 0.25) -> list[float]:
    return [value] * dim


# -- a raw HTTP server: slow drip, reset mid-body, a second host --------------------------------


class RawServer:
    """Accepts connections on 127.0.0.1, reads one request, then hands the socket
    to `behaviour`. Counts the requests it got."""

    def __init__(self, behaviour: Callable[[socket.socket], None]) -> None:
        self.behaviour = behaviour
        self.requests = 0
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.05)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(rest) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                rest += chunk
            self.requests += 1
            self.behaviour(conn)

    def stop(self) -> None:
        self._stop.set()
        self._sock.close()
        self._thread.join(timeout=2)


@contextlib.contextmanager
def raw_server(behaviour: Callable[[socket.socket], None]) -> Iterator[RawServer]:
    server = RawServer(behaviour)
    try:
        yield server
    finally:
        server.stop()


def head(status: int = 200, length: int | None = None, extra: str = "") -> bytes:
    lines = [f"HTTP/1.1 {status} X", "Content-Type: application/json"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def good_embedding_body(count: int = 1) -> bytes:
    data = [{"index": i, "embedding": vec()} for i in range(count)]
    return json.dumps({"data": data}).encode()


# -- malformed and hostile embedding answers ----------------------------------------------------

DEEP = b"[" * 200_000 + b"]" * 200_000

HOSTILE_EMBEDDINGS: dict[str, Reply] = {
    "not-json": Reply(200, body=b"<html>oops</html>", headers={"Content-Type": "text/html"}),
    "empty-body": Reply(200, body=b""),
    "invalid-utf8": Reply(200, body=b'{"data": "\xff\xfe"}'),
    "json-list": Reply(200, [1, 2]),
    "json-null": Reply(200, None),
    "no-data": Reply(200, {"object": "list"}),
    "data-object": Reply(200, {"data": {"0": vec()}}),
    "too-few": Reply(200, {"data": []}),
    "too-many": Reply(200, {"data": [{"index": 0, "embedding": vec()}] * 2}),
    "item-not-object": Reply(200, {"data": [vec()]}),
    "index-string": Reply(200, {"data": [{"index": "0", "embedding": vec()}]}),
    "index-bool": Reply(200, {"data": [{"index": False, "embedding": vec()}]}),
    "index-negative": Reply(200, {"data": [{"index": -1, "embedding": vec()}]}),
    "index-huge": Reply(200, {"data": [{"index": 10**30, "embedding": vec()}]}),
    "no-embedding": Reply(200, {"data": [{"index": 0}]}),
    "embedding-base64": Reply(200, {"data": [{"index": 0, "embedding": "AAAAAA=="}]}),
    "embedding-nested": Reply(200, {"data": [{"index": 0, "embedding": [vec()]}]}),
    "embedding-ragged": Reply(200, {"data": [{"index": 0, "embedding": [[1.0], [1.0, 2.0]]}]}),
    "embedding-mixed-list": Reply(200, {"data": [{"index": 0, "embedding": [1.0, [2.0]] * 4}]}),
    "embedding-strings": Reply(200, {"data": [{"index": 0, "embedding": ["0.1"] * 8}]}),
    "embedding-nulls": Reply(200, {"data": [{"index": 0, "embedding": [None] * 8}]}),
    "embedding-bools": Reply(200, {"data": [{"index": 0, "embedding": [True] * 8}]}),
    "embedding-nan": Reply(200, body=b'{"data": [{"index": 0, "embedding": [NaN,1,1,1,1,1,1,1]}]}'),
    "embedding-inf": Reply(
        200, body=b'{"data": [{"index": 0, "embedding": [1e999,1,1,1,1,1,1,1]}]}'
    ),
    "embedding-beyond-f32": Reply(200, {"data": [{"index": 0, "embedding": [1e300] * 8}]}),
    "embedding-huge-int": Reply(200, {"data": [{"index": 0, "embedding": [10**40] * 8}]}),
    "embedding-long-int": Reply(
        200, body=b'{"data": [{"index": 0, "embedding": [' + b"9" * 5000 + b"]}]}"
    ),
    "deep-nesting": Reply(200, body=DEEP),
    "error-in-200": Reply(200, {"error": {"message": "model overloaded", "type": "server_error"}}),
}


@pytest.mark.parametrize("name", list(HOSTILE_EMBEDDINGS))
async def test_hostile_embedding_answer_is_a_typed_error_without_retry(
    fake: FakeOpenAIServer, name: str
) -> None:
    fake.script(EMBEDDINGS, HOSTILE_EMBEDDINGS[name])
    started = time.monotonic()
    async with embedder(fake.url) as model:
        with pytest.raises(AgentMemoryError) as caught:
            await model.embed(["one text"])
    assert isinstance(caught.value, ModelError | DimensionMismatch), repr(caught.value)
    assert time.monotonic() - started < TIMEOUT
    # A 2xx answer with a bad body is final: retrying cannot change it.
    assert len(fake.requests_to(EMBEDDINGS)) == 1
    assert_no_key(caught.value)


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": "model overloaded", "type": "server_error"}},
        {"error": "model overloaded"},
    ],
)
async def test_an_error_body_with_status_200_says_what_the_server_said(
    fake: FakeOpenAIServer, body: dict[str, Any]
) -> None:
    fake.script(EMBEDDINGS, Reply(200, body))
    fake.script(CHAT, Reply(200, body))
    async with embedder(fake.url) as model, chat(fake.url) as llm:
        with pytest.raises(ProviderError, match="model overloaded"):
            await model.embed(["x"])
        with pytest.raises(ProviderError, match="model overloaded"):
            await llm.complete("p", max_tokens=5, timeout=TIMEOUT)


async def test_wrong_dimension_in_any_row_is_a_dimension_mismatch(fake: FakeOpenAIServer) -> None:
    data = [{"index": 0, "embedding": vec()}, {"index": 1, "embedding": vec(9)}]
    fake.script(EMBEDDINGS, Reply(200, {"data": data}))
    async with embedder(fake.url) as model:
        with pytest.raises(DimensionMismatch) as caught:
            await model.embed(["a", "b"])
    assert (caught.value.expected, caught.value.got) == (8, 9)
    assert "texts[1]" in str(caught.value)


JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
)
JSON_ANY = st.recursive(
    JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)
ITEM = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "index": st.one_of(st.integers(-1, 3), JSON_LEAF),
            "embedding": st.one_of(
                st.lists(JSON_LEAF, min_size=8, max_size=8),
                st.lists(st.floats(-1, 1), min_size=7, max_size=9),
                JSON_ANY,
            ),
        },
    ),
    JSON_ANY,
)
ANSWER = st.one_of(
    st.fixed_dictionaries({"data": st.lists(ITEM, max_size=4)}),
    st.fixed_dictionaries({"data": JSON_ANY}),
    JSON_ANY,
)


@pytest.fixture(scope="module")
def runner_and_client() -> Iterator[tuple[asyncio.Runner, httpx.AsyncClient]]:
    with asyncio.Runner() as runner:
        client = runner.run(_client())
        yield runner, client
        runner.run(client.aclose())


async def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient()


@settings(max_examples=60)
@given(answer=ANSWER, count=st.integers(1, 3))
def test_any_json_answer_is_a_matrix_or_a_typed_error(
    fake: FakeOpenAIServer,
    runner_and_client: tuple[asyncio.Runner, httpx.AsyncClient],
    answer: Any,
    count: int,
) -> None:
    """Property: whatever JSON the server answers, embed returns a finite
    (count, 8) float32 matrix or raises ModelError/DimensionMismatch, nothing else."""
    fake.reset()
    runner, client = runner_and_client
    fake.script(EMBEDDINGS, Reply(200, body=json.dumps(answer).encode()))
    model = embedder(fake.url, http_client=client)
    try:
        matrix = runner.run(model.embed([f"t{i}" for i in range(count)]))
    except (ModelError, DimensionMismatch):
        return
    assert matrix.shape == (count, 8)
    assert matrix.dtype == np.float32
    assert np.isfinite(matrix).all()


@settings(max_examples=40)
@given(
    count=st.integers(1, 12),
    batch_size=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
    drop_index=st.booleans(),
)
def test_rows_keep_input_order_for_any_answer_order_and_batch_size(
    fake: FakeOpenAIServer,
    runner_and_client: tuple[asyncio.Runner, httpx.AsyncClient],
    count: int,
    batch_size: int,
    seed: int,
    drop_index: bool,
) -> None:
    """Property: the server answers each batch's rows in any order (with `index`);
    row i of the result is texts[i]'s vector whatever the batch size."""
    fake.reset()
    runner, client = runner_and_client
    texts = [f"text number {i}" for i in range(count)]
    rng = random.Random(seed)
    for start in range(0, count, batch_size):
        batch = texts[start : start + batch_size]
        data: list[dict[str, Any]] = [
            {"index": i, "embedding": vector_for(t, 8)} for i, t in enumerate(batch)
        ]
        if not drop_index:
            rng.shuffle(data)
        else:  # no index at all: position decides
            for item in data:
                del item["index"]
        fake.script(EMBEDDINGS, Reply(200, {"data": data}))
    model = embedder(fake.url, http_client=client, batch_size=batch_size)
    matrix = runner.run(model.embed(texts))
    want = np.array([vector_for(t, 8) for t in texts], dtype=np.float32)
    np.testing.assert_array_equal(matrix, want)
    assert len(fake.requests_to(EMBEDDINGS)) == math.ceil(count / batch_size)


# -- chat answers --------------------------------------------------------------------------------

HOSTILE_CHAT: dict[str, Reply] = {
    "not-json": Reply(
        200, body=b"event: data\ndata: {}\n\n", headers={"Content-Type": "text/event-stream"}
    ),
    "json-string": Reply(200, "hello"),
    "no-choices": Reply(200, {"id": "x"}),
    "empty-choices": Reply(200, {"choices": []}),
    "choice-not-object": Reply(200, {"choices": ["hi"]}),
    "no-message": Reply(200, {"choices": [{"text": "hi"}]}),
    "null-content": Reply(
        200, {"choices": [{"message": {"content": None}, "finish_reason": "length"}]}
    ),
    "list-content": Reply(200, {"choices": [{"message": {"content": [{"type": "text"}]}}]}),
    "deep-nesting": Reply(200, body=DEEP),
    "error-in-200": Reply(200, {"error": "rate limited"}),
}


@pytest.mark.parametrize("name", list(HOSTILE_CHAT))
async def test_hostile_chat_answer_is_a_typed_error(fake: FakeOpenAIServer, name: str) -> None:
    fake.script(CHAT, HOSTILE_CHAT[name])
    async with chat(fake.url) as model:
        with pytest.raises(ModelError) as caught:
            await model.complete("p", max_tokens=5, timeout=TIMEOUT)
    assert len(fake.requests_to(CHAT)) == 1
    assert_no_key(caught.value)


async def test_a_key_echoed_in_a_misshapen_answer_is_not_cut_in_half(
    fake: FakeOpenAIServer,
) -> None:
    """The message quotes the start of a bad `choices`; the key is redacted
    before that cut, so no prefix of it survives (docs/providers.md)."""
    for pad in range(60, 90, 3):
        fake.script(CHAT, Reply(200, {"choices": "x" * pad + KEY}))
        async with chat(fake.url) as model:
            with pytest.raises(ModelError) as caught:
                await model.complete("p", max_tokens=5, timeout=TIMEOUT)
        assert_no_key(caught.value)


# -- retries: statuses and Retry-After -----------------------------------------------------------

ABSURD_RETRY_AFTER = [
    {"Retry-After": "1e308"},
    {"Retry-After": "99999999999999999999999999999"},
    {"Retry-After": "inf"},
    {"Retry-After": "nan"},
    {"Retry-After": "-5"},
    {"Retry-After": "soon"},
    {"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"},
    {"Retry-After": "Mon, 01 Jan 1900 00:00:00 GMT"},
    {"Retry-After": "Mon, 99 Foo 0000 99:99:99 GMT"},
    {"retry-after-ms": "1e300"},
    {"retry-after-ms": "-1"},
    {},
]


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504, 408])
@pytest.mark.parametrize("headers", ABSURD_RETRY_AFTER, ids=lambda h: repr(h)[:40])
async def test_retryable_statuses_end_within_the_timeout_and_bounded_attempts(
    fake: FakeOpenAIServer, status: int, headers: dict[str, str]
) -> None:
    fake.script(EMBEDDINGS, *[Reply(status, {"error": {"message": "busy"}}, headers=headers)] * 5)
    started = time.monotonic()
    async with embedder(fake.url, timeout=1.0) as model:
        with pytest.raises(ModelError) as caught:
            await model.embed(["x"])
    assert time.monotonic() - started < 1.5
    assert 1 <= len(fake.requests_to(EMBEDDINGS)) <= FAST.max_attempts
    assert isinstance(caught.value, ProviderError)
    assert caught.value.status == status


@settings(max_examples=200)
@given(
    name=st.sampled_from(["Retry-After", "retry-after-ms", "RETRY-AFTER"]),
    value=st.one_of(
        st.text(max_size=40),
        st.from_regex(
            r"[A-Z][a-z]{2}, \d{1,3} [A-Z][a-z]{2} \d{1,6} "
            r"\d{1,3}:\d{1,3}:\d{1,3} [A-Z+\-0-9]{1,5}",
            fullmatch=True,
        ),
        st.floats().map(repr),
        st.integers().map(str),
    ),
)
def test_parse_retry_after_never_raises(name: str, value: str) -> None:
    seconds = parse_retry_after({name: value})
    assert seconds is None or (math.isfinite(seconds) and seconds >= 0)


# -- transport-level hostility -------------------------------------------------------------------


async def test_slow_drip_body_times_out_within_the_timeout() -> None:
    body = good_embedding_body()

    def drip(conn: socket.socket) -> None:
        conn.sendall(head(200, len(body)))
        for byte in body:
            conn.sendall(bytes([byte]))
            time.sleep(0.1)

    with raw_server(drip) as server:
        started = time.monotonic()
        async with embedder(server.url, timeout=1.0) as model:
            with pytest.raises(ModelTimeout) as caught:
                await model.embed(["x"])
        assert time.monotonic() - started < 2.0
    assert_no_key(caught.value)


async def test_headers_that_never_come_time_out() -> None:
    with raw_server(lambda conn: time.sleep(3)) as server:
        started = time.monotonic()
        async with chat(server.url) as model:
            with pytest.raises(ModelTimeout):
                await model.complete("p", max_tokens=5, timeout=0.5)
        assert time.monotonic() - started < 1.5


async def test_connection_reset_mid_body_is_retried_then_a_provider_error() -> None:
    def reset(conn: socket.socket) -> None:
        conn.sendall(head(200, 1000) + b'{"data": [{"index": 0, "emb')
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    with raw_server(reset) as server:
        async with embedder(server.url) as model:
            with pytest.raises(ProviderError) as caught:
                await model.embed(["x"])
        assert server.requests == FAST.max_attempts
    assert caught.value.status is None
    assert caught.value.attempts == FAST.max_attempts
    assert_no_key(caught.value)


async def test_a_body_far_larger_than_sane_is_refused(fake: FakeOpenAIServer) -> None:
    """A valid answer padded to 24 MB for one 8-dimensional vector: refused, not parsed."""
    answer = {"data": [{"index": 0, "embedding": vec()}], "padding": "x" * 24_000_000}
    fake.script(EMBEDDINGS, Reply(200, body=json.dumps(answer).encode()))
    async with embedder(fake.url) as model:
        with pytest.raises(ProviderError, match="too large"):
            await model.embed(["x"])
    assert len(fake.requests_to(EMBEDDINGS)) == 1


async def test_a_chunked_body_far_larger_than_sane_is_refused() -> None:
    """No Content-Length (chunked): the cap holds while reading."""
    chunk = b" " * 1_000_000

    def endless(conn: socket.socket) -> None:
        conn.sendall(head(200, extra="Transfer-Encoding: chunked\r\n"))
        conn.sendall(b"%x\r\n%s\r\n" % (len(b'{"choices": []}'), b'{"choices": []}'))
        for _ in range(40):
            conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.sendall(b"0\r\n\r\n")

    with raw_server(endless) as server:
        async with chat(server.url) as model:
            with pytest.raises(ProviderError, match="too large"):
                await model.complete("p", max_tokens=5, timeout=TIMEOUT)


async def test_a_gzip_bomb_is_not_inflated_without_bound(fake: FakeOpenAIServer) -> None:
    """64 MB of JSON whitespace gzipped to ~64 KB: the decompressed size is capped."""
    squeeze = gzip.compress(good_embedding_body() + b" " * 64_000_000, compresslevel=6)
    fake.script(EMBEDDINGS, Reply(200, body=squeeze, headers={"Content-Encoding": "gzip"}))
    async with embedder(fake.url) as model:
        with pytest.raises(ProviderError, match="too large"):
            await model.embed(["x"])


async def test_a_broken_gzip_body_is_a_provider_error(fake: FakeOpenAIServer) -> None:
    fake.script(
        EMBEDDINGS, Reply(200, body=b"not gzip at all", headers={"Content-Encoding": "gzip"})
    )
    async with embedder(fake.url) as model:
        with pytest.raises(ProviderError):
            await model.embed(["x"])


@pytest.mark.parametrize("own_client", [False, True])
async def test_a_redirect_to_another_host_is_not_followed(
    fake: FakeOpenAIServer, own_client: bool
) -> None:
    def other_host(conn: socket.socket) -> None:
        body = good_embedding_body()
        conn.sendall(head(200, len(body)) + body)

    with raw_server(other_host) as elsewhere:
        fake.script(
            EMBEDDINGS,
            Reply(307, body=b"", headers={"Location": elsewhere.url + "/v1/embeddings"}),
        )
        client = httpx.AsyncClient(follow_redirects=True) if own_client else None
        try:
            async with embedder(fake.url, http_client=client) as model:
                with pytest.raises(ProviderError) as caught:
                    await model.embed(["x"])
        finally:
            if client is not None:
                await client.aclose()
        assert elsewhere.requests == 0
    assert caught.value.status == 307


async def test_texts_that_cannot_be_sent_as_json_are_invalid_input(fake: FakeOpenAIServer) -> None:
    async with embedder(fake.url) as model, chat(fake.url) as llm:
        with pytest.raises(InvalidInput) as caught:
            await model.embed(["fine", "lone \ud800 surrogate"])
        assert caught.value.field == "texts[1]"
        with pytest.raises(InvalidInput) as caught:
            await llm.complete("x\udfff", max_tokens=5, timeout=TIMEOUT)
        assert caught.value.field == "prompt"
        with pytest.raises(InvalidInput) as caught:
            await llm.complete("x", max_tokens=5, timeout=TIMEOUT, system="\ud800")
        assert caught.value.field == "system"
        # NUL is valid Unicode and JSON escapes it: it goes out.
        assert (await model.embed(["nul \x00"])).shape == (1, 8)
    assert fake.requests_to(CHAT) == []
    assert [r.body["input"] for r in fake.requests_to(EMBEDDINGS)] == [["nul \x00"]]


# -- the API key never shows ---------------------------------------------------------------------

BAD_KEYS = [
    "sk-é-0123456789",
    "sk-abc\ndef0123456789",
    "sk-abc\x00def0123456789",
    "sk abc def 0123456789",
    "sk-abcdef0123456789\n",
]


@pytest.mark.parametrize(
    "key", BAD_KEYS, ids=["non-ascii", "newline", "nul", "spaces", "trailing-newline"]
)
@pytest.mark.parametrize("kind", ["embedder", "chat"])
def test_an_unsendable_key_is_refused_at_construction_without_echoing_it(
    key: str, kind: str
) -> None:
    make = embedder if kind == "embedder" else chat
    with pytest.raises(InvalidInput) as caught:
        make("http://127.0.0.1:9", api_key=key)
    assert caught.value.field == "api_key"
    assert_no_key(caught.value, key=key.strip())


class _Settings:
    embeddings_url = "http://127.0.0.1:9"
    embeddings_model = "e"
    embedding_dimension = 8
    llm_url = "http://127.0.0.1:9"
    llm_model = "m"
    api_key = "sk-from-env-0123456789\n"


def test_a_key_with_a_trailing_newline_from_the_environment_names_the_variable() -> None:
    for build in (embedder_from_settings, chat_model_from_settings):
        with pytest.raises(ConfigurationError, match="AGENT_MEMORY_API_KEY") as caught:
            build(_Settings())  # type: ignore[arg-type]
        assert_no_key(caught.value, key=_Settings.api_key.strip())


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Token": "tok-é-0123456789"},
        {"X-Token": "tok\r\nX-Evil: 1"},
        {"Bad Name": "v"},
        {"": "v"},
    ],
    ids=["non-ascii-value", "crlf-value", "space-in-name", "empty-name"],
)
def test_unsendable_extra_headers_are_refused_at_construction(headers: dict[str, str]) -> None:
    with pytest.raises(InvalidInput) as caught:
        embedder("http://127.0.0.1:9", headers=headers)
    assert caught.value.field == "headers"
    for value in headers.values():
        if len(value) > 8:
            assert value not in str(caught.value)


async def test_a_key_echoed_by_the_server_never_reaches_errors_or_logs(
    fake: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Every place a server can echo the key: error JSON on retried and final
    statuses, a non-JSON 200, a misshapen 200. Logs captured at DEBUG from every
    logger (httpx and httpcore included)."""
    echo = f"invalid key {KEY} for org"
    fake.script(
        EMBEDDINGS,
        Reply(503, {"error": {"message": echo}}),
        Reply(429, body=echo.encode(), headers={"Content-Type": "text/plain"}),
        Reply(401, {"error": {"message": echo, "code": KEY}}),
        Reply(200, body=echo.encode(), headers={"Content-Type": "text/plain"}),
        Reply(200, {"data": [{"index": KEY, "embedding": vec()}]}),
        Reply(200, {"data": [{"index": 0, "embedding": [KEY] * 8}]}),
    )
    errors: list[BaseException] = []
    with caplog.at_level(logging.DEBUG):
        async with embedder(fake.url) as model:
            for _ in range(4):
                with pytest.raises(ModelError) as caught:
                    await model.embed(["x"])
                errors.append(caught.value)
    assert any(r.name.startswith("httpcore") for r in caplog.records)
    logs = "\n".join(r.getMessage() for r in caplog.records)
    for error in errors:
        assert_no_key(error, logs=logs)
    assert repr(model).find(KEY[:10]) == -1


# -- local embedders: typed refusals, determinism ------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


async def test_minilm_refuses_a_surrogate_anywhere_in_a_batch(minilm: MiniLMEmbedder) -> None:
    with pytest.raises(InvalidInput, match="text 2"):
        await minilm.embed(["fine", "also fine", "bad \udcff tail", "fine again"])


async def test_minilm_handles_nul_and_control_only_texts(minilm: MiniLMEmbedder) -> None:
    texts = ["nul\x00inside", "\x00", "\x01\x02\x7f", "", " \t\n", "\u200b\ufeff"]
    matrix = await minilm.embed(texts)
    assert matrix.shape == (len(texts), 384)
    assert np.isfinite(matrix).all()
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)


def test_minilm_is_deterministic_and_batch_independent(minilm: MiniLMEmbedder) -> None:
    texts = ["a cat", "the weather in Paris is mild today", "x", "nul\x00 and é"]
    first = minilm.embed_sync(texts)
    np.testing.assert_array_equal(first, minilm.embed_sync(texts))
    alone = np.stack([minilm.embed_sync([t])[0] for t in texts])
    np.testing.assert_allclose(first, alone, atol=1e-5)
    reversed_rows = minilm.embed_sync(texts[::-1])[::-1]
    np.testing.assert_allclose(first, reversed_rows, atol=1e-5)


def test_minilm_truncates_a_very_long_text(minilm: MiniLMEmbedder) -> None:
    """Truncated to 256 word pieces: more of the same text changes nothing."""
    short, long = minilm.embed_sync(["word " * 300]), minilm.embed_sync(["word " * 3000])
    np.testing.assert_array_equal(short, long)


@settings(max_examples=12)
@given(texts=st.lists(st.text(max_size=30), min_size=1, max_size=4))
def test_minilm_any_text_is_a_unit_vector_or_a_typed_error(
    minilm: MiniLMEmbedder, texts: list[str]
) -> None:
    try:
        matrix = minilm.embed_sync(texts)
    except InvalidInput:
        assert any(0xD800 <= ord(c) <= 0xDFFF for t in texts for c in t)
        return
    assert matrix.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("texts", ["a bare string", 42, None], ids=["str", "int", "none"])
def test_sentence_transformers_refuses_a_non_sequence_before_loading(texts: Any) -> None:
    with pytest.raises(InvalidInput, match="texts"):
        SentenceTransformerEmbedder().embed_sync(texts)


async def test_a_huge_header_block_is_a_provider_error() -> None:
    def huge_headers(conn: socket.socket) -> None:
        body = good_embedding_body()
        conn.sendall(head(200, len(body), extra=f"X-Junk: {'j' * 200_000}\r\n") + body)

    with raw_server(huge_headers) as server:
        started = time.monotonic()
        async with embedder(server.url) as model:
            with pytest.raises(ProviderError):
                await model.embed(["x"])
        assert time.monotonic() - started < TIMEOUT


async def test_http_1_0_close_delimited_body_is_still_capped() -> None:
    """An HTTP/1.0 answer without Content-Length ends at close: still capped."""

    def endless(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
        conn.sendall(good_embedding_body())
        with contextlib.suppress(OSError):
            for _ in range(30):
                conn.sendall(b" " * 1_000_000)

    with raw_server(endless) as server:
        async with embedder(server.url) as model:
            with pytest.raises(ProviderError, match="too large"):
                await model.embed(["x"])

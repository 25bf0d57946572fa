"""OpenAICompatibleEmbedder against the scripted local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import gc
import math
import warnings
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from fake_openai_server import EMBEDDINGS, FakeOpenAIServer, Reply, vector_for
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.adapters.openai import (
    OpenAICompatibleEmbedder,
    ProviderError,
    RetryPolicy,
)
from agent_memory.domain.errors import (
    DimensionMismatch,
    InvalidInput,
    ModelError,
    StoreClosed,
)
from agent_memory.ports.models import Embedder

FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.005)
KEY = "sk-test-embed-0123456789abcdef"


def make(fake: FakeOpenAIServer, **kwargs: object) -> OpenAICompatibleEmbedder:
    options: dict[str, object] = {"api_key": KEY, "retry": FAST, "timeout": 5.0}
    options.update(kwargs)
    return OpenAICompatibleEmbedder(fake.url, "test-embed", 8, **options)  # type: ignore[arg-type]


def expected(texts: list[str], dim: int = 8) -> np.ndarray:
    return np.array([vector_for(t, dim) for t in texts], dtype=np.float32).reshape(len(texts), dim)


async def test_rows_follow_input_order_and_batches_split_requests(fake: FakeOpenAIServer) -> None:
    texts = ["alpha", "beta", "gamma", "delta", "epsilon"]
    async with make(fake, batch_size=2) as embedder:
        assert isinstance(embedder, Embedder)
        matrix = await embedder.embed(texts)
    assert matrix.dtype == np.float32
    assert matrix.shape == (5, 8)
    np.testing.assert_array_equal(matrix, expected(texts))
    sent = fake.requests_to(EMBEDDINGS)
    assert [r.body["input"] for r in sent] == [["alpha", "beta"], ["gamma", "delta"], ["epsilon"]]
    first = sent[0]
    assert first.method == "POST"
    assert first.body["model"] == "test-embed"
    assert first.body["encoding_format"] == "float"
    assert "dimensions" not in first.body
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert first.headers["content-type"] == "application/json"


async def test_no_texts_makes_no_request(fake: FakeOpenAIServer) -> None:
    async with make(fake) as embedder:
        matrix = await embedder.embed([])
    assert matrix.shape == (0, 8)
    assert matrix.dtype == np.float32
    assert fake.requests == []


async def test_no_key_sends_no_authorization(fake: FakeOpenAIServer) -> None:
    async with make(fake, api_key=None) as embedder:
        await embedder.embed(["x"])
    assert "authorization" not in fake.requests[0].headers


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_base_url_with_or_without_v1(fake: FakeOpenAIServer, suffix: str) -> None:
    embedder = OpenAICompatibleEmbedder(fake.url + suffix, "m", 8, retry=FAST)
    assert embedder.base_url == f"{fake.url}/v1"
    async with embedder:
        await embedder.embed(["one"])
    assert [r.path for r in fake.requests] == [EMBEDDINGS]


async def test_send_dimensions_asks_for_the_declared_dimension(fake: FakeOpenAIServer) -> None:
    async with make(fake, send_dimensions=True) as embedder:
        await embedder.embed(["x"])
    assert fake.requests[0].body["dimensions"] == 8


def test_space_is_unprovable_unless_configured() -> None:
    generic = OpenAICompatibleEmbedder("http://127.0.0.1:9", "nomic-embed-text", 768)
    assert generic.space.model == "nomic-embed-text"
    assert generic.space.dimension == 768
    assert generic.space.provable is False
    pinned = OpenAICompatibleEmbedder(
        "http://127.0.0.1:9", "bge-m3", 1024, revision="5617a9f", provable=True
    )
    assert pinned.space.provable is True
    assert pinned.space.revision == "5617a9f"
    assert pinned.space.identity != generic.space.identity


async def test_wrong_dimension_raises_dimension_mismatch(fake: FakeOpenAIServer) -> None:
    fake.reset(dimension=5)
    async with make(fake, batch_size=2) as embedder:
        with pytest.raises(DimensionMismatch) as info:
            await embedder.embed(["a", "b", "c"])
    assert info.value.expected == 8
    assert info.value.got == 5
    assert "texts[" in str(info.value)


def _item(index: object, embedding: object) -> dict[str, object]:
    return {"object": "embedding", "index": index, "embedding": embedding}


GOOD = [0.5] * 8


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (Reply(200, body=b"<html>oops</html>", headers={"Content-Type": "text/html"}), "not JSON"),
        (Reply(200, {"object": "list"}), "'data' must be a list"),
        (Reply(200, {"data": {"0": GOOD}}), "'data' must be a list"),
        (Reply(200, [GOOD, GOOD]), "expected a JSON object"),
        (Reply(200, {"data": [_item(0, GOOD)]}), "1 embeddings for 2 inputs"),
        (Reply(200, {"data": [_item(0, GOOD), _item(0, GOOD)]}), "out of range or repeated"),
        (Reply(200, {"data": [_item(0, GOOD), _item(2, GOOD)]}), "out of range or repeated"),
        (Reply(200, {"data": [_item("0", GOOD), _item(1, GOOD)]}), "index must be an integer"),
        (Reply(200, {"data": [_item(0, "AAAA"), _item(1, GOOD)]}), "got str"),
        (Reply(200, {"data": [_item(0, None), _item(1, GOOD)]}), "got nothing"),
        (Reply(200, {"data": [_item(0, ["1"] * 8), _item(1, GOOD)]}), "flat list of numbers"),
        (Reply(200, {"data": [_item(0, [[0.1]] * 8), _item(1, GOOD)]}), "flat list of numbers"),
        (Reply(200, {"data": ["x", _item(1, GOOD)]}), "data[0] must be an object"),
        (
            Reply(
                200,
                body=b'{"data": [{"index": 1, "embedding": [NaN, 0, 0, 0, 0, 0, 0, 0]},'
                b' {"index": 0, "embedding": [0, 0, 0, 0, 0, 0, 0, 0]}]}',
            ),
            "texts[1] has non-finite values",
        ),
        (Reply(200, {"data": [_item(0, [1e39] * 8), _item(1, GOOD)]}), "non-finite"),
    ],
)
async def test_malformed_answers_say_what_was_wrong(
    fake: FakeOpenAIServer, reply: Reply, needle: str
) -> None:
    fake.script(EMBEDDINGS, reply)
    async with make(fake) as embedder:
        with pytest.raises(ModelError) as info:
            await embedder.embed(["a", "b"])
    assert needle in str(info.value)
    assert isinstance(info.value, ProviderError)
    assert info.value.status == 200
    assert len(fake.requests) == 1, "a malformed 2xx is not retried"
    assert KEY not in str(info.value)


async def test_missing_index_falls_back_to_position(fake: FakeOpenAIServer) -> None:
    fake.script(EMBEDDINGS, Reply(200, {"data": [{"embedding": GOOD}, {"embedding": [0.25] * 8}]}))
    async with make(fake) as embedder:
        matrix = await embedder.embed(["a", "b"])
    assert matrix[0, 0] == 0.5
    assert matrix[1, 0] == 0.25


@pytest.mark.parametrize(
    ("texts", "field"),
    [("just one string", "texts"), (["ok", 3], "texts[1]"), ([b"bytes"], "texts[0]")],
)
async def test_bad_texts_name_the_field(fake: FakeOpenAIServer, texts: object, field: str) -> None:
    async with make(fake) as embedder:
        with pytest.raises(InvalidInput) as info:
            await embedder.embed(texts)  # type: ignore[arg-type]
    assert info.value.field == field
    assert fake.requests == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"dimension": 0}, "dimension"),
        ({"batch_size": 0}, "batch_size"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": math.inf}, "timeout"),
        ({"model": " "}, "model"),
        ({"base_url": "ftp://x"}, "base_url"),
    ],
)
def test_bad_configuration_names_the_field(kwargs: dict[str, object], field: str) -> None:
    options: dict[str, object] = {"base_url": "http://127.0.0.1:9", "model": "m", "dimension": 8}
    options.update(kwargs)
    with pytest.raises(InvalidInput) as info:
        OpenAICompatibleEmbedder(**options)  # type: ignore[arg-type]
    assert info.value.field == field


async def test_closed_embedder_rejects_calls(fake: FakeOpenAIServer) -> None:
    embedder = make(fake)
    await embedder.embed(["warm"])
    await embedder.aclose()
    await embedder.aclose()  # idempotent
    with pytest.raises(StoreClosed):
        await embedder.embed(["late"])
    assert len(fake.requests) == 1


async def test_close_waits_for_an_inflight_embed(fake: FakeOpenAIServer) -> None:
    fake.script(EMBEDDINGS, Reply(200, {"data": [_item(0, GOOD)]}, delay=0.2))
    embedder = make(fake)
    task = asyncio.create_task(embedder.embed(["slow"]))
    for _ in range(500):  # until the request is in flight
        if fake.requests:
            break
        await asyncio.sleep(0.01)
    assert fake.requests, "the request never reached the server"
    assert not task.done()
    await embedder.aclose()
    assert task.done()
    assert task.result().shape == (1, 8)


def test_repr_shows_url_and_model_only() -> None:
    embedder = OpenAICompatibleEmbedder(
        "http://127.0.0.1:9/", "m", 8, api_key=KEY, headers={"OpenAI-Organization": "org-secret"}
    )
    text = repr(embedder)
    assert (
        text == "OpenAICompatibleEmbedder(base_url='http://127.0.0.1:9/v1', model='m', dimension=8)"
    )
    assert KEY not in text
    assert "org-secret" not in text


@pytest.fixture(scope="module")
def loop_and_client() -> Iterator[tuple[asyncio.Runner, httpx.AsyncClient]]:
    """One event loop and one HTTP client for all examples of the property below."""
    with asyncio.Runner() as runner:
        client = runner.run(_make_client())
        yield runner, client
        runner.run(client.aclose())


async def _make_client() -> httpx.AsyncClient:
    return httpx.AsyncClient()


@settings(max_examples=40)
@given(
    texts=st.lists(st.text(max_size=12), min_size=1, max_size=20),
    batch_size=st.integers(min_value=1, max_value=8),
)
def test_rows_in_input_order_for_any_batch_size(
    fake: FakeOpenAIServer,
    loop_and_client: tuple[asyncio.Runner, httpx.AsyncClient],
    texts: list[str],
    batch_size: int,
) -> None:
    """Property: row i is texts[i]'s vector, whatever the batching; one request per batch."""
    fake.reset()
    runner, client = loop_and_client
    embedder = make(fake, batch_size=batch_size, http_client=client)
    matrix = runner.run(embedder.embed(texts))
    np.testing.assert_array_equal(matrix, expected(texts))
    sent = fake.requests_to(EMBEDDINGS)
    assert len(sent) == math.ceil(len(texts) / batch_size)
    assert [t for r in sent for t in r.body["input"]] == texts


def test_each_call_in_a_new_event_loop_gets_a_working_client(fake: FakeOpenAIServer) -> None:
    """Scripts run one `asyncio.run` per call: never reuse another loop's pooled connections."""
    embedder = make(fake, timeout=2.0)
    with asyncio.Runner() as first, asyncio.Runner() as second:
        first.run(embedder.embed(["one"]))
        opened_in_first = embedder._http._client
        assert opened_in_first is not None
        matrix = second.run(embedder.embed(["two"]))
        np.testing.assert_array_equal(matrix, expected(["two"]))
        first.run(opened_in_first.aclose())
        second.run(embedder.aclose())
    assert len(fake.requests) == 2


def test_asyncio_run_per_call_then_close(fake: FakeOpenAIServer) -> None:
    """A script's pattern: each call and the final close in their own `asyncio.run`.

    The keep-alive sockets of a finished loop can only be dropped (asyncio cannot
    close them once their loop is closed), hence the ResourceWarning filter.
    """
    embedder = make(fake)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        for text in ("one", "two"):
            matrix = asyncio.run(embedder.embed([text]))
            np.testing.assert_array_equal(matrix, expected([text]))
        asyncio.run(embedder.aclose())  # the client's loop is gone: dropped, not awaited
        with pytest.raises(StoreClosed):
            asyncio.run(embedder.embed(["three"]))
        gc.collect()
    assert len(fake.requests) == 2

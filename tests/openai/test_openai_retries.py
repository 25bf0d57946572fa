"""Retries, timeouts, HTTP errors and secret hygiene, over real loopback HTTP."""

from __future__ import annotations

import itertools
import logging
import random
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from fake_openai_server import CHAT, EMBEDDINGS, FakeOpenAIServer, Reply

from agent_memory.adapters.openai import (
    OpenAICompatibleChatModel,
    OpenAICompatibleEmbedder,
    ProviderError,
    RetryPolicy,
)
from agent_memory.adapters.openai.retry import is_retryable_status, parse_retry_after
from agent_memory.domain.errors import InvalidInput, ModelError, ModelTimeout

KEY = "sk-live-SECRET-0123456789abcdef"
FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.005)
OK_CHAT = Reply(200, {"choices": [{"message": {"content": "fine"}, "finish_reason": "stop"}]})


def chat(fake: FakeOpenAIServer, retry: RetryPolicy = FAST) -> OpenAICompatibleChatModel:
    return OpenAICompatibleChatModel(fake.url, "m", api_key=KEY, retry=retry)


def embedder(fake: FakeOpenAIServer, **kwargs: object) -> OpenAICompatibleEmbedder:
    options: dict[str, object] = {"api_key": KEY, "retry": FAST, "timeout": 5.0}
    options.update(kwargs)
    return OpenAICompatibleEmbedder(fake.url, "e", 8, **options)  # type: ignore[arg-type]


def gaps(fake: FakeOpenAIServer, path: str) -> list[float]:
    times = [r.at for r in fake.requests_to(path)]
    return [b - a for a, b in itertools.pairwise(times)]


async def test_429_then_success_honours_retry_after(fake: FakeOpenAIServer) -> None:
    fake.script(
        CHAT,
        Reply(429, {"error": {"message": "Rate limit reached"}}, headers={"Retry-After": "0.3"}),
        OK_CHAT,
    )
    async with chat(fake) as model:
        assert await model.complete("p", max_tokens=5, timeout=5) == "fine"
    assert len(fake.requests_to(CHAT)) == 2
    (gap,) = gaps(fake, CHAT)
    assert gap >= 0.28, f"Retry-After: 0.3 was not honoured (retried after {gap:.3f} s)"


async def test_retry_after_ms_wins(fake: FakeOpenAIServer) -> None:
    fake.script(
        EMBEDDINGS,
        Reply(429, {"error": "slow down"}, headers={"retry-after-ms": "250", "Retry-After": "9"}),
    )
    async with embedder(fake) as emb:
        await emb.embed(["x"])
    (gap,) = gaps(fake, EMBEDDINGS)
    assert 0.23 <= gap < 2.0


async def test_retry_after_is_capped(fake: FakeOpenAIServer) -> None:
    fake.script(CHAT, Reply(503, {}, headers={"Retry-After": "120"}), OK_CHAT)
    policy = RetryPolicy(max_attempts=2, base_delay=0.001, retry_after_cap=0.05)
    started = time.monotonic()
    async with chat(fake, policy) as model:
        assert await model.complete("p", max_tokens=5, timeout=5) == "fine"
    assert time.monotonic() - started < 2.0
    assert len(fake.requests) == 2


async def test_503_twice_then_success(fake: FakeOpenAIServer) -> None:
    fake.script(
        EMBEDDINGS,
        Reply(503, {"error": {"message": "overloaded"}}),
        Reply(503, body=b"Service Unavailable", headers={"Content-Type": "text/plain"}),
    )
    async with embedder(fake) as emb:
        matrix = await emb.embed(["a", "b"])
    assert matrix.shape == (2, 8)
    sent = fake.requests_to(EMBEDDINGS)
    assert len(sent) == 3
    assert all(r.body == sent[0].body for r in sent), "a retry resends the same request"


async def test_retries_exhausted_reports_attempts_and_last_error(
    fake: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake.script(CHAT, *[Reply(500, {"error": {"message": f"boom {i} {KEY}"}}) for i in range(3)])
    with caplog.at_level(logging.WARNING, logger="agent_memory.adapters.openai"):
        async with chat(fake) as model:
            with pytest.raises(ProviderError) as info:
                await model.complete("p", max_tokens=5, timeout=5)
    error = info.value
    assert error.attempts == 3
    assert error.status == 500
    assert "after 3 attempts" in str(error)
    assert "HTTP 500: boom 2" in str(error)
    assert len(fake.requests) == 3
    assert len([r for r in caplog.records if "retrying" in r.getMessage()]) == 2
    assert KEY not in caplog.text
    assert KEY not in str(error)


async def test_max_attempts_one_disables_retries(fake: FakeOpenAIServer) -> None:
    fake.script(CHAT, Reply(503, {}), OK_CHAT)
    async with chat(fake, RetryPolicy(max_attempts=1)) as model:
        with pytest.raises(ProviderError) as info:
            await model.complete("p", max_tokens=5, timeout=5)
    assert info.value.attempts == 1
    assert len(fake.requests) == 1


async def test_dropped_connection_is_retried(fake: FakeOpenAIServer) -> None:
    fake.script(CHAT, Reply(drop=True), OK_CHAT)
    async with chat(fake) as model:
        assert await model.complete("p", max_tokens=5, timeout=5) == "fine"
    assert len(fake.requests) == 2


async def test_unreachable_server_is_a_model_error_after_retries() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = OpenAICompatibleChatModel(f"http://127.0.0.1:{port}", "m", api_key=KEY, retry=FAST)
    async with model:
        with pytest.raises(ProviderError) as info:
            await model.complete("p", max_tokens=5, timeout=5)
    assert info.value.status is None
    assert info.value.attempts == 3
    assert "transport error" in str(info.value)


async def test_chat_timeout(fake: FakeOpenAIServer) -> None:
    fake.script(CHAT, Reply(delay=3.0, json=OK_CHAT.json))
    started = time.monotonic()
    async with chat(fake) as model:
        with pytest.raises(ModelTimeout) as info:
            await model.complete("p", max_tokens=5, timeout=0.3)
    elapsed = time.monotonic() - started
    assert isinstance(info.value, ModelError)
    assert isinstance(info.value, TimeoutError)
    assert "within 0.3 s" in str(info.value)
    assert elapsed < 1.5, f"timeout 0.3 s took {elapsed:.2f} s"
    assert len(fake.requests) == 1


async def test_embed_timeout_is_configured(fake: FakeOpenAIServer) -> None:
    fake.script(EMBEDDINGS, Reply(delay=3.0, json={"data": []}))
    started = time.monotonic()
    async with embedder(fake, timeout=0.3) as emb:
        with pytest.raises(ModelTimeout):
            await emb.embed(["slow"])
    assert time.monotonic() - started < 1.5


async def test_timeout_covers_retries(fake: FakeOpenAIServer) -> None:
    """503s with a short Retry-After keep coming: the call's own timeout still holds."""
    fake.script(CHAT, *[Reply(503, {}, headers={"Retry-After": "0.1"}, delay=0.1)] * 10)
    policy = RetryPolicy(max_attempts=10, base_delay=0.001)
    started = time.monotonic()
    async with chat(fake, policy) as model:
        with pytest.raises(ModelError) as info:
            await model.complete("p", max_tokens=5, timeout=0.5)
    assert time.monotonic() - started < 1.5
    assert "timeout" in str(info.value) or isinstance(info.value, ModelTimeout)
    assert 1 <= len(fake.requests) < 10


async def test_a_retry_that_cannot_fit_the_deadline_fails_fast(fake: FakeOpenAIServer) -> None:
    fake.script(CHAT, Reply(429, {"error": {"message": "later"}}, headers={"Retry-After": "10"}))
    started = time.monotonic()
    async with chat(fake) as model:
        with pytest.raises(ProviderError) as info:
            await model.complete("p", max_tokens=5, timeout=2)
    assert time.monotonic() - started < 1.0
    assert info.value.status == 429
    assert "would pass the 2 s timeout" in str(info.value)


@pytest.mark.parametrize(
    ("reply", "status", "message"),
    [
        (
            Reply(
                400,
                {
                    "error": {
                        "message": "'messages' is too long",
                        "type": "invalid_request_error",
                        "code": "context_length_exceeded",
                    }
                },
            ),
            400,
            "'messages' is too long (type=invalid_request_error, code=context_length_exceeded)",
        ),
        (Reply(404, {"error": "model 'm' not found, try pulling it first"}), 404, "not found"),
        (Reply(422, {"detail": "field required"}), 422, "field required"),
        (Reply(400, {"object": "error", "message": "bad temperature"}), 400, "bad temperature"),
        (
            Reply(403, body=b"Forbidden by proxy", headers={"Content-Type": "text/plain"}),
            403,
            "Forbidden by proxy",
        ),
        (Reply(400, body=b""), 400, "Bad Request"),
    ],
)
async def test_4xx_is_a_clear_error_and_not_retried(
    fake: FakeOpenAIServer, reply: Reply, status: int, message: str
) -> None:
    fake.script(CHAT, reply)
    async with chat(fake) as model:
        with pytest.raises(ProviderError) as info:
            await model.complete("p", max_tokens=5, timeout=5)
    text = str(info.value)
    assert f"HTTP {status}" in text
    assert message in text
    assert "not retried" in text
    assert info.value.status == status
    assert info.value.attempts == 1
    assert len(fake.requests) == 1


async def test_401_never_leaks_the_key(
    fake: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Servers echo keys in errors; the key must not reach messages, reprs or logs."""
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}}
    fake.script(EMBEDDINGS, Reply(429, {"error": {"message": f"{KEY} is rate limited"}}))
    fake.script(EMBEDDINGS, Reply(401, echo))
    fake.script(CHAT, Reply(401, echo))
    emb = embedder(fake, headers={"X-Gateway-Token": "gw-token-abcdef"})
    model = chat(fake)
    with caplog.at_level(logging.DEBUG):
        async with emb, model:
            with pytest.raises(ProviderError) as embed_error:
                await emb.embed(["x"])
            with pytest.raises(ProviderError) as chat_error:
                await model.complete("p", max_tokens=5, timeout=5)
    for error in (embed_error.value, chat_error.value):
        assert error.status == 401
        assert "Incorrect API key provided: ***" in str(error)
        assert KEY not in str(error)
        assert KEY not in repr(error)
        assert KEY not in str(error.args)
    for text in (repr(emb), repr(model), model.fingerprint, caplog.text):
        assert KEY not in text
        assert "gw-token-abcdef" not in text
    assert fake.requests_to(EMBEDDINGS)[0].headers["x-gateway-token"] == "gw-token-abcdef"


def test_importing_the_adapter_does_not_import_httpx() -> None:
    code = (
        "import sys; import agent_memory.adapters.openai as o;"
        "o.OpenAICompatibleChatModel('http://127.0.0.1:9', 'm');"
        "o.OpenAICompatibleEmbedder('http://127.0.0.1:9', 'm', 8);"
        "assert 'httpx' not in sys.modules, 'httpx imported before the first call'"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_backoff_grows_with_jitter_in_the_upper_half() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0)
    rng = random.Random(7)
    for failed, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (50, 3.0)]:
        samples = [policy.backoff(failed, rng) for _ in range(200)]
        assert all(ceiling / 2 <= s <= ceiling for s in samples)
        assert max(samples) - min(samples) > ceiling / 10, "no jitter"
    assert policy.delay(1, 0.2, rng) == 0.2
    assert policy.delay(1, 99.0, rng) == 30.0


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, None),
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after": " 0.25 "}, 0.25),
        ({"Retry-After": "-1"}, None),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "nan"}, None),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "junk", "Retry-After": "2"}, 2.0),
    ],
)
def test_parse_retry_after(headers: dict[str, str], seconds: float | None) -> None:
    assert parse_retry_after(headers) == seconds


def test_parse_retry_after_http_date() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert parse_retry_after({"Retry-After": later}, now=now) == 7.0
    earlier = format_datetime(now - timedelta(seconds=7), usegmt=True)
    assert parse_retry_after({"Retry-After": earlier}, now=now) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_attempts": 0}, "retry.max_attempts"),
        ({"max_attempts": 1.5}, "retry.max_attempts"),
        ({"base_delay": -1}, "retry.base_delay"),
        ({"max_delay": float("inf")}, "retry.max_delay"),
        ({"retry_after_cap": True}, "retry.retry_after_cap"),
    ],
)
def test_bad_retry_policy_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(408, True), (429, True), (500, True), (502, True), (599, True), (400, False), (401, False),
     (404, False), (409, False), (422, False), (307, False)],
)  # fmt: skip
def test_which_statuses_are_retried(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable


async def test_408_is_retried(fake: FakeOpenAIServer) -> None:
    fake.script(CHAT, Reply(408, {"error": {"message": "request timeout"}}), OK_CHAT)
    async with chat(fake) as model:
        assert await model.complete("p", max_tokens=5, timeout=5) == "fine"
    assert len(fake.requests) == 2


async def test_a_shared_http_client_is_used_and_left_open(fake: FakeOpenAIServer) -> None:
    async with httpx.AsyncClient() as shared:
        emb = OpenAICompatibleEmbedder(fake.url, "e", 8, http_client=shared, retry=FAST)
        model = OpenAICompatibleChatModel(fake.url, "m", http_client=shared, retry=FAST)
        async with emb, model:
            await emb.embed(("tuple", "input"))
            await model.complete("p", max_tokens=5, timeout=5)
        assert not shared.is_closed, "a client passed in belongs to the caller"
        response = await shared.post(f"{fake.url}/v1/chat/completions", json={"messages": []})
        assert response.status_code == 200
    assert [r.path for r in fake.requests] == [EMBEDDINGS, CHAT, CHAT]


async def test_exhausted_quota_is_not_retried(fake: FakeOpenAIServer) -> None:
    quota = {
        "error": {
            "message": "You exceeded your current quota",
            "type": "insufficient_quota",
            "code": "insufficient_quota",
        }
    }
    fake.script(CHAT, Reply(429, quota), OK_CHAT)
    async with chat(fake) as model:
        with pytest.raises(ProviderError) as info:
            await model.complete("p", max_tokens=5, timeout=5)
    assert info.value.status == 429
    assert "exceeded your current quota" in str(info.value)
    assert len(fake.requests) == 1

"""OpenAICompatibleChatModel against the scripted local OpenAI-compatible server."""

from __future__ import annotations

import math

import pytest
from fake_openai_server import CHAT, FakeOpenAIServer, Reply

from agent_memory.adapters.openai import (
    OpenAICompatibleChatModel,
    ProviderError,
    RetryPolicy,
    is_pinned_model_name,
)
from agent_memory.domain.errors import InvalidInput, ModelError, StoreClosed
from agent_memory.ports.models import LanguageModel

FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.005)
KEY = "sk-test-chat-0123456789abcdef"


def make(
    fake: FakeOpenAIServer, model: str = "m-2024-08-06", **kwargs: object
) -> OpenAICompatibleChatModel:
    options: dict[str, object] = {"api_key": KEY, "retry": FAST}
    options.update(kwargs)
    return OpenAICompatibleChatModel(fake.url, model, **options)  # type: ignore[arg-type]


async def test_complete_sends_model_messages_and_max_tokens(fake: FakeOpenAIServer) -> None:
    async with make(fake) as model:
        assert isinstance(model, LanguageModel)
        text = await model.complete("What changed?", max_tokens=64, timeout=5, system="Be brief.")
    assert text == "echo: What changed?"
    (request,) = fake.requests_to(CHAT)
    assert request.method == "POST"
    assert request.body == {
        "model": "m-2024-08-06",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What changed?"},
        ],
        "max_tokens": 64,
        "temperature": 0.0,
        "stream": False,
    }
    assert request.headers["authorization"] == f"Bearer {KEY}"


async def test_without_system_only_the_user_message_goes(fake: FakeOpenAIServer) -> None:
    async with make(fake, temperature=0.7) as model:
        await model.complete("hi", max_tokens=1, timeout=5)
    body = fake.requests[0].body
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["temperature"] == 0.7


async def test_max_completion_tokens_field(fake: FakeOpenAIServer) -> None:
    async with make(fake, max_tokens_field="max_completion_tokens") as model:
        await model.complete("hi", max_tokens=9, timeout=5)
    body = fake.requests[0].body
    assert body["max_completion_tokens"] == 9
    assert "max_tokens" not in body


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (Reply(200, body=b"not json at all"), "not JSON"),
        (
            Reply(200, {"id": "x", "object": "chat.completion"}),
            "'choices' must be a non-empty list",
        ),
        (Reply(200, {"choices": []}), "'choices' must be a non-empty list"),
        (Reply(200, {"choices": ["text"]}), "choices[0].message must be an object"),
        (Reply(200, {"choices": [{"message": "text"}]}), "choices[0].message must be an object"),
        (
            Reply(
                200, {"choices": [{"message": {"content": None}, "finish_reason": "tool_calls"}]}
            ),
            "got null (finish_reason='tool_calls')",
        ),
        (Reply(200, {"choices": [{"message": {"content": 42}}]}), "got int"),
        (Reply(200, "just a string"), "expected a JSON object, got str"),
    ],
)
async def test_malformed_answers_say_what_was_wrong(
    fake: FakeOpenAIServer, reply: Reply, needle: str
) -> None:
    fake.script(CHAT, reply)
    async with make(fake) as model:
        with pytest.raises(ModelError) as info:
            await model.complete("p", max_tokens=5, timeout=5)
    assert needle in str(info.value)
    assert isinstance(info.value, ProviderError)
    assert info.value.url.endswith("/v1/chat/completions")
    assert len(fake.requests) == 1


def test_fingerprint_is_stable_and_secret_free() -> None:
    a = OpenAICompatibleChatModel("http://LLM.example:8000/", "m", api_key=KEY)
    b = OpenAICompatibleChatModel("http://llm.example:8000/v1", "m", api_key="sk-other-key")
    assert a.fingerprint == b.fingerprint, "the key and URL spelling must not change it"
    assert len(a.fingerprint) == 64
    assert int(a.fingerprint, 16) >= 0
    assert KEY not in a.fingerprint
    variants = {
        OpenAICompatibleChatModel("http://llm.example:8001", "m").fingerprint,
        OpenAICompatibleChatModel("http://other.example:8000", "m").fingerprint,
        OpenAICompatibleChatModel("http://llm.example:8000", "m2").fingerprint,
        OpenAICompatibleChatModel("http://llm.example:8000", "m", temperature=0.5).fingerprint,
        OpenAICompatibleChatModel("http://llm.example:8000/gw", "m").fingerprint,
    }
    assert a.fingerprint not in variants
    assert len(variants) == 5


def test_fingerprint_is_pinned_across_releases() -> None:
    """A changed fingerprint invalidates every cache keyed by it: change it on purpose only."""
    model = OpenAICompatibleChatModel("http://127.0.0.1:11434", "llama3.1:8b")
    assert model.fingerprint == "c3342637b41df4754d73739c589bcbae199d18574322503e96deaf8238ffb20e"


@pytest.mark.parametrize(
    ("name", "pinned"),
    [
        ("gpt-4o-2024-08-06", True),
        ("claude-3-5-sonnet-20241022", True),
        ("gpt-4-0613", True),
        ("gpt-3.5-turbo-0125", True),
        ("gpt-4-1106-preview", True),
        ("llama3@sha256:365c0bd3c000a25d28ddbf732fe1c6add414de7275464c4e4d1c3b5fcb5d8ad1", True),
        ("gpt-4o", False),
        ("gpt-4o-mini", False),
        ("llama3.1:8b", False),
        ("qwen2.5:7b-instruct", False),
        ("mistral:latest", False),
        ("bge-m3-2048", False),
        ("model-20241340", False),
    ],
)
def test_pinned_model_names(name: str, pinned: bool) -> None:
    assert is_pinned_model_name(name) is pinned


def test_stable_needs_temperature_zero_and_a_pinned_model() -> None:
    url = "http://127.0.0.1:9"
    assert OpenAICompatibleChatModel(url, "gpt-4o-2024-08-06").stable is True
    assert OpenAICompatibleChatModel(url, "gpt-4o-2024-08-06", temperature=0.2).stable is False
    assert OpenAICompatibleChatModel(url, "gpt-4o").stable is False
    assert OpenAICompatibleChatModel(url, "my-vllm-model", pinned=True).stable is True
    assert OpenAICompatibleChatModel(url, "gpt-4o-2024-08-06", pinned=False).stable is False


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": math.nan}, "timeout"),
        ({"prompt": None}, "prompt"),
        ({"system": 3}, "system"),
    ],
)
async def test_bad_call_arguments_name_the_field(
    fake: FakeOpenAIServer, kwargs: dict[str, object], field: str
) -> None:
    call: dict[str, object] = {"prompt": "p", "max_tokens": 5, "timeout": 5.0}
    call.update(kwargs)
    async with make(fake) as model:
        with pytest.raises(InvalidInput) as info:
            await model.complete(**call)  # type: ignore[arg-type]
    assert info.value.field == field
    assert fake.requests == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"model": ""}, "model"),
        ({"pinned": "yes"}, "pinned"),
        ({"max_tokens_field": "tokens"}, "max_tokens_field"),
        ({"base_url": "http://user:hunter22@llm.example"}, "base_url"),
        ({"base_url": "http://llm.example/?key=1"}, "base_url"),
        ({"base_url": "localhost:8000"}, "base_url"),
        ({"base_url": "http://:8000"}, "base_url"),
        ({"base_url": "http://llm.example:99999"}, "base_url"),
    ],
)
def test_bad_configuration_names_the_field(kwargs: dict[str, object], field: str) -> None:
    options: dict[str, object] = {"base_url": "http://127.0.0.1:9", "model": "m"}
    options.update(kwargs)
    with pytest.raises(InvalidInput) as info:
        OpenAICompatibleChatModel(**options)  # type: ignore[arg-type]
    assert info.value.field == field
    assert "hunter22" not in str(info.value)


async def test_closed_model_rejects_calls(fake: FakeOpenAIServer) -> None:
    model = make(fake)
    async with model:
        await model.complete("p", max_tokens=5, timeout=5)
    with pytest.raises(StoreClosed):
        await model.complete("p", max_tokens=5, timeout=5)
    assert len(fake.requests) == 1


def test_repr_shows_url_and_model_only() -> None:
    model = OpenAICompatibleChatModel("https://api.example.com/v1", "gpt-4o", api_key=KEY)
    assert (
        repr(model)
        == "OpenAICompatibleChatModel(base_url='https://api.example.com/v1', model='gpt-4o')"
    )

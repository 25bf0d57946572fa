"""Privacy hunt: what the docs promise never to record, checked with canary text.

Each test plants a distinctive canary (an API key, user text) and checks the
place the docs say it must never reach."""

from __future__ import annotations

import json
import logging
import uuid

import httpx
import pytest

from agent_memory.adapters.openai import (
    OpenAICompatibleChatModel,
    OpenAICompatibleEmbedder,
    ProviderError,
    RetryPolicy,
)

# -- docs/providers.md: "the API key ... replaced by *** in every message and log line"

_KEY = f"sk-live-Zyxwv-SECRET-{uuid.uuid4().hex}"
_FAST = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.002)


def _echoing(status: int, body: bytes, content_type: str) -> httpx.AsyncClient:
    """A real httpx client whose server answers `status` with `body` every time."""

    def answer(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": content_type})

    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


def _key_parts(text: str) -> list[str]:
    """Every run of 12+ characters of the key that `text` holds."""
    return [_KEY[i : i + 12] for i in range(len(_KEY) - 11) if _KEY[i : i + 12] in text]


@pytest.mark.parametrize(
    ("status", "body", "content_type"),
    [
        # the key echoed right where the server's message is cut (300 characters)
        (401, json.dumps({"error": {"message": "x" * 280 + _KEY}}).encode(), "application/json"),
        (401, json.dumps({"error": "y" * 285 + _KEY}).encode(), "application/json"),
        (400, json.dumps({"detail": "z" * 280 + _KEY}).encode(), "application/json"),
        (403, ("w" * 275 + _KEY).encode(), "text/plain"),
        # retried statuses: the retry's WARNING line holds the message too
        (503, json.dumps({"message": "v" * 280 + _KEY}).encode(), "application/json"),
    ],
)
async def test_a_cut_server_message_never_keeps_part_of_the_key(
    status: int, body: bytes, content_type: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = _echoing(status, body, content_type)
    embedder = OpenAICompatibleEmbedder(
        "http://127.0.0.1:9/v1", "e", 8, api_key=_KEY, retry=_FAST, http_client=client
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(ProviderError) as info:
        await embedder.embed(["hello"])
    await client.aclose()
    for where, text in (
        ("message", str(info.value)),
        ("repr", repr(info.value)),
        ("log", caplog.text),
    ):
        assert not _key_parts(text), f"part of the API key in the error's {where}: {text[-160:]}"


async def test_a_2xx_body_that_is_not_json_never_keeps_part_of_the_key() -> None:
    """The not-JSON 2xx path quotes the start of the body too."""
    client = _echoing(200, ("<html>" + "u" * 270 + _KEY).encode(), "text/html")
    model = OpenAICompatibleChatModel(
        "http://127.0.0.1:9/v1", "m", api_key=_KEY, retry=_FAST, http_client=client
    )
    with pytest.raises(ProviderError) as info:
        await model.complete("p", max_tokens=5, timeout=5)
    await client.aclose()
    assert not _key_parts(str(info.value)), str(info.value)[-160:]


# -- docs/configuration.md, docs/portability.md, docs/milvus.md: a storage URL is
# shown with its password as `***` (`<redacted>` in `doctor --config`); libpq
# takes `password` / `sslpassword` as URL parameters and Milvus its API key as
# `?token=`, so those are passwords too.

_SECRET = f"Zyxwv-SECRET-{uuid.uuid4().hex}"
_SECRET_URLS = [
    f"postgresql://app@db.internal:5432/memory?password={_SECRET}",
    f"postgresql:///memory?host=/run/pg&sslpassword={_SECRET}&sslmode=require",
    f"postgresql://app@db/memory?sslmode=disable&PASSWORD={_SECRET}#frag",
    f"milvus://milvus.internal:19530?db=prod&token={_SECRET}",
    f"postgresql://app:{_SECRET}@db/memory?password={_SECRET}",
]


@pytest.mark.parametrize("url", _SECRET_URLS, ids=[f"url{i}" for i in range(len(_SECRET_URLS))])
def test_a_password_in_a_url_parameter_is_redacted(url: str) -> None:
    from agent_memory.bootstrap.connect import redact

    shown = redact(url)
    assert _SECRET not in shown, shown
    assert "***" in shown
    assert shown.split("?")[0].split("@")[-1] == url.split("?")[0].split("@")[-1], "host kept"


@pytest.mark.parametrize("url", _SECRET_URLS, ids=[f"url{i}" for i in range(len(_SECRET_URLS))])
def test_doctor_config_never_shows_a_password_url_parameter(url: str) -> None:
    from agent_memory.bootstrap import Settings

    rows = Settings(url=url).explain(env={})
    assert _SECRET not in repr(rows)


async def test_an_unsupported_url_error_never_quotes_its_password_parameter() -> None:
    from agent_memory.bootstrap import connect
    from agent_memory.domain.errors import AgentMemoryError

    with pytest.raises(AgentMemoryError) as info:
        await connect(f"nosuchdb://app@db/memory?password={_SECRET}")
    assert _SECRET not in str(info.value), str(info.value)

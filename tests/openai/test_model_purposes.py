"""A chat model per purpose, chosen by environment variables alone, against a
real loopback OpenAI-compatible server: each service asks for its own model,
an unset purpose falls back (digest -> summarizer -> default)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from fake_openai_server import CHAT, FakeOpenAIServer

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.bootstrap import (
    Settings,
    agent_memory_service,
    compactor,
    connect,
    graph_memory,
    knowledge_service,
    reflection_job,
    user_memory_service,
)
from agent_memory.domain.records import Entity, Event
from agent_memory.domain.steps import Step


def _models(fake: FakeOpenAIServer) -> list[str]:
    return [r.body["model"] for r in fake.requests_to(CHAT)]


async def test_each_purpose_asks_for_its_own_model(fake: FakeOpenAIServer) -> None:
    env = {
        "AGENT_MEMORY_LLM_URL": fake.url + "/v1",
        "AGENT_MEMORY_LLM_MODEL": "default-model",
        "AGENT_MEMORY_SUMMARIZER_MODEL": "fast-model",
        "AGENT_MEMORY_KNOWLEDGE_MODEL": "knowledge-model",
        "AGENT_MEMORY_REFLECTION_MODEL": "reflection-model",
        "AGENT_MEMORY_USER_MEMORY_MODEL": "facts-model",
        "AGENT_MEMORY_API_KEY": "sk-test-0123456789",
    }
    settings = Settings.from_env(env)
    async with await connect(f"memory://purposes-{uuid.uuid4().hex}", settings=settings) as memory:
        assert memory.model("triples") is memory.llm, "unset: the default model"
        assert memory.model("digest") is memory.model("summarizer"), "digest -> summarizer"
        assert len({id(memory.model(p)) for p in ("summarizer", "knowledge", "reflection")}) == 3

        service = agent_memory_service(memory, digests=False)
        async with service.request(agent="a", domain="k8s", request_id="r1") as req:
            await req.record([Step(action="restart pod", response="done")])
        assert _models(fake) == ["fast-model"]

        fake.requests.clear()
        now = datetime.now(UTC)
        await memory.events.append(
            [
                Event(
                    id=f"old{i}",
                    domain="k8s",
                    agent="a",
                    action="restart",
                    outcome="success",
                    summary="restarted",
                    occurred_at=now - timedelta(days=9, minutes=i),
                    recorded_at=now - timedelta(days=9, minutes=i),
                    entities=(Entity("pod", "web-1"),),
                )
                for i in range(5)
            ]
        )
        await compactor(memory).digest("k8s")
        assert _models(fake) == ["fast-model"], "the digest uses the summarizer's model"

        fake.requests.clear()
        await knowledge_service(memory).extract(
            domain="k8s", request_id="r1", result="raised the memory limit", wait=True
        )
        assert _models(fake) == ["knowledge-model"]

        fake.requests.clear()
        await reflection_job(memory).run_once(["k8s"])
        assert _models(fake) == ["reflection-model"]

        fake.requests.clear()
        await user_memory_service(memory).extract(
            user_id="u1", namespace="travel", conversation="I am vegan.", wait=True
        )
        assert set(_models(fake)) == {"facts-model"}

        graph = graph_memory(memory, triples=None, clock=SystemClock())  # type: ignore[arg-type]
        assert graph._model is memory.llm  # the triple purpose: the default model


async def test_without_purpose_models_every_service_uses_the_default(
    fake: FakeOpenAIServer,
) -> None:
    settings = Settings.from_env(
        {"AGENT_MEMORY_LLM_URL": fake.url + "/v1", "AGENT_MEMORY_LLM_MODEL": "only-model"}
    )
    async with await connect(f"memory://purposes-{uuid.uuid4().hex}", settings=settings) as memory:
        assert memory.models == {}
        for purpose in ("summarizer", "digest", "knowledge", "reflection", "user_memory"):
            assert memory.model(purpose) is memory.llm
        service = agent_memory_service(memory, digests=False)
        async with service.request(agent="a", domain="k8s", request_id="r1") as req:
            await req.record([Step(action="restart pod")])
        assert _models(fake) == ["only-model"]

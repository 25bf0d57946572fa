"""Spans and metrics: inert by default, real when enabled (OpenTelemetry SDK with
an in-memory exporter, prometheus_client with a private registry)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import InMemoryEventLog, InMemoryLeaseStore
from agent_memory.domain.records import Entity, Event
from agent_memory.domain.steps import Step
from agent_memory.services.observability import EVENTS, METRICS, SPANS, Observability, hashed_id
from agent_memory.services.request import AgentMemory

from .scripted import ScriptedModel

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


async def run_request(obs: Observability) -> None:
    memory = AgentMemory(
        events=InMemoryEventLog(),
        leases=InMemoryLeaseStore(),
        clock=SystemClock(),
        observability=obs,
        backend="memory",
    )
    async with memory.request(
        agent="a",
        domain="k8s",
        request_id="r1",
        user_id="secret-user",
        entities=[Entity("pod", "p")],
    ) as req:
        await req.planning_context()
        await req.record([Step(action="look")])


async def test_default_is_inert() -> None:
    obs = Observability()
    await run_request(obs)
    assert obs.status == {"tracing": "disabled", "metrics": "disabled"}


async def test_enabled_spans_and_metrics() -> None:
    _EXPORTER.clear()
    registry = CollectorRegistry()
    obs = Observability(tracer=_PROVIDER.get_tracer("agent_memory"), registry=registry)
    await run_request(obs)
    names = [s.name for s in _EXPORTER.get_finished_spans()]
    assert names == [
        "pipeline.hook.before_planning.activity-announcement",
        "pipeline.hook.before_planning.memory-enrichment",
        "pipeline.hook.after_execution.memory-record",
    ]
    for span in _EXPORTER.get_finished_spans():
        assert len(span.attributes or {}) <= 16
        assert "secret-user" not in str(dict(span.attributes or {})), "no user ids in spans"
    misses = registry.get_sample_value(
        "agent_memory_retrievals_total", {"backend": "memory", "status": "miss"}
    )
    assert misses == 1.0
    count = registry.get_sample_value(
        "agent_memory_stage_seconds_count", {"stage": "memory-record"}
    )
    assert count == 1.0


async def test_enable_uses_installed_libraries() -> None:
    trace.set_tracer_provider(_PROVIDER)
    obs = Observability.enable(registry=CollectorRegistry())
    assert obs.status == {"tracing": "enabled", "metrics": "enabled"}


# -- the whole pipeline: names, attributes, events, metrics, and no user content ----

MARK = "zqx7marker"
USER = f"user-{MARK}"


def _span_text(span: Any) -> str:
    parts = [span.name, repr(dict(span.attributes or {}))]
    for event in span.events:
        parts.append(event.name)
        parts.append(repr(dict(event.attributes or {})))
    return "\n".join(parts)


def _events(spans: list[Any], name: str) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for s in spans for e in s.events if e.name == name]


def _metric_text(registry: CollectorRegistry) -> str:
    lines = []
    for metric in registry.collect():
        for sample in metric.samples:
            lines.append(f"{sample.name} {sample.labels!r}")
    return "\n".join(lines)


async def _pipeline(obs: Observability) -> None:
    from agent_memory.bootstrap import (
        Settings,
        agent_memory_service,
        connect,
        reflection_job,
        user_memory_service,
    )
    from agent_memory.services.reflection import REFLECTION_LOCK

    memory = await connect(
        f"memory://observability-{uuid.uuid4().hex}", settings=Settings(), observability=obs
    )
    async with memory:
        service = agent_memory_service(memory)
        pod = Entity("pod", "web-1")
        async with service.request(
            agent="a",
            domain="k8s",
            request_id="r1",
            user_id=USER,
            entities=[pod],
            doing=f"investigate {MARK}",
        ) as req:
            await req.planning_context()
            await req.record(
                [
                    Step(
                        action="look",
                        response=f"saw {MARK}",
                        metadata={"entity_type": "pod", "entity_id": "web-1"},
                    ),
                    Step(action="fix", outcome="failure", failure_cause=f"broke {MARK}"),
                ]
            )
        for request_id in ("r2", "r3"):  # a full digest, then the cached one
            async with service.request(
                agent="b", domain="k8s", request_id=request_id, user_id=USER
            ) as req:
                await req.planning_context()

        users = user_memory_service(memory)
        said = f"I am vegan. I prefer the {MARK} airport."
        await users.extract(user_id=USER, namespace="travel", conversation=said, wait=True)
        await users.extract(user_id=USER, namespace="travel", conversation=said, wait=True)
        stored = {r.content: r.id for r in await users.facts(user_id=USER)}
        assert len(stored) >= 2, stored
        first, second = sorted(stored)[:2]
        users.options = attrs.evolve(users.options, similarity_threshold=0.0)
        users.llm = ScriptedModel(
            [
                json.dumps(
                    {
                        "facts": [
                            {"content": f"{first} {MARK} now", "category": "preference"},
                            {"content": f"User no longer {MARK}", "category": "preference"},
                        ],
                        "summary": f"Planned a trip {MARK}",
                    }
                ),
                json.dumps(
                    [
                        {
                            "index": 0,
                            "operation": "UPDATE",
                            "target_id": stored[first],
                            "content": f"{first} {MARK} now",
                        },
                        {
                            "index": 1,
                            "operation": "CONTRADICT",
                            "target_id": stored[second],
                            "content": f"User no longer {MARK}",
                        },
                    ]
                ),
            ]
        )
        report = await users.extract(user_id=USER, namespace="travel", conversation=said, wait=True)
        assert report.ok, report.failures
        await users.profile(user_id=USER, namespace="travel", request=f"a trip {MARK}")

        old = datetime.now(UTC) - timedelta(days=9)
        await memory.events.append(
            [
                Event(
                    id=f"old-{i}",
                    domain="k8s",
                    agent="a",
                    action="restart",
                    outcome="success",
                    summary=f"restarted {MARK}",
                    occurred_at=old - timedelta(minutes=i),
                    recorded_at=old,
                    entities=(pod,),
                    user_id=USER,
                )
                for i in range(5)
            ]
        )
        job = reflection_job(memory, replica="replica-1")
        assert (await job.run_once(["k8s"])).fragments_stored == 1
        lease = await memory.leases.acquire(
            "deployment:default", REFLECTION_LOCK, "replica-2", timedelta(minutes=1)
        )
        assert lease is not None
        assert (await job.run_once(["k8s"])).lock_held_by == "replica-2"


async def test_pipeline_names_attributes_events_and_metrics() -> None:
    _EXPORTER.clear()
    registry = CollectorRegistry()
    obs = Observability(tracer=_PROVIDER.get_tracer("agent_memory"), registry=registry)
    await _pipeline(obs)
    spans = list(_EXPORTER.get_finished_spans())
    names = {s.name for s in spans}
    assert names == set(SPANS) - {"pipeline.hook.after_synthesis.knowledge-extraction"}
    assert {e.name for s in spans for e in s.events} == set(EVENTS), "the catalogue is true"

    decisions = _events(spans, "activity.compaction.cache_decision")
    assert [d["path"] for d in decisions] == ["full", "full", "cached"]
    assert decisions[2]["cache_hit"] is True
    assert decisions[2]["model_called"] is False
    assert {"coverage", "duration_ms", "events"} <= set(decisions[1])
    injected = _events(spans, "memory.enrichment.injected")[-1]
    assert injected["sections"] == "domain_digest,domain_events"
    assert injected["bytes"] > 0
    assert {"omitted", "shortened", "duplicates", "budget_bytes", "outcome"} <= set(injected)
    coordination = _events(spans, "activity.coordination.complete")
    assert coordination[0]["claims_active"] == 1
    (extraction,) = _events(spans, "memory.entity_extraction.completed")
    assert (extraction["events_with_entities"], extraction["source_metadata"]) == (1, 1)
    (record,) = [s for s in spans if s.name.endswith("memory-record")]
    assert record.attributes is not None
    assert record.attributes["events_recorded"] == 2

    ops = _events(spans, "user_memory.reconciliation.complete")
    assert (ops[-1]["operations_update"], ops[-1]["operations_contradict"]) == (1, 1)
    assert ops[1]["operations_duplicate"] >= 1
    complete = _events(spans, "user_memory.extraction.complete")
    assert complete[0]["candidates"] >= 2
    assert complete[0]["stored"] >= 2
    (profile,) = _events(spans, "user_memory.enrichment.injected")
    assert profile["facts_count"] >= 2
    assert profile["profile_chars"] > 0
    user_spans = [s for s in spans if "user-memory" in s.name]
    keys = {(s.attributes or {})["user_key"] for s in user_spans}
    assert keys == {hashed_id(USER)}, "one stable, hashed correlation key"

    passes = [s for s in spans if s.name == "reflection.pass"]
    assert [(s.attributes or {})["outcome"] for s in passes] == ["completed", "skipped"]
    assert (passes[0].attributes or {})["fragments_stored"] == 1

    sample = registry.get_sample_value
    assert sample("agent_memory_digest_decisions_total", {"path": "full"}) == 2.0
    assert sample("agent_memory_digest_decisions_total", {"path": "cached"}) == 1.0
    for operation in ("ADD", "UPDATE", "CONTRADICT", "DUPLICATE"):
        assert (
            sample("agent_memory_user_memory_operations_total", {"operation": operation}) or 0
        ) >= 1, operation
    assert sample("agent_memory_reflection_passes_total", {"outcome": "completed"}) == 1.0
    assert sample("agent_memory_reflection_passes_total", {"outcome": "skipped"}) == 1.0
    assert sample("agent_memory_reflection_fragments_total") == 1.0
    assert sample("agent_memory_retrieval_results_count", {"kind": "events"}) == 3.0
    assert sample("agent_memory_retrieval_results_count", {"kind": "knowledge"}) == 3.0
    assert sample("agent_memory_retrieval_results_count", {"kind": "user_facts"}) == 1.0
    assert {m.name for m in registry.collect()} == {name.removesuffix("_total") for name in METRICS}


async def test_no_user_content_or_user_id_in_any_span_event_or_label() -> None:
    _EXPORTER.clear()
    registry = CollectorRegistry()
    obs = Observability(tracer=_PROVIDER.get_tracer("agent_memory"), registry=registry)
    await _pipeline(obs)
    spans = list(_EXPORTER.get_finished_spans())
    assert len(spans) >= 10
    for span in spans:
        text = _span_text(span)
        assert MARK not in text, f"user content or id in {span.name}: {text}"
        assert "user_id" not in text
        assert len(span.attributes or {}) <= 16
        for event in span.events:
            assert len(event.attributes or {}) <= 16
    metrics = _metric_text(registry)
    assert MARK not in metrics
    assert "user" not in "".join(
        key for metric in registry.collect() for s in metric.samples for key in s.labels
    ), "no user labels"


async def test_user_memory_model_requests_summaries_and_batch_outcomes() -> None:
    """Each extraction model request, the session summary it returns and whether
    it was stored are span events; batched reconciliation outcomes are a metric
    (the fallback rate shows a model regression), with no user label."""
    from agent_memory.adapters.memory import HashingEmbedder, InMemoryMemoryStore
    from agent_memory.services.user_memory import UserMemory, UserMemoryOptions

    _EXPORTER.clear()
    registry = CollectorRegistry()
    obs = Observability(tracer=_PROVIDER.get_tracer("agent_memory"), registry=registry)
    embedder = HashingEmbedder(64)

    def facts(content: str, summary: str | None = None) -> str:
        return json.dumps(
            {"facts": [{"content": content, "category": "preference"}], "summary": summary}
        )

    model = ScriptedModel(
        [
            facts(f"I like window seats {MARK}", summary=f"Talked about seats {MARK}"),
            facts(f"I like window seats {MARK} a lot"),
            "no JSON here",  # the batch is unusable: per-candidate fallback
            json.dumps([{"index": 0, "operation": "ADD"}]),
            facts(f"I like window seats {MARK} very much"),
            json.dumps([{"index": 0, "operation": "ADD"}]),  # the batch classifies it
            ConnectionError("model endpoint down"),
        ]
    )
    users = UserMemory(
        store=InMemoryMemoryStore(embedder.space),
        embedder=embedder,
        clock=SystemClock(),
        llm=model,
        options=UserMemoryOptions(similarity_threshold=0.0),
        observability=obs,
    )
    for _ in range(4):
        await users.extract(user_id=USER, namespace="travel", conversation="x", wait=True)
    assert model.answers == []
    spans = [s for s in _EXPORTER.get_finished_spans() if s.name.endswith("user-memory-extraction")]
    assert len(spans) == 4
    requests = [_events([s], "user_memory.extraction.llm_request") for s in spans]
    assert [[r["outcome"] for r in rs] for rs in requests] == [["ok"], ["ok"], ["ok"], ["error"]]
    assert [rs[0]["candidates"] for rs in requests] == [1, 1, 1, 0]
    assert all(rs[0]["duration_ms"] >= 0 for rs in requests)
    summaries = [_events([s], "user_memory.summary.llm_request") for s in spans]
    assert [[r["summary_returned"] for r in rs] for rs in summaries] == [
        [True],
        [False],
        [False],
        [False],
    ]
    assert all(r["same_request"] is True for rs in summaries for r in rs)
    stored = [_events([s], "user_memory.summary.stored") for s in spans]
    assert stored == [[{"summaries": 1}], [], [], []]
    sample = registry.get_sample_value
    batches = "agent_memory_user_memory_reconciliation_batches_total"
    assert sample(batches, {"outcome": "fallback"}) == 1.0
    assert sample(batches, {"outcome": "success"}) == 1.0
    assert sample("agent_memory_user_memory_summaries_total") == 1.0
    assert users.counters["batch.fallback"] == users.counters["batch.success"] == 1
    for span in spans:
        assert MARK not in _span_text(span)
    assert MARK not in _metric_text(registry)


def test_observability_doc_lists_every_span_event_and_metric() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text()
    for name in (*SPANS, *EVENTS, *METRICS):
        assert f"`{name}`" in doc, name

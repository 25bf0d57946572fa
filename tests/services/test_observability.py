"""Spans and metrics: inert by default, real when enabled (OpenTelemetry SDK with
an in-memory exporter, prometheus_client with a private registry)."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import InMemoryEventLog, InMemoryLeaseStore
from agent_memory.domain.records import Entity
from agent_memory.domain.steps import Step
from agent_memory.services.observability import Observability
from agent_memory.services.request import AgentMemory

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

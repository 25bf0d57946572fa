"""Optional OpenTelemetry spans and Prometheus metrics — inert unless installed
and enabled; nothing is sent anywhere by default.

Span names follow `pipeline.hook.<hook>.<stage>` (e.g.
`pipeline.hook.before_planning.activity-announcement`); the reflection job has
`reflection.pass`. Spans carry events (e.g. `activity.compaction.cache_decision`)
with counts and classifications. Attributes are bounded (at most 16 per span or
event, strings cut to 128 characters) and never carry user content or user ids:
where a correlation key is needed, `hashed_id` gives a one-way key. Metrics have
no per-user labels. docs/observability.md lists every span, event and metric;
`SPANS`, `EVENTS` and `METRICS` below are the same catalogue in code.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

__all__ = [
    "EVENTS",
    "METRICS",
    "SPANS",
    "Observability",
    "SpanHandle",
    "entity_counts",
    "hashed_id",
    "view_attributes",
]

_MAX_ATTRS = 16
_MAX_LEN = 128

#: Span names.
SPANS: Final[tuple[str, ...]] = (
    "pipeline.hook.before_planning.activity-announcement",
    "pipeline.hook.before_planning.memory-enrichment",
    "pipeline.hook.after_execution.memory-record",
    "pipeline.hook.after_synthesis.knowledge-extraction",
    "pipeline.hook.before_planning.user-memory-enrichment",
    "pipeline.hook.after_synthesis.user-memory-extraction",
    "reflection.pass",
)
#: Span event names.
EVENTS: Final[tuple[str, ...]] = (
    "activity.coordination.complete",
    "activity.compaction.cache_decision",
    "memory.enrichment.injected",
    "memory.entity_extraction.completed",
    "user_memory.recall.identity",
    "user_memory.enrichment.injected",
    "user_memory.extraction.llm_request",
    "user_memory.extraction.complete",
    "user_memory.summary.llm_request",
    "user_memory.summary.stored",
    "user_memory.reconciliation.complete",
)
#: Prometheus metric names (as exposed; counters also get `_total`).
METRICS: Final[tuple[str, ...]] = (
    "agent_memory_retrievals_total",
    "agent_memory_retrieval_results",
    "agent_memory_stage_seconds",
    "agent_memory_digest_decisions_total",
    "agent_memory_user_memory_operations_total",
    "agent_memory_user_memory_reconciliation_batches_total",
    "agent_memory_user_memory_summaries_total",
    "agent_memory_reflection_passes_total",
    "agent_memory_reflection_fragments_total",
    "agent_memory_conversation_stores_total",
    "agent_memory_conversation_omitted_total",
)


def hashed_id(value: str) -> str:
    """A one-way correlation key for an id (a user id, say): the first 16 hex
    digits of its SHA-256. The same id always gives the same key."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _bounded(attrs: dict[str, Any], room: int = _MAX_ATTRS) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in list(attrs.items())[: max(room, 0)]:
        if isinstance(value, bool | int | float):
            out[key] = value
        else:
            out[key] = str(value)[:_MAX_LEN]
    return out


class SpanHandle:
    """What `Observability.span` yields: add attributes and events to the span
    (no-ops when tracing is off)."""

    def __init__(self, span: Any = None, used: int = 0) -> None:
        self._span = span
        self._used = used

    @property
    def recording(self) -> bool:
        return self._span is not None

    def set(self, **attrs: Any) -> None:
        """Add attributes (bounded: the span keeps at most 16)."""
        if self._span is None:
            return
        bounded = _bounded(attrs, _MAX_ATTRS - self._used)
        self._used += len(bounded)
        if bounded:
            self._span.set_attributes(bounded)

    def event(self, name: str, **attrs: Any) -> None:
        """Add a span event with bounded attributes."""
        if self._span is not None:
            self._span.add_event(name, attributes=_bounded(attrs))


_INERT = SpanHandle()


class Observability:
    """Tracing + metrics facade; the default instance does nothing."""

    def __init__(self, tracer: Any = None, registry: Any = None) -> None:
        self._tracer = tracer
        self._retrievals: Any = None
        self._results: Any = None
        self._latency: Any = None
        self._digests: Any = None
        self._user_ops: Any = None
        self._user_batches: Any = None
        self._user_summaries: Any = None
        self._passes: Any = None
        self._fragments: Any = None
        self._conv_stores: Any = None
        self._conv_omitted: Any = None
        self.status: dict[str, str] = {
            "tracing": "disabled" if tracer is None else "enabled",
            "metrics": "disabled",
        }
        if registry is not None:
            self._init_metrics(registry)

    @classmethod
    def enable(
        cls, *, tracing: bool = True, metrics: bool = True, registry: Any = None
    ) -> Observability:
        """Use OpenTelemetry / prometheus_client when installed; stay inert otherwise
        (and say so in `status`)."""
        tracer = None
        status = {"tracing": "disabled", "metrics": "disabled"}
        if tracing:
            try:
                from opentelemetry import trace

                tracer = trace.get_tracer("agent_memory")
                status["tracing"] = "enabled"
            except ImportError:
                status["tracing"] = "opentelemetry-api not installed"
        obs = cls(tracer=tracer)
        if metrics:
            try:
                import prometheus_client

                obs._init_metrics(registry if registry is not None else prometheus_client.REGISTRY)
                status["metrics"] = "enabled"
            except ImportError:
                status["metrics"] = "prometheus-client not installed"
        obs.status = status
        return obs

    def _init_metrics(self, registry: Any) -> None:
        from prometheus_client import Counter, Histogram

        self._retrievals = Counter(
            "agent_memory_retrievals_total",
            "Memory retrievals by backend and status (hit, miss, error)",
            ["backend", "status"],
            registry=registry,
        )
        self._results = Histogram(
            "agent_memory_retrieval_results",
            "Items a retrieval returned, by kind (events, knowledge, user_facts)",
            ["kind"],
            buckets=(0, 1, 2, 5, 10, 20, 50, 100, 200),
            registry=registry,
        )
        self._latency = Histogram(
            "agent_memory_stage_seconds",
            "Latency of memory pipeline stages",
            ["stage"],
            registry=registry,
        )
        self._digests = Counter(
            "agent_memory_digest_decisions_total",
            "Digest cache decisions by path (full, cached, incremental, full_recompact, "
            "raw_fallback)",
            ["path"],
            registry=registry,
        )
        self._user_ops = Counter(
            "agent_memory_user_memory_operations_total",
            "User-fact reconciliation operations (ADD, UPDATE, CONTRADICT, DUPLICATE)",
            ["operation"],
            registry=registry,
        )
        self._user_batches = Counter(
            "agent_memory_user_memory_reconciliation_batches_total",
            "Batched user-fact reconciliations by outcome (success: one model call "
            "classified every candidate; fallback: it did not, per-candidate calls followed)",
            ["outcome"],
            registry=registry,
        )
        self._user_summaries = Counter(
            "agent_memory_user_memory_summaries_total",
            "Session summaries stored by user-memory extraction",
            registry=registry,
        )
        self._passes = Counter(
            "agent_memory_reflection_passes_total",
            "Reflection passes by outcome (completed, failed, skipped)",
            ["outcome"],
            registry=registry,
        )
        self._fragments = Counter(
            "agent_memory_reflection_fragments_total",
            "Knowledge fragments stored by reflection passes",
            registry=registry,
        )
        self._conv_stores = Counter(
            "agent_memory_conversation_stores_total",
            "Conversation exchanges after the model by backend and outcome (stored, "
            "trivial, duplicate, error)",
            ["backend", "outcome"],
            registry=registry,
        )
        self._conv_omitted = Counter(
            "agent_memory_conversation_omitted_total",
            "Relevant conversation memories left out of the injected block by its budget",
            ["backend"],
            registry=registry,
        )
        self.status = {**self.status, "metrics": "enabled"}

    @contextmanager
    def span(self, name: str, **attrs: Any) -> Iterator[SpanHandle]:
        """A span (when tracing) and a latency observation (when metrics); the
        handle adds attributes and events."""
        started = time.perf_counter()
        try:
            if self._tracer is None:
                yield _INERT
            else:
                first = _bounded(attrs)
                with self._tracer.start_as_current_span(name, attributes=first) as span:
                    yield SpanHandle(span, len(first))
        finally:
            if self._latency is not None:
                self._latency.labels(stage=name.rsplit(".", 1)[-1]).observe(
                    time.perf_counter() - started
                )

    def event(self, name: str, **attrs: Any) -> None:
        """Add an event to the current span, if one is recording (tracing on)."""
        if self._tracer is None:
            return
        from opentelemetry import trace

        span = trace.get_current_span()
        if span.is_recording():
            span.add_event(name, attributes=_bounded(attrs))

    def retrieval(self, backend: str, status: str) -> None:
        """Count one retrieval: status is hit, miss or error."""
        if self._retrievals is not None:
            self._retrievals.labels(backend=backend, status=status).inc()

    def results(self, kind: str, count: int) -> None:
        """Observe how many items one retrieval returned (events, knowledge, user_facts)."""
        if self._results is not None:
            self._results.labels(kind=kind).observe(count)

    def conversation_store(self, backend: str, outcome: str) -> None:
        """Count one exchange `after_model` handled: stored, trivial, duplicate or error."""
        if self._conv_stores is not None:
            self._conv_stores.labels(backend=backend, outcome=outcome).inc()

    def conversation_omitted(self, backend: str, count: int) -> None:
        """Count relevant memories a retrieval found but left out for the budget."""
        if self._conv_omitted is not None and count:
            self._conv_omitted.labels(backend=backend).inc(count)

    def digest_decision(self, path: str) -> None:
        """Count one digest cache decision by its path."""
        if self._digests is not None:
            self._digests.labels(path=path).inc()

    def user_memory_operations(self, operations: dict[str, int]) -> None:
        """Count reconciliation operations: {"ADD": 2, "DUPLICATE": 1, ...}."""
        if self._user_ops is not None:
            for operation, n in operations.items():
                if n:
                    self._user_ops.labels(operation=operation).inc(n)

    def user_memory_batch(self, outcome: str) -> None:
        """Count one batched reconciliation: success or fallback."""
        if self._user_batches is not None:
            self._user_batches.labels(outcome=outcome).inc()

    def user_memory_summaries(self, count: int) -> None:
        """Count session summaries stored."""
        if self._user_summaries is not None and count:
            self._user_summaries.inc(count)

    def reflection_pass(self, outcome: str, fragments: int = 0) -> None:
        """Count one reflection pass (completed, failed, skipped) and its fragments."""
        if self._passes is not None:
            self._passes.labels(outcome=outcome).inc()
        if self._fragments is not None and fragments:
            self._fragments.inc(fragments)


def view_attributes(report: Any) -> dict[str, Any]:
    """Bounded span attributes of a rendered view's `ViewReport`: its sections
    with text, bytes used of the budget, outcome, and the admitted / omitted /
    shortened / duplicate record counts summed over its sections (counts only)."""
    sections = [s for s in report.sections if s.admitted]
    return {
        "view": report.view,
        "sections": ",".join(s.name for s in sections),
        "bytes": report.bytes_used,
        "budget_bytes": report.budget_bytes,
        "outcome": str(report.outcome),
        "admitted": sum(s.admitted for s in report.sections),
        "omitted": sum(s.omitted for s in report.sections),
        "shortened": sum(s.shortened for s in report.sections),
        "duplicates": sum(s.duplicates for s in report.sections),
        "entities_omitted": sum(s.entities_omitted for s in report.sections),
    }


def entity_counts(details: Any) -> dict[str, Any]:
    """Bounded attributes of a recording's entity extraction (from the recorder
    report's details): events by entity source and the model batch's accepted /
    rejected entity counts (`batch=unobserved` with a custom summarizer)."""
    sources = details.get("entity_sources", {}) if isinstance(details, dict) else {}
    out: dict[str, Any] = {
        "events_with_entities": sum(n for k, n in sources.items() if k != "none"),
        "events_without_entities": int(sources.get("none", 0)),
    }
    for source in ("model", "metadata", "request", "mixed"):
        if sources.get(source):
            out[f"source_{source}"] = sources[source]
    coverage = details.get("summary_coverage", {}) if isinstance(details, dict) else {}
    batch = coverage.get("batch") if isinstance(coverage, dict) else None
    if isinstance(batch, dict):
        fields = batch.get("entity_fields", {})
        out["accepted_entities"] = int(fields.get("accepted_entities", 0))
        out["rejected_entities"] = int(fields.get("rejected_entities", 0))
    elif batch is not None:
        out["batch"] = str(batch)
    return out

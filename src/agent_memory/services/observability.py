"""Optional OpenTelemetry spans and Prometheus metrics — inert unless installed
and enabled; nothing is sent anywhere by default.

Span names follow `pipeline.hook.<hook>.<stage>` (e.g.
`pipeline.hook.before_planning.activity-announcement`). Attributes are bounded
(at most 16, strings cut to 128 characters) and never carry user ids. Metrics:
`agent_memory_retrievals_total{backend,status}` with status hit|miss|error and
`agent_memory_stage_seconds{stage}`; no per-user labels.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Observability"]

_MAX_ATTRS = 16
_MAX_LEN = 128


def _bounded(attrs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in list(attrs.items())[:_MAX_ATTRS]:
        if isinstance(value, bool | int | float):
            out[key] = value
        else:
            out[key] = str(value)[:_MAX_LEN]
    return out


class Observability:
    """Tracing + metrics facade; the default instance does nothing."""

    def __init__(self, tracer: Any = None, registry: Any = None) -> None:
        self._tracer = tracer
        self._retrievals: Any = None
        self._latency: Any = None
        self.status: dict[str, str] = {"tracing": "disabled", "metrics": "disabled"}
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
        self._latency = Histogram(
            "agent_memory_stage_seconds",
            "Latency of memory pipeline stages",
            ["stage"],
            registry=registry,
        )
        self.status = {**self.status, "metrics": "enabled"}

    @contextmanager
    def span(self, name: str, **attrs: Any) -> Iterator[None]:
        """A span (when tracing) and a latency observation (when metrics)."""
        started = time.perf_counter()
        try:
            if self._tracer is None:
                yield
            else:
                with self._tracer.start_as_current_span(name, attributes=_bounded(attrs)):
                    yield
        finally:
            if self._latency is not None:
                self._latency.labels(stage=name.rsplit(".", 1)[-1]).observe(
                    time.perf_counter() - started
                )

    def retrieval(self, backend: str, status: str) -> None:
        """Count one retrieval: status is hit, miss or error."""
        if self._retrievals is not None:
            self._retrievals.labels(backend=backend, status=status).inc()

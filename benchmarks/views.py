"""Rendering `<agent_memory>` vs `json.dumps` of the same events.

For a 200-event and a 10,000-event window (newest first, realistic field
sizes), time `render_agent_memory` into the default 8,000-byte view against
the baseline a naive caller would write: build one dict per event and
`json.dumps` the list (also printed: against `json.dumps` of dicts built
beforehand, the strictest comparison). Prints both ratios (target: at most 3x); both sides are
measured in the same run, best of several repeats.

    .venv/bin/python benchmarks/views.py
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agent_memory.domain.records import Entity, Event
from agent_memory.domain.views import render_agent_memory

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
ACTIONS = ("deploy", "restart", "diagnose", "refund", "scale")


def make_events(n: int) -> list[Event]:
    return [
        Event(
            id=f"evt-{i:06d}",
            domain="payments",
            agent=f"agent-{i % 7}",
            action=ACTIONS[i % len(ACTIONS)],
            outcome="ok" if i % 9 else "failed",
            summary=f"Handled request {i}: restarted web-{i % 5} after OOM kills; error rate back "
            f"to normal <{i}> & customer notified.",
            occurred_at=NOW - timedelta(seconds=30 * i),
            recorded_at=NOW - timedelta(seconds=30 * i),
            origin_request_id=f"req-{i // 3}" if i % 4 else None,
            entities=(Entity("pod", f"web-{i % 5}"),),
        )
        for i in range(n)
    ]


def as_dicts(events: list[Event]) -> list[dict[str, Any]]:
    return [
        {
            "event_id": e.id,
            "origin_request_id": e.origin_request_id,
            "timestamp": e.occurred_at.isoformat(),
            "agent": e.agent,
            "action": e.action,
            "outcome": e.outcome,
            "summary": e.summary,
            "entities": [[x.type, x.id] for x in e.entities],
        }
        for e in events
    ]


def baseline(events: list[Event]) -> str:
    return json.dumps(as_dicts(events))


def view(events: list[Event]) -> str:
    return render_agent_memory(domain="payments", as_of=NOW, events=events).text


def best_of(fn: Callable[[], Any], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    for n, repeats in ((200, 50), (10_000, 7)):
        events = make_events(n)
        base = best_of(lambda ev=events: baseline(ev), repeats)
        ours = best_of(lambda ev=events: view(ev), repeats)
        dicts = as_dicts(events)
        dumps_only = best_of(lambda d=dicts: json.dumps(d), repeats)
        rendered = render_agent_memory(domain="payments", as_of=NOW, events=events)
        shown = rendered.report.section("domain_events").admitted
        print(
            f"{n:>6} events: json.dumps {base * 1e3:8.3f} ms | view {ours * 1e3:8.3f} ms "
            f"| ratio {ours / base:5.2f}x | {shown} shown in {rendered.report.bytes_used} bytes "
            f"({rendered.report.event_format}); vs json.dumps of prebuilt dicts "
            f"{dumps_only * 1e3:.3f} ms: {ours / dumps_only:5.2f}x"
        )


if __name__ == "__main__":
    main()

"""Rendering `<agent_memory>` vs the direct code for the same shown events.

For a 200-event and a 10,000-event domain window (newest first, summaries of
varying length, `<`/`&` in them), both sides produce the same event lines
within the default 8,000-byte budget (`tests/views/test_views_benchmark.py`
checks that they show the same events, byte for byte). Two datasets:

- `pod` (lines `views_<n>_...`): each event about its own pod, so no entity
  list repeats and neither side writes a shared one;
- `shared` (lines `views_shared_<n>_...`): events share entities (one of 4 pods
  and the same service), so the view writes the most common entity list once
  (`shared_entities:`) and an event carrying it reads `"shared"`; the baseline
  finds that list the way the view does (the most common non-empty list among
  the first 64 events, when it repeats; ties: first seen) and writes
  `"shared"` for it too.

The sides:

- ours: `render_agent_memory(domain=..., as_of=..., events=window)`: validates
  the events it reads, picks the event format, encodes every text safely,
  fits the lines into the budget (reads stop 8 events after the first one
  that does not fit) and writes the whole view: scope, legend, section header
  with its counts, and a report.
- baseline (`budgeted_json`): what a careful caller would write for the same
  lines: newest first, one `json.dumps` per event of the same tuple
  (`ensure_ascii=False`, compact separators), `<`, `>`, `&` escaped with
  `str.replace`, each line kept while it fits the room the view had for event
  lines (computed beforehand) and, like the view, trying 8 more events after
  the first one that does not fit, then stopping. It writes no header, no
  scope, no report, and does no validation, format choice or lookalike/NFKC
  escaping (none occur in these texts).
- `shown_json` (stricter, printed too): `json.dumps` of exactly the events
  the view shows, chosen beforehand: no budgeting at all.

Also compares the view on 10,000 events with the view on 200 (the cost must
follow what is shown, not the window size).

    .venv/bin/python benchmarks/views.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from itertools import islice

from _harness import compare

from agent_memory.domain.records import Entity, Event
from agent_memory.domain.views import render_agent_memory

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
BUDGET = 8000
LOOKAHEAD = 8  # the view's LOOKAHEAD_EVENTS
ESTIMATE = 64  # the view's _ESTIMATE_EVENTS: the shared entity list looks this far
ACTIONS = ("deploy", "restart", "diagnose", "refund", "scale")
_DUMPS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def make_events(n: int, *, shared: bool = False) -> list[Event]:
    """A window, newest first; each event about its own pod (no repeated entity
    list, so neither side writes a shared one), or with `shared`, about one of 4
    pods and the same service (entity lists repeat: a shared one is written)."""
    return [
        Event(
            id=f"evt-{i:06d}",
            domain="payments",
            agent=f"agent-{i % 7}",
            action=ACTIONS[i % len(ACTIONS)],
            outcome="ok" if i % 9 else "failed",
            summary=f"Handled request {i}: restarted web-{i} after OOM kills <{i}> & "
            + "error rate back to normal; customer notified. " * (1 + i % 3),
            occurred_at=NOW - timedelta(seconds=30 * i),
            recorded_at=NOW - timedelta(seconds=30 * i),
            origin_request_id=f"req-{i // 3}" if i % 4 else None,
            entities=(
                (Entity("pod", f"web-{i % 4}"), Entity("service", "payments-api"))
                if shared
                else (Entity("pod", f"web-{i}"),)
            ),
        )
        for i in range(n)
    ]


def view(events: Sequence[Event]) -> str:
    return render_agent_memory(
        domain="payments", as_of=NOW, events=events, budget_bytes=BUDGET
    ).text


def event_room(events: Sequence[Event]) -> int:
    """The bytes the view has for event lines: the budget less its frame (the
    section header reserved at the width of the window's size)."""
    rendered = render_agent_memory(domain="payments", as_of=NOW, events=events, budget_bytes=BUDGET)
    lines = rendered.text.split("\n")
    width = len(str(len(events)))
    frame = 0
    for line in lines:
        if line.startswith("["):
            continue
        if line.startswith("## domain_events:"):
            line = "## domain_events: " + " ".join(
                f"{k}={'9' * width}"
                for k in ("admitted", "omitted", "shortened", "duplicates", "entities_omitted")
            )
        frame += len(line.encode()) + 1
    return BUDGET - (frame - 1)


def shared_list(events: Sequence[Event]) -> tuple[Entity, ...] | None:
    """The entity list the view writes once: the most common non-empty one among
    the first `ESTIMATE` events, when it repeats (ties: first seen)."""
    counts = Counter(e.entities for e in islice(events, ESTIMATE) if e.entities)
    if not counts:
        return None
    best, n = counts.most_common(1)[0]
    return best if n >= 2 else None


def _line(e: Event, shared: tuple[Entity, ...] | None = None) -> str:
    entities: object = (
        "shared"
        if shared is not None and e.entities == shared
        else [[x.type, x.id] for x in e.entities]
    )
    line = _DUMPS(
        [
            e.id,
            e.origin_request_id or "unknown",
            e.occurred_at.isoformat()[:-6] + "Z",
            e.agent,
            e.action,
            e.outcome,
            e.summary,
            "",
            entities,
        ]
    )
    return line.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def budgeted_json(events: Sequence[Event], room: int) -> str:
    out: list[str] = []
    stop = len(events)
    shared = shared_list(events)
    for i, e in enumerate(events):
        if i >= stop:
            break
        line = _line(e, shared)
        cost = len(line.encode()) + 1
        if cost > room:
            stop = min(stop, i + 1 + LOOKAHEAD)
            continue
        room -= cost
        out.append(line)
    return "\n".join(out)


def shown_json(shown: Sequence[Event], shared: tuple[Entity, ...] | None = None) -> str:
    """The lines of exactly the events shown (`shared`: the list written once)."""
    return "\n".join(_line(e, shared) for e in shown)


def shown_events(events: Sequence[Event]) -> list[Event]:
    text = view(events)
    return [e for e in events if f'["{e.id}",' in text]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    rounds = parser.parse_args().rounds
    windows = {n: make_events(n) for n in (200, 10_000)}
    datasets = [("", n, events) for n, events in windows.items()]
    datasets += [("shared_", n, make_events(n, shared=True)) for n in (200, 10_000)]
    for label, n, events in datasets:
        room = event_room(events)
        shown = shown_events(events)
        shared = shared_list(events)
        # context, not a result: stdout carries only the harness lines
        print(f"{label}{n} events: {len(shown)} shown in {BUDGET} bytes", file=sys.stderr)
        ours: Callable[[], object] = lambda ev=events: view(ev)  # noqa: E731
        print(
            compare(
                f"views_{label}{n}_vs_budgeted_json",
                ours,
                lambda ev=events, r=room: budgeted_json(ev, r),
                rounds=rounds,
                target=3,
            ).line()
        )
        print(
            compare(
                f"views_{label}{n}_vs_shown_json",
                ours,
                lambda s=shown, sh=shared: shown_json(s, sh),
                rounds=rounds,
                target=3,
            ).line()
        )
    small, large = windows[200], windows[10_000]
    print(
        compare(
            "views_10000_vs_views_200",
            lambda: view(large),
            lambda: view(small),
            rounds=rounds,
            target=1.5,
        ).line()
    )


if __name__ == "__main__":
    main()

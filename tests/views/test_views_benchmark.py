"""Both sides of benchmarks/views.py return the same data: the same event
lines, byte for byte, for the windows the benchmark times."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _bench() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))  # for its `_harness` import
    try:
        spec = importlib.util.spec_from_file_location("bench_views", BENCHMARKS / "views.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("n", [200, 10_000])
def test_the_baselines_show_exactly_the_views_event_lines(n: int) -> None:
    bench = _bench()
    events = bench.make_events(n)
    text = bench.view(events)
    shown = [line for line in text.split("\n") if line.startswith("[")]
    assert len(shown) > 20  # the budget, not the window, bounds what is shown
    assert bench.budgeted_json(events, bench.event_room(events)).split("\n") == shown
    assert bench.shown_json(bench.shown_events(events)).split("\n") == shown
    assert "shared_entities" not in text  # neither side writes a shared list


@pytest.mark.parametrize("n", [200, 10_000])
def test_the_baselines_show_the_views_lines_when_events_share_entities(n: int) -> None:
    bench = _bench()
    events = bench.make_events(n, shared=True)
    text = bench.view(events)
    shown = [line for line in text.split("\n") if line.startswith("[")]
    assert len(shown) > 20
    assert "shared_entities: " in text  # the view writes the repeated list once
    assert sum(line.endswith(',"shared"]') for line in shown) > 5
    shared = bench.shared_list(events)
    assert bench.budgeted_json(events, bench.event_room(events)).split("\n") == shown
    assert bench.shown_json(bench.shown_events(events), shared).split("\n") == shown

"""A few seconds of benchmarks/server_load.py on SQLite and on Redis (counts
only: 0 errors, 0 isolation breaks) and a short kill run on PostgreSQL; never a
timing. The 60-second runs and their tables live in docs/server.md."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from server.live import LiveServer, unique

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "server_load.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("server_load", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def redis_live(redis_url: str) -> Iterator[LiveServer]:
    keys = {"a": {"tenant": unique("smoke-a-")}, "b": {"tenant": unique("smoke-b-")}}
    live = LiveServer(redis_url, keys, extra_args=("--rate", "100000", "--burst", "100000"))
    live.start()
    try:
        yield live
    finally:
        live.close()


def _tokens(live: LiveServer, names: tuple[str, str]) -> dict[str, str]:
    return {name: live.key[name] for name in names}


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_short_load_has_no_errors_and_no_isolation_breaks(
    backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        live: LiveServer = request.getfixturevalue("live")
        tokens = _tokens(live, ("acme", "globex"))
    else:
        live = request.getfixturevalue("redis_live")
        tokens = _tokens(live, ("a", "b"))
    result = await _bench().run_load(live.base, tokens, clients=20, duration=3.0)
    assert result["errors"] == 0, result["error_kinds"]
    assert result["isolation_breaks"] == 0
    assert set(result["ops"]) >= {"recall", "record", "search"}, result["ops"]


def test_backend_killed_mid_load_gives_503_problems_and_loses_no_acknowledged_write() -> None:
    """PostgreSQL SIGKILLed under 10 clients and restarted: the calls meanwhile
    are 503 backend-unavailable problems (none other, none hanging past the
    client timeout), the service recovers, every acknowledged write is readable.
    The backend stays dead 3 s: a call waits up to the URL's connect_timeout
    (1 s here; 5 s by default) for a connection, so a shorter outage is ridden
    out (the calls succeed after the restart) and may show no 503 at all."""
    bench = _bench()
    k = bench.kill_run(clients=10, duration=3.0, kill_at=1.0, gap=3.0, connect_timeout=1)
    assert bench.kill_ok(k), json.dumps(k, indent=1)

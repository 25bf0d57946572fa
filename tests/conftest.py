"""Test-session setup: hypothesis profiles and the real-server fixtures.

Servers start once per session (see tests/servers/), from the project's own
dependencies, or come from `REDIS_URL`, `DATABASE_URL`, `NATS_URL`, `QDRANT_URL`.
A backend that cannot start is an error, never a skip — locally and in CI.
"""

from __future__ import annotations

import os
from pathlib import Path

# gRPC (qdrant-client, pymilvus) restarts its poller in a forked child when its
# fork support is on; a child that closes its file descriptors before exec (the
# embedded PostgreSQL's pg_ctl, started with a preexec_fn) then crashes in
# about 1 of 30 forks while a channel is open (grpc/grpc#43055). Nothing here
# uses gRPC across a fork, so the session turns that support off before any
# import of grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import pytest
from hypothesis import HealthCheck, settings

import background

pytest_plugins = [
    "servers.redis_server",
    "servers.redis_cluster_server",  # started only by a test that asks for it
    "servers.postgres_server",
    "servers.nats_server",
]

settings.register_profile(
    "dev",
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# The LangGraph differential suite at depth (not CI): >= 500 examples per backend,
# tests/integrations/test_langgraph_differential.py; see docs/integrations.md.
settings.register_profile("langgraph-deep", settings.get_profile("ci"), max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


TESTS = Path(__file__).resolve().parent

# The suite embeds with the hashing embedder: MiniLM, the default embedder when its
# wheel is installed, costs milliseconds a text. The variable reaches the CLI and
# server processes tests start with this environment; `minilm_installed` below
# covers `Settings()` built in code. Tests of the default choice undo both
# (marker `default_embedder`, tests/retrieval/test_default_embedder.py).
os.environ.setdefault("AGENT_MEMORY_EMBEDDER", "hashing")


@pytest.fixture(autouse=True)
def _hashing_embedder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("default_embedder") is None:
        import importlib

        connect_module = importlib.import_module("agent_memory.bootstrap.connect")
        monkeypatch.setattr(connect_module, "minilm_installed", lambda: False)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A directory in `background.DELEGATED` runs as a background job
    (tests/test_delegated_dirs.py) unless this session was asked for it by path."""
    if collection_path.parent == TESTS and collection_path.name in background.DELEGATED:
        return None if background.asked_for(config, collection_path) else True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that wait on a background job run last, and their jobs start now
    (see tests/background.py), so the jobs use the idle core meanwhile."""
    waiting = [item for item in items if item.get_closest_marker("background")]
    if not waiting or config.option.collectonly:
        return
    items[:] = [item for item in items if not item.get_closest_marker("background")] + waiting
    names = []
    for item in waiting:
        marker = item.get_closest_marker("background")
        names += list(marker.args) if marker is not None else []
    background.start(names)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = background.report()
    if lines:
        terminalreporter.write_sep("-", "background jobs")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    background.shutdown()

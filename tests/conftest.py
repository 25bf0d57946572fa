"""Test-session setup: hypothesis profiles and the real-server fixtures.

Servers start once per session (see tests/servers/), from the project's own
dependencies, or come from `REDIS_URL`, `DATABASE_URL`, `NATS_URL`, `QDRANT_URL`.
A backend that cannot start is an error, never a skip — locally and in CI.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

pytest_plugins = [
    "servers.redis_server",
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

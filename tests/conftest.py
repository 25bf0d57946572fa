"""Test-session setup: hypothesis profiles and the real-server fixtures.

Servers start once per session (see tests/servers/). In CI
(`CI=true` or `AGENT_MEMORY_REQUIRE_BACKENDS=1`) a backend that cannot start is an error,
never a skip.
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
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

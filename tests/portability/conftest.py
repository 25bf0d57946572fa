"""The server backends the portability tests run on (each a fresh deployment
per test through `helpers.settings`): SQLite (a file `m.db` in the test's
tmp_path), PostgreSQL and Redis (the session's servers)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/m.db"
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
def target(backend: str) -> str:
    """The backend an import or a migration writes to."""
    return backend

"""One real `agent-memory serve` (SQLite) for the HTTP tests of this session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from server.live import LiveServer, unique

MAX_BODY = 64 * 1024


@pytest.fixture(scope="session")
def tenants() -> dict[str, str]:
    return {"acme": unique("acme-"), "globex": unique("globex-")}


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory, tenants: dict[str, str]) -> Iterator[LiveServer]:
    db = tmp_path_factory.mktemp("http") / "memory.db"
    server = LiveServer(
        f"sqlite:///{db}",
        {
            "acme": {"tenant": tenants["acme"]},
            "acme-ro": {"tenant": tenants["acme"], "read_only": True},
            "globex": {"tenant": tenants["globex"]},
            "slow": {"tenant": tenants["acme"], "rate": 0.2, "burst": 2},
            "doomed": {"tenant": tenants["acme"]},
        },
        extra_args=("--max-body-bytes", str(MAX_BODY), "--rate", "2000", "--burst", "2000"),
    ).start()
    try:
        yield server
    finally:
        server.close()

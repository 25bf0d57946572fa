"""The server's per-request deadline (`serve --request-timeout`): a backend that
hangs makes the request answer `503 deadline-exceeded` (with `Retry-After`) in
about the deadline, instead of holding the client for as long as the backend
does; the server stays healthy and the retried write is stored. The hang is
real: another connection holds SQLite's write lock, so the server's write
waits on the busy timeout (10 s), longer than the 1 s deadline."""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent_memory.domain.errors import ConfigurationError
from agent_memory.entrypoints.server.middleware import Guard
from server.live import LiveServer, unique


@pytest.fixture(scope="module")
def hung(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    db = tmp_path_factory.mktemp("deadline") / "memory.db"
    server = LiveServer(
        f"sqlite:///{db}",
        {"k": {"tenant": unique("deadline-")}},
        extra_args=("--request-timeout", "1", "--rate", "1000", "--burst", "1000"),
    ).start()
    try:
        yield server, db
    finally:
        server.close()


def _remember(client: httpx.Client, user: str, text: str) -> httpx.Response:
    return client.post(
        "/v1/users/remember",
        json={
            "user_id": user,
            "namespace": "travel",
            "facts": [{"content": text, "category": "constraint"}],
        },
    )


def test_a_hung_backend_answers_deadline_exceeded_and_the_retry_is_stored(
    hung: tuple[LiveServer, Path],
) -> None:
    server, db = hung
    user = unique("u")
    with httpx.Client(base_url=server.base, headers=server.headers("k"), timeout=30) as client:
        assert _remember(client, user, "User likes tea").status_code == 200  # schema exists
        lock = sqlite3.connect(db, timeout=0)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            started = time.monotonic()
            r = _remember(client, user, "User likes green tea")
            waited = time.monotonic() - started
        finally:
            lock.rollback()
            lock.close()
        assert r.status_code == 503, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["type"].endswith("/deadline-exceeded")
        assert r.headers["retry-after"] == "1"
        assert waited < 8, waited  # the deadline (1 s), not the busy timeout (10 s)
        assert client.get("/v1/health").status_code == 200
        again = _remember(client, user, "User likes green tea")
        assert again.status_code == 200, again.text
        facts = client.get("/v1/users/facts", params={"user_id": user}).json()["facts"]
        assert "User likes green tea" in {f["content"] for f in facts}


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_a_deadline_must_be_positive(bad: float) -> None:
    with pytest.raises(ConfigurationError, match="request_timeout"):
        Guard(object(), max_body_bytes=1, request_timeout=bad)


def test_a_stopped_postgres_answers_within_the_deadline_and_recovers() -> None:
    """PostgreSQL SIGSTOPped (it accepts connections, answers nothing: a
    partitioned host): the client has its 503 at the deadline, although the
    driver takes ten seconds or more to give up cancelling the query; once the
    server runs again, so does the service."""
    from servers.postgres_server import start_postgres

    pg = start_postgres()
    try:
        server = LiveServer(
            pg.uri,
            {"k": {"tenant": unique("deadline-pg-")}},
            extra_args=("--request-timeout", "1", "--rate", "1000", "--burst", "1000"),
        ).start()
        try:
            user = unique("u")
            headers = server.headers("k")
            with httpx.Client(base_url=server.base, headers=headers, timeout=60) as client:
                assert _remember(client, user, "User likes tea").status_code == 200
                pg.signal_all(signal.SIGSTOP)
                try:
                    started = time.monotonic()
                    r = _remember(client, user, "User likes green tea")
                    waited = time.monotonic() - started
                finally:
                    pg.signal_all(signal.SIGCONT)
                assert r.status_code == 503, r.text
                assert r.json()["type"].endswith("/deadline-exceeded")
                assert waited < 5, waited
                deadline = time.monotonic() + 60
                while True:  # the service recovers (its pool replaces the cancelled connection)
                    again = _remember(client, user, "User likes green tea")
                    if again.status_code == 200 or time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
                assert again.status_code == 200, again.text
                facts = client.get("/v1/users/facts", params={"user_id": user}).json()["facts"]
                assert "User likes green tea" in {f["content"] for f in facts}
        finally:
            server.close()
    finally:
        pg.destroy()

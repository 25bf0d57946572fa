"""The client-side bound on one round trip to PostgreSQL (`call_timeout`): a
server that answers late, or is stopped (it accepts and answers nothing, like a
partitioned host), fails a library call with `BackendUnavailable` at the bound
instead of holding it (and the agent) for as long as it stays away; schema work
that may rightly take long is exempt; the URL option and its bad values."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Iterator

import pytest

from agent_memory.adapters.postgres import PostgresDatabase
from agent_memory.adapters.postgres._database import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    NoAnswer,
    connect_timeout_of,
    split_call_timeout,
    unbounded,
)
from agent_memory.domain.errors import BackendUnavailable, ConfigurationError
from servers.postgres_server import EmbeddedPostgres, start_postgres
from silent_server import check_silent_server


def _schema() -> str:
    return "ct_" + uuid.uuid4().hex[:10]


# --- the option -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "want_url", "want"),
    [
        ("postgresql://h/db", "postgresql://h/db", DEFAULT_CALL_TIMEOUT),
        ("postgresql://h/db?call_timeout=2.5", "postgresql://h/db", 2.5),
        (
            "postgresql://h/db?sslmode=disable&call_timeout=none&application_name=x",
            "postgresql://h/db?sslmode=disable&application_name=x",
            None,
        ),
        ("postgresql://h/db?call_timeout=0", "postgresql://h/db", None),
    ],
)
def test_the_url_option_is_split_off_for_libpq(url: str, want_url: str, want: float | None) -> None:
    assert split_call_timeout(url) == (want_url, want)


@pytest.mark.parametrize("bad", ["-1", "abc", "inf", "nan", ""])
def test_a_bad_url_value_names_the_option(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="call_timeout"):
        split_call_timeout(f"postgresql://h/db?call_timeout={bad}")


@pytest.mark.parametrize("bad", [0, -2.0, float("nan"), float("inf"), True, "3"])
def test_a_bad_constructor_value_names_the_option(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="call_timeout"):
        PostgresDatabase("postgresql://h/db", call_timeout=bad)  # type: ignore[arg-type]


# --- a server that answers late -------------------------------------------------


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("postgresql://h/db", DEFAULT_CONNECT_TIMEOUT),
        ("postgresql://h/db?connect_timeout=1", 1.0),
        ("postgresql://h/db?sslmode=disable&connect_timeout=12", 12.0),
        ("host=h dbname=db", DEFAULT_CONNECT_TIMEOUT),  # a libpq DSN: libpq reads it
    ],
)
def test_the_urls_connect_timeout_is_the_bound(url: str, want: float) -> None:
    assert connect_timeout_of(url) == want
    assert PostgresDatabase(url)._connect_timeout == want


@pytest.mark.parametrize("bad", ["0", "-3", "soon", "1.5", ""])
def test_a_connect_timeout_that_would_wait_forever_names_the_option(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="connect_timeout"):
        PostgresDatabase(f"postgresql://h/db?connect_timeout={bad}")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_opening_gives_up_at_the_urls_connect_timeout() -> None:
    """A URL's `connect_timeout` bounds the pool's wait at open too: the pool
    used to pass its own 5 s to libpq over the URL's value and wait 5 s for a
    refused port whatever the URL said."""
    url = f"postgresql://u:pw@127.0.0.1:{_closed_port()}/db?connect_timeout=1"
    db = PostgresDatabase(url, schema=_schema())
    start = time.monotonic()
    with pytest.raises(BackendUnavailable):
        await db.open()
    assert time.monotonic() - start < DEFAULT_CONNECT_TIMEOUT - 1.5, "waited the default"
    await db.close()


async def test_a_late_answer_fails_at_the_bound_and_schema_work_is_exempt(
    postgres_url: str,
) -> None:
    """When this fails, a round trip waited past `call_timeout` (no bound), was
    retried (the read helpers retry a broken connection once: twice the wait),
    or the bound also cut schema work that `unbounded` exempts."""
    db = PostgresDatabase(postgres_url, schema=_schema(), call_timeout=0.5)
    try:
        assert (await db.fetch_one("SELECT 1", ()))[0] == 1
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="call_timeout"):
            await db.fetch_one("SELECT pg_sleep(3)", ())
        assert time.monotonic() - started < 2.0
        # for one bound after, calls fail at once instead of each waiting it
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="did not answer"):
            await db.fetch_one("SELECT 2", ())
        assert time.monotonic() - started < 0.2
        await asyncio.sleep(0.6)
        # then the pool carries on with a new connection
        assert (await db.fetch_one("SELECT 2", ()))[0] == 2
        async with db.connection() as conn:
            with unbounded(conn):
                await conn.execute("SELECT pg_sleep(1)")
            # and the bound is back after the block
            with pytest.raises(NoAnswer, match="call_timeout"):
                await conn.execute("SELECT pg_sleep(3)")
    finally:
        await db.close()


# --- a stopped server -----------------------------------------------------------


@pytest.fixture
def stoppable() -> Iterator[EmbeddedPostgres]:
    server = start_postgres()
    try:
        yield server
    finally:
        server.signal_all(signal.SIGCONT)
        server.destroy()


async def test_a_stopped_server_fails_library_calls_at_the_bound_and_they_recover(
    stoppable: EmbeddedPostgres,
) -> None:
    """When this fails, a library call against a SIGSTOPped server (it accepts
    connections and answers nothing) waited past its bound: before the bound the
    call waited as long as the server was stopped (forever), and psycopg's own
    cancellation added ten seconds; or the agent's planning hook did not fail
    open in time; or the store did not recover once the server ran again."""
    sep = "&" if "?" in stoppable.uri else "?"
    # one bound, then the others fail at once while the server stays quiet
    await check_silent_server(
        f"{stoppable.uri}{sep}call_timeout=1",
        stoppable.signal_all,
        first_within=4.0,
        request_within=8.0,
        match="call_timeout",
    )

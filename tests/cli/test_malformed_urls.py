"""A storage URL an integrator mistypes fails with a typed error that says what
is wrong: a URL that does not parse is a `ConfigurationError` (CLI exit 2), not
a bare `ValueError` from a client library; a Redis path that is not a database
number is refused rather than silently read as database 0; a PostgreSQL server
that refuses the connection (a wrong database, user or port) is named in the
`BackendUnavailable` message, not hidden behind the pool's timeout."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest

import agent_memory
from agent_memory import BackendUnavailable, ConfigurationError, InvalidInput
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.entrypoints.cli import main

MALFORMED = [
    "redis://[::1",
    "redis://localhost:notaport",
    "redis://localhost:99999",
    "rediss://[::1]:x",
    "redis+cluster://[::1",
    "postgresql://[::1",
    "postgresql://localhost:notaport/db",
    "postgresql://localhost:99999/db",
    "postgresql://%zz@localhost/db",
    "qdrant://[::1",
    "milvus://[::1",
]


async def _open(url: str) -> None:
    async with agent_memory.connect(url, embedder=HashingEmbedder(8)):
        pass


@pytest.mark.parametrize("url", MALFORMED)
async def test_a_malformed_url_is_a_configuration_error(url: str) -> None:
    with pytest.raises(ConfigurationError, match="malformed"):
        await _open(url)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://localhost:6379/cache", "database number"),
        ("redis://localhost:6379/-1", "database number"),
        ("redis://localhost:6379/0?socket_timeout=abc", "socket_timeout"),
    ],
)
async def test_a_bad_redis_url_is_refused_before_any_command(url: str, says: str) -> None:
    with pytest.raises(InvalidInput, match=says) as raised:
        await _open(url)
    assert raised.value.field == "url"


@pytest.mark.parametrize("url", ["redis://[::1", "postgresql://localhost:99999/db"])
def test_the_cli_says_configuration_error_and_exits_2(
    url: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", "--url", url, "--out", f"{tmp_path}/out.jsonl"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agent-memory export: ConfigurationError: malformed storage URL"), err
    assert "Traceback" not in err


def test_a_password_in_a_malformed_url_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--url", "redis://u:s3cret@[::1", "--out", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert "s3cret" not in err, err
    assert "***" in err, err


async def test_a_missing_postgres_database_is_named(postgres_url: str) -> None:
    """The pool retries until its timeout and then says only 'pool
    initialization incomplete'; the error must carry libpq's reason."""
    parts = urlsplit(postgres_url)
    query = "&".join(q for q in (parts.query, "connect_timeout=1") if q)  # no 5 s wait
    missing = urlunsplit(parts._replace(path="/no_such_database_here", query=query))
    with pytest.raises(BackendUnavailable) as raised:
        await _open(missing)
    assert 'database "no_such_database_here" does not exist' in str(raised.value), raised.value

"""A one-shot command that cannot reach its backend says so in one line (the
library's typed error), not with a client library's warning per failed
connection attempt; a storage URL whose path holds NUL, a lone surrogate or a
percent-escape that is not UTF-8 is a `ConfigurationError` naming the URL.

The quieting is the CLI's own: an application that configured logging still
gets `psycopg.pool`'s warnings from the library, and a level set for that
logger is left as it was."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import agent_memory
from agent_memory import BackendUnavailable, ConfigurationError
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.entrypoints.cli import main

POOL = "psycopg.pool"


def _closed_url() -> str:
    """A PostgreSQL URL on a loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"postgresql://u:pw@127.0.0.1:{port}/db?connect_timeout=1"  # no 5 s wait


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    return subprocess.run(
        [sys.executable, "-m", "agent_memory.entrypoints.cli", *args],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip


def test_doctor_against_a_closed_port_prints_one_failure_line() -> None:
    done = _run("doctor", "--url", _closed_url())
    assert done.returncode == 1, done
    assert done.stderr == "", done.stderr  # no pool warning per attempt
    failures = [line for line in done.stdout.splitlines() if line.lstrip().startswith("FAIL ")]
    assert len(failures) == 1, done.stdout
    assert "BackendUnavailable" in failures[0], failures


def test_export_against_a_closed_port_is_one_line_on_stderr(tmp_path: Path) -> None:
    done = _run("export", "--url", _closed_url(), "--out", str(tmp_path / "out.jsonl"))
    assert done.returncode == 1, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("agent-memory export: BackendUnavailable: postgres"), lines
    assert "error connecting in" not in done.stderr
    assert "pw" not in done.stderr.replace("pwd", "")  # no password in the message


def test_in_process_the_cli_quiets_the_pool_only_while_it_runs(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    caplog.set_level(logging.WARNING)
    assert main(["export", "--url", _closed_url(), "--out", str(tmp_path / "o.jsonl")]) == 1
    assert not [r for r in caplog.records if r.name.startswith(POOL)], caplog.text
    assert len(capsys.readouterr().err.splitlines()) == 1
    assert logging.getLogger(POOL).level == logging.NOTSET  # restored


async def test_a_library_user_who_configured_logging_still_sees_pool_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    with pytest.raises(BackendUnavailable):
        async with agent_memory.connect(_closed_url(), embedder=HashingEmbedder(8)):
            pass
    assert [r for r in caplog.records if r.name.startswith(POOL)], "the library hid them"


def test_a_level_set_for_the_pool_is_left_alone(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    pool = logging.getLogger(POOL)
    pool.setLevel(logging.WARNING)
    try:
        caplog.set_level(logging.WARNING)
        assert main(["export", "--url", _closed_url(), "--out", str(tmp_path / "o.jsonl")]) == 1
        assert [r for r in caplog.records if r.name.startswith(POOL)], caplog.text
        assert pool.level == logging.WARNING
    finally:
        pool.setLevel(logging.NOTSET)


# -- path-bearing URLs -------------------------------------------------------------------
BAD_PATHS = [
    "sqlite:///\x00",
    "sqlite:///tmp/a\x00b.db",
    "sqlite:///tmp/a%00b.db",
    "sqlite:a\x00.db",
    "sqlite:///tmp/\ud800.db",
    "sqlite:///tmp/%ED%A0%80.db",  # an escaped surrogate: not UTF-8
    "sqlite:///tmp/%ff.db",
    "milvus+lite:///tmp/a\x00.db",
    "milvus+lite:///tmp/a%00.db",
    "milvus+lite:///tmp/%ff.db",
]


@pytest.mark.parametrize("url", BAD_PATHS, ids=[repr(u) for u in BAD_PATHS])
async def test_a_path_that_names_no_file_is_a_configuration_error(url: str) -> None:
    if url.startswith("milvus"):
        pytest.importorskip("pymilvus")
    with pytest.raises(ConfigurationError) as raised:
        async with agent_memory.connect(url, embedder=HashingEmbedder(8)):
            pass
    assert repr(url) in str(raised.value), raised.value  # names the URL


def test_the_cli_refuses_a_nul_path_as_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--url", "sqlite:///tmp/x%00y.db"]) in (1, 2)
    out = capsys.readouterr()
    text = out.out + out.err
    assert "ConfigurationError" in text, text
    assert "Traceback" not in text

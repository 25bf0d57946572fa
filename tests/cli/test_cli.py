"""The `agent-memory` command, run as a user would run it (a real subprocess)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


def agent_memory(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "agent_memory.entrypoints.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        timeout=600,
        check=False,
    )


def test_demo_runs_offline_on_the_embedded_default() -> None:
    result = agent_memory("demo")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "on sqlite:///" in out
    assert "its claim is refused: agent-a holds it" in out
    assert '"agent-a" doing "investigate OOMKilled restarts"' in out
    assert "## investigations: admitted=1" in out
    assert "OOMKilled (exit 137)" in out, "a later request sees A's recorded events"
    assert "the digest is built (full compaction, no model call)" in out
    reuse = out.split("Another request reads the same domain", 1)[1]
    assert "the digest is reused from the cache (no compaction, no model call)" in reuse
    user_part = out.split("A user says", 1)[1]
    recalled, forgotten = user_part.split("asks to be forgotten", 1)
    assert '"User is vegan" (explicit, high confidence' in recalled
    assert "Saying it again reconciles as {'DUPLICATE': 1}" in recalled
    assert "Receipt: 2 facts" in forgotten
    assert "Facts left: 0" in forgotten
    assert "User is vegan" not in forgotten, "the forgotten fact is gone from the profile"
    assert "demo complete" in out


def test_demo_reads_like_a_story() -> None:
    out = agent_memory("demo").stdout
    lines = out.splitlines()
    reports = [line for line in lines if line.strip().startswith("report ")]
    assert reports, "stage reports are summarised"
    assert not [line for line in lines if line.lstrip().startswith("{") and '"stage"' in line]
    assert out.count("report memory-record: ok") == 1, "the record report is shown once"
    assert "## active_agents: admitted=0" not in out, "no empty coordination section"
    first, last = re.search(r"(\d+) events from (\S+) to (\S+)\.", out).group(2, 3)  # type: ignore[union-attr]
    assert first < last, "the events have distinct timestamps, so the digest spans time"
    as_json = agent_memory("demo", "--json").stdout
    assert '"stage": "memory-record"' in as_json, "--json prints the raw reports"


def test_demo_on_an_unreachable_backend_is_one_line(tmp_path: Path) -> None:
    result = agent_memory("demo", "--url", "redis://127.0.0.1:1")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("agent-memory")]
    assert line.startswith("agent-memory demo: BackendUnavailable:")


def test_doctor_reports_a_healthy_sqlite_file(tmp_path: Path) -> None:
    agent_memory("demo", "--url", f"sqlite:///{tmp_path / 'x.db'}")
    result = agent_memory("doctor", "--url", f"sqlite:///{tmp_path / 'x.db'}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "result: healthy" in result.stdout
    assert "sqlite_version" in result.stdout
    assert "reachable" in result.stdout
    # faiss (the 'ann' extra) is in the test extra: past the threshold, the graph
    assert "exact up to 100,000 records per owner, then an HNSW graph" in result.stdout


def test_doctor_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "nonexistent" / "dir" / "x.db"
    result = agent_memory("doctor", "--url", f"sqlite:///{target}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"would create             {target}" in result.stdout
    assert "1 path(s) would be created on first use, none was" in result.stdout
    assert not (tmp_path / "nonexistent").exists(), "doctor created the directory"
    relative = agent_memory("doctor", "--url", "sqlite:fresh.db", cwd=tmp_path)
    assert f"would create             {tmp_path / 'fresh.db'}" in relative.stdout
    assert list(tmp_path.iterdir()) == [], "nothing at all was created"


def test_doctor_says_when_a_file_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    result = agent_memory("doctor", "--url", f"sqlite:///{tmp_path / 'a-file' / 'x.db'}")
    assert result.returncode == 1
    assert "cannot be created" in result.stdout


def test_doctor_rejects_invalid_environment() -> None:
    result = agent_memory("doctor", env={"AGENT_MEMORY_WINDOW_LIMIT": "-3"})
    assert result.returncode == 1
    assert "AGENT_MEMORY_WINDOW_LIMIT='-3' is invalid" in result.stdout


def test_unknown_scheme_is_a_clear_error() -> None:
    result = agent_memory("doctor", "--url", "mongodb://x")
    assert result.returncode == 1
    assert "unsupported storage URL scheme 'mongodb'" in result.stdout


def test_version_and_bare_command() -> None:
    import agent_memory as package

    version = agent_memory("--version")
    assert version.returncode == 0
    assert version.stdout.strip() == f"agent-memory {package.__version__}"
    bare = agent_memory()
    assert bare.returncode == 2
    assert bare.stderr.startswith("usage: agent-memory")
    assert "demo" in bare.stderr


SUBCOMMANDS = [
    "demo",
    "doctor",
    "reflect",
    "processor",
    "conformance",
    "export",
    "import",
    "migrate",
    "reembed",
]


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_has_a_description_and_usage_errors_exit_2(command: str) -> None:
    helped = agent_memory(command, "--help")
    assert helped.returncode == 0
    usage, rest = helped.stdout.split("\n\n", 1)
    description = rest.split("\n\n", 1)[0]
    assert usage.startswith(f"usage: agent-memory {command}")
    assert not description.startswith(("options:", "positional arguments:")), helped.stdout
    assert len(description.split()) >= 8, f"{command} --help has no real description"
    wrong = agent_memory(command, "--no-such-option")
    assert wrong.returncode == 2
    assert "Traceback" not in wrong.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["demo", "--url", "mongodb://x"],
        ["reflect", "--url", "mongodb://x", "--domain", "k8s"],
        ["reflect", "--url", "sqlite://host/x.db", "--domain", "k8s"],
    ],
)
def test_bad_configuration_is_a_usage_error(args: list[str]) -> None:
    result = agent_memory(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"agent-memory {args[0]}: ")


# `agent-memory conformance`: tests/cli/test_conformance.py


def test_reflect_runs_one_pass_with_a_progress_bar(tmp_path: Path) -> None:
    import asyncio
    from datetime import UTC, datetime, timedelta

    from agent_memory.adapters.sqlite import SqliteEventLog
    from agent_memory.domain.records import Entity, Event

    db = tmp_path / "m.db"
    old = datetime.now(UTC) - timedelta(days=9)

    async def seed() -> None:
        log = SqliteEventLog(db)
        await log.append(
            [
                Event(
                    id=f"e{i}",
                    domain="k8s",
                    agent="a",
                    action="restart",
                    outcome="failure",
                    summary=f"restart {i}",
                    occurred_at=old,
                    recorded_at=old,
                    entities=(Entity("pod", "web-1"),),
                )
                for i in range(6)
            ]
        )
        await log.close()

    asyncio.run(seed())
    result = agent_memory("reflect", "--url", f"sqlite:///{db}", "--domain", "k8s")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "entities discovered=1 processed=1 fragments stored=1" in result.stdout
    assert result.stderr == "1/1 k8s: pod/web-1\n", "plain progress lines off a terminal"
    again = agent_memory("reflect", "--url", f"sqlite:///{db}", "--domain", "k8s")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "entities discovered=0" in again.stdout
    assert (
        "nothing to reflect on in k8s: no entity with >= 5 events older than 7 days "
        "that an earlier pass has not covered"
    ) in again.stdout


def test_progress_is_a_bar_on_a_terminal_and_lines_elsewhere() -> None:
    import io

    from agent_memory.entrypoints.cli.reflect import progress_printer

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, log = Terminal(), io.StringIO()
    for stream in (tty, log):
        show = progress_printer(stream)
        show(1, 2, "k8s: pod/a")
        show(2, 2, "k8s: pod/b")
    assert tty.getvalue().startswith("\r[###############---------------] 1/2 k8s: pod/a")
    assert tty.getvalue().endswith("\n")
    assert log.getvalue() == "1/2 k8s: pod/a\n2/2 k8s: pod/b\n"


def test_reflect_says_why_the_lock_was_not_taken() -> None:
    result = agent_memory("reflect", "--url", "redis://127.0.0.1:1", "--domain", "k8s")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "lock held by None" not in result.stdout
    assert "reflection did not run: the reflection lock could not be taken" in result.stdout
    assert "failed: acquire-lock: BackendUnavailable" in result.stdout


def test_demo_runs_on_redis(redis_url: str) -> None:
    result = agent_memory("demo", "--url", redis_url)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"on {redis_url}" in result.stdout
    assert "its claim is refused: agent-a holds it" in result.stdout
    assert "OOMKilled (exit 137)" in result.stdout
    assert "Facts left: 0" in result.stdout
    assert "demo complete" in result.stdout


def test_doctor_shows_redis_server_and_search_module(redis_url: str) -> None:
    result = agent_memory("doctor", "--url", redis_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "search_module            loaded" in result.stdout
    assert "result: healthy" in result.stdout


def test_doctor_shows_postgres_schema_and_pgvector_versions(postgres_url: str) -> None:
    result = agent_memory("doctor", "--url", postgres_url)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert "schema_version" in lines
    assert lines["schema_version"].split()[-1].isdigit()
    assert "pgvector" in lines
    assert lines["pgvector"].split()[-1].startswith("0.")
    assert "result: healthy" in result.stdout

"""The `agent-memory` command, run as a user would run it (a real subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def agent_memory(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "agent_memory.cli", *args],
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
    assert "claim acquired=False; held by agent-a" in out
    assert '"agent-a" doing "investigate OOMKilled restarts"' in out
    assert "## investigations: admitted=1" in out
    assert "OOMKilled (exit 137)" in out, "a later request sees A's recorded events"
    assert '"path": "full"' in out, "the digest is built"
    reuse = out.split("reuses the cached digest", 1)[1]
    assert '"cache_hit": true' in reuse
    assert '"model_called": false' in reuse
    assert '"path": "cached"' in reuse
    user_part = out.split("A user session", 1)[1]
    recalled, forgotten = user_part.split("Forget the user", 1)
    assert '"User is vegan" (explicit, high confidence' in recalled
    assert "saying it again reconciles as: {'DUPLICATE': 1}" in recalled
    assert "receipt: facts=2" in forgotten
    assert "facts left: 0" in forgotten
    assert "User is vegan" not in forgotten, "the forgotten fact is gone from the profile"
    assert "demo complete" in out


def test_doctor_reports_a_healthy_sqlite_file(tmp_path: Path) -> None:
    result = agent_memory("doctor", "--url", f"sqlite:///{tmp_path / 'x.db'}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "result: healthy" in result.stdout
    assert "sqlite_version" in result.stdout


def test_doctor_rejects_invalid_environment() -> None:
    result = agent_memory("doctor", env={"AGENT_MEMORY_WINDOW_LIMIT": "-3"})
    assert result.returncode == 1
    assert "AGENT_MEMORY_WINDOW_LIMIT='-3' is invalid" in result.stdout


def test_unknown_scheme_is_a_clear_error() -> None:
    result = agent_memory("doctor", "--url", "mongodb://x")
    assert result.returncode == 1
    assert "unsupported storage URL scheme 'mongodb'" in result.stdout


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
    assert "[##############################] 1/1" in result.stderr


def test_demo_runs_on_redis(redis_url: str) -> None:
    result = agent_memory("demo", "--url", redis_url)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"on {redis_url}" in result.stdout
    assert "claim acquired=False; held by agent-a" in result.stdout
    assert "OOMKilled (exit 137)" in result.stdout
    assert "facts left: 0" in result.stdout
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

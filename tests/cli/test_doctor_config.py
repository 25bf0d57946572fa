"""`agent-memory doctor --config`: every setting's effective value and source,
secrets redacted — run as a user would run it (a real subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys

from agent_memory.bootstrap import ENV_VARS


def doctor_config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "agent_memory.entrypoints.cli", "doctor", "--config"],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        check=False,
    )


def _rows(out: str) -> dict[str, list[str]]:
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] in ENV_VARS:
            rows[parts[0]] = parts[1:]
    return rows


def test_config_dump_shows_every_value_and_its_source() -> None:
    result = doctor_config(
        {
            "AGENT_MEMORY_DIGEST_CACHE_TTL_SECONDS": "600",
            "AGENT_MEMORY_DIGEST_INCREMENTAL_THRESHOLD": "10",
            "AGENT_MEMORY_LLM_URL": "http://127.0.0.1:9/v1",
            "AGENT_MEMORY_LLM_MODEL": "big-model",
            "AGENT_MEMORY_SUMMARIZER_MODEL": "fast-model",
            "AGENT_MEMORY_API_KEY": "sk-MARKER-never-printed",
            "AGENT_MEMORY_URL": "redis://agent:pw-MARKER@127.0.0.1:9/0",
        }
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    rows = _rows(out)
    assert set(rows) == set(ENV_VARS), "every setting is shown"
    assert rows["AGENT_MEMORY_DIGEST_CACHE_TTL_SECONDS"] == ["600.0", "environment"]
    assert rows["AGENT_MEMORY_DIGEST_INCREMENTAL_THRESHOLD"] == ["10", "environment"]
    assert rows["AGENT_MEMORY_DIGEST_TARGET_TOKENS"] == ["500", "default"]
    assert rows["AGENT_MEMORY_REFLECTION_AGE_THRESHOLD_HOURS"] == ["168.0", "default"]
    assert rows["AGENT_MEMORY_API_KEY"] == ["<redacted>", "environment"]
    assert rows["AGENT_MEMORY_DIGEST_MODEL"] == ["-", "default", "(uses", "'fast-model')"]
    assert rows["AGENT_MEMORY_URL"] == ["redis://agent:<redacted>@127.0.0.1:9/0", "environment"]
    assert "MARKER" not in out + result.stderr, "no secret in the dump"
    assert "storage" not in out, "--config stops before connecting"


def test_config_dump_rejects_a_bad_value_naming_it() -> None:
    result = doctor_config({"AGENT_MEMORY_USER_SIMILARITY_THRESHOLD": "1.5"})
    assert result.returncode == 1
    assert "AGENT_MEMORY_USER_SIMILARITY_THRESHOLD='1.5' is invalid" in result.stdout

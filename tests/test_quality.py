"""Lint, strict typing and the architecture's import rules, as part of the test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    "cmd",
    [
        ("ruff", "check", "src", "tests", "benchmarks", "noxfile.py"),
        ("ruff", "format", "--check", "src", "tests", "benchmarks", "noxfile.py"),
        ("mypy",),
        ("lint-imports",),
    ],
    ids=["ruff", "ruff-format", "mypy-strict", "import-rules"],
)
def test_tool_passes(cmd: tuple[str, ...]) -> None:
    """When this fails, run the same command locally and fix what it reports."""
    result = _run(str(BIN / cmd[0]), *cmd[1:])
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}"


def test_import_does_no_work() -> None:
    """Importing the package must not start clients, threads or connections."""
    code = (
        "import threading, sys; before = threading.active_count();"
        "import agent_memory, agent_memory.bootstrap, agent_memory.cli;"
        "assert threading.active_count() == before, 'a thread started at import';"
        "bad = [m for m in ('redis', 'psycopg', 'qdrant_client', 'httpx') if m in sys.modules];"
        "assert not bad, f'infrastructure imported at import time: {bad}'"
    )
    result = _run(sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr

"""Lint, strict typing and the architecture's import rules, as part of the test run.

The tools run as background jobs (tests/background.py): beside the suite, on the
core it leaves idle, and these tests read their results at the end.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import background

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

TOOLS = {
    "ruff": ("ruff", "check", "src", "tests", "benchmarks", "noxfile.py"),
    "ruff-format": ("ruff", "format", "--check", "src", "tests", "benchmarks", "noxfile.py"),
    "mypy-strict": ("mypy",),
    "import-rules": ("lint-imports",),
}


def _register(name: str, cmd: tuple[str, ...]) -> None:
    @background.job(f"quality-{name}")
    def _prepare(workdir: Path) -> background.Command:
        return background.Command([str(BIN / cmd[0]), *cmd[1:]], cwd=ROOT, timeout=900)


for _name, _cmd in TOOLS.items():
    _register(_name, _cmd)


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=pytest.mark.background(f"quality-{name}")) for name in TOOLS],
)
def test_tool_passes(name: str) -> None:
    """When this fails, run the same command locally and fix what it reports."""
    result = background.result(f"quality-{name}")
    cmd = " ".join(TOOLS[name])
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"


def test_import_does_no_work() -> None:
    """Importing the package must not start clients, threads or connections."""
    code = (
        "import threading, sys; before = threading.active_count();"
        "import agent_memory, agent_memory.bootstrap, agent_memory.entrypoints.cli;"
        "assert threading.active_count() == before, 'a thread started at import';"
        "bad = [m for m in ('redis', 'psycopg', 'qdrant_client', 'httpx') if m in sys.modules];"
        "assert not bad, f'infrastructure imported at import time: {bad}'"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr

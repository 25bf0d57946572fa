"""The `agent-memory` help, per subcommand, against golden files in tests/cli/help/
(pinned so that moving or restructuring the CLI cannot change what users read).

Regenerate after a deliberate change: `python tests/cli/test_help.py`."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import tomllib
from importlib import import_module
from pathlib import Path

import pytest

from agent_memory.entrypoints.cli import _parser, main

HELP_DIR = Path(__file__).parent / "help"
#: argparse wraps to the terminal width; a fixed one makes the text deterministic
COLUMNS = "100"
SUBCOMMANDS = (
    "demo",
    "doctor",
    "reflect",
    "processor",
    "conformance",
    "serve",
    "mcp",
    "export",
    "import",
    "migrate",
    "reembed",
    "audit",
)


def help_text(*args: str) -> str:
    """What `agent-memory ARGS --help` prints (stdout) at COLUMNS columns."""
    out = io.StringIO()
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = COLUMNS
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main([*args, "--help"])
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return out.getvalue()


def _golden(name: str) -> Path:
    return HELP_DIR / f"{name}.txt"


def test_every_subcommand_has_a_golden_file() -> None:
    """A new subcommand gets its help pinned too."""
    (sub,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(sub.choices) == sorted(SUBCOMMANDS)


@pytest.mark.parametrize("sub", ["agent-memory", *SUBCOMMANDS])
def test_help_is_unchanged(sub: str) -> None:
    args = () if sub == "agent-memory" else (sub,)
    assert help_text(*args) == _golden(sub).read_text()


def test_the_command_prints_the_same_help() -> None:
    """The console script's target is this `main`, and `python -m` prints the same text."""
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    module, _, attr = pyproject["project"]["scripts"]["agent-memory"].partition(":")
    assert getattr(import_module(module), attr) is main
    env = {**os.environ, "COLUMNS": COLUMNS}
    result = subprocess.run(
        [sys.executable, "-m", module, "conformance", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == _golden("conformance").read_text()


def _regenerate() -> None:
    HELP_DIR.mkdir(exist_ok=True)
    _golden("agent-memory").write_text(help_text())
    for sub in SUBCOMMANDS:
        _golden(sub).write_text(help_text(sub))


if __name__ == "__main__":
    _regenerate()
    sys.exit(0)

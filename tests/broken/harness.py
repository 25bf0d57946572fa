"""The shipped contract classes run on broken adapters in a pytest subprocess,
and which clauses failed, per adapter class: the shared part of the
tests/broken harnesses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]

PYTEST_INI = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"

#: a test id may hold spaces (parametrized with `"ana "`), so it ends at " - "
FAILED = re.compile(r"^FAILED \S+?::Test(?P<cls>\w+)::(?P<test>.+?) - (?P<msg>.*)$")


def env() -> dict[str, str]:
    """The subprocess's environment: the tests directory importable, wide lines."""
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_DIR), out.get("PYTHONPATH")]))
    out["COLUMNS"] = "400"
    return out


def failures_of(stdout: str) -> dict[str, list[str]]:
    """`test - message` lines of every failed test, per adapter class."""
    out: dict[str, list[str]] = defaultdict(list)
    for line in stdout.splitlines():
        m = FAILED.match(line.strip())
        if m:
            out[m["cls"]].append(f"{m['test']} - {m['msg']}")
    return out


def run_generated(work: Path, name: str, source: str, deselect: str) -> dict[str, list[str]]:
    """Write `source` as `test_<name>.py` in `work` and run it (tests matching
    `deselect` left out); the failures per adapter class. Some must fail (the
    broken adapters) and some must pass (the control)."""
    (work / "pytest.ini").write_text(PYTEST_INI)
    (work / f"test_{name}.py").write_text(source)
    argv = [
        sys.executable, "-m", "pytest", f"test_{name}.py", "-q", "--tb=line",
        "-rf", "-p", "no:cacheprovider", "-k", deselect,
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=work, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, f"expected failing tests (exit 1):\n{proc.stdout[-4000:]}"
    assert "passed" in proc.stdout, proc.stdout[-4000:]
    return failures_of(proc.stdout)

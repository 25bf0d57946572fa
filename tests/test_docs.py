"""Documentation that must stay true to the code."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent_memory.bootstrap.settings import ENV_VARS

ROOT = Path(__file__).resolve().parents[1]


def test_configuration_doc_lists_every_variable_with_its_default() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    for name, (_parser, default, _desc) in ENV_VARS.items():
        shown = "—" if default is None else f"`{default}`"
        assert f"| `{name}` | {shown} |" in doc, f"{name} (default {default!r}) missing or stale"


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [line for line in readme.splitlines() if line.startswith("python3 -m venv")]
    assert any("pytest" in c for c in commands), "the README gives the test command"
    assert "grep -m1 -E '^python3 -m venv .*pytest' README.md" in ci


# Runs a script with an audit hook that records every path opened for writing,
# every directory made and every SQLite database connected, and prints them.
_WATCH = """
import os, runpy, sys
written = []
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        mode, flags = args[1] or "", args[2] or 0
        if any(c in mode for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            written.append(os.fsdecode(args[0]))
    elif event in ("os.mkdir", "sqlite3.connect", "os.rename", "os.replace"):
        written.append(os.fsdecode(args[0]))
sys.addaudithook(hook)
try:
    runpy.run_path(sys.argv[1], run_name="__main__")
finally:
    print("WRITTEN", repr([os.path.abspath(p) for p in written]))
"""


def _run_watched(code: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    env |= {"HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "TMPDIR": str(home / "tmp")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    result = subprocess.run(
        [sys.executable, "-c", _WATCH, str(script)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.rsplit("WRITTEN ", 1)[1]
    written: list[str] = ast.literal_eval(line.strip())
    outside = [p for p in written if not Path(p).resolve().is_relative_to(work.resolve())]
    assert not outside, f"the example wrote outside its working directory: {outside}"
    assert not home.exists(), "nothing under the home or data directories"
    return result, written


def _readme_examples() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", readme, re.S)


def test_readme_example_runs_and_writes_only_its_working_directory(tmp_path: Path) -> None:
    """The README's Python example, run as written from a scratch directory."""
    result, written = _run_watched(_readme_examples()[0], tmp_path)
    assert "<agent_memory>" in result.stdout
    assert '"User is vegan"' in result.stdout
    assert "facts=1" in result.stdout
    assert str(tmp_path / "work" / "memory.db") in written
    doctor = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent_memory.entrypoints.cli",
            "doctor",
            "--url",
            "sqlite:memory.db",
        ],
        cwd=tmp_path / "work",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert str(tmp_path / "work" / "memory.db") in doctor.stdout, "doctor sees the same file"


def test_readme_sync_example_runs(tmp_path: Path) -> None:
    (_, sync_example) = _readme_examples()
    assert "agent_memory.sync" in sync_example
    result, _ = _run_watched(sync_example, tmp_path)
    assert "ForgetReceipt" in result.stdout


def test_the_watcher_sees_a_write_outside(tmp_path: Path) -> None:
    """The check above can fail: a script that writes next to its directory is caught."""
    with pytest.raises(AssertionError, match="wrote outside"):
        _run_watched("open('../elsewhere.txt', 'w').close()\n", tmp_path)


def _architecture_tree() -> list[str]:
    """The paths the tree at the top of docs/architecture.md names."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    block = doc.split("```\n", 2)[1]
    paths: list[str] = []
    stack: list[str] = []
    for line in block.splitlines()[1:]:
        match = re.match(r"^([│ ├└─]*)(\S+)", line)
        assert match, line
        depth = len(match.group(1)) // 4
        del stack[depth - 1 :]
        stack.append(match.group(2).rstrip("/"))
        paths.append("/".join(stack))
    return paths


def test_the_architecture_tree_names_every_folder_and_facade() -> None:
    """docs/architecture.md opens with the tree of src/agent_memory: no folder left out,
    none that is gone."""
    src = ROOT / "src" / "agent_memory"
    folders = {
        str(p.parent.relative_to(src))
        for p in src.rglob("__init__.py")
        if p.parent != src and "__pycache__" not in p.parts
    }
    facades = {p.name for p in src.glob("*.py") if p.name != "__main__.py"}
    named = _architecture_tree()
    assert (ROOT / "docs" / "architecture.md").read_text().startswith("# Architecture\n\n```\n")
    missing = sorted((folders | facades) - set(named))
    gone = sorted(set(named) - folders - facades)
    assert not missing, f"docs/architecture.md's tree leaves out {missing}"
    assert not gone, f"docs/architecture.md's tree names {gone}, which do not exist"


def _differences(doc: str) -> list[tuple[str, str]]:
    """The (difference, why) rows of seed-mapping.md's table of differences."""
    section = doc.split("## Where agent-memory differs from the guide, and why", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][2:]
    out = []
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
        assert len(cells) == 2, row
        out.append((cells[0], cells[1]))
    return out


def test_seed_mapping_states_retention_as_the_event_logs_apply_it() -> None:
    """Every event log counts retention from ingestion (contract
    `test_retention_counts_from_recording`); the mapping says so, as the guide does."""
    from agent_memory.contract_tests.event_log import EventLogContract

    assert hasattr(EventLogContract, "test_retention_counts_from_recording")
    doc = (ROOT / "docs" / "seed-mapping.md").read_text()
    flat = " ".join(doc.split())
    assert "counts from event time" not in flat
    assert (
        "`AGENT_MEMORY_RETENTION_DAYS` (counted from ingestion, `recorded_at`, as in the guide)"
        in flat
    )


def test_seed_mapping_gives_a_reason_for_every_difference() -> None:
    doc = (ROOT / "docs" / "seed-mapping.md").read_text()
    rows = _differences(doc)
    assert rows, "the table lists the differences"
    for difference, why in rows:
        assert difference, "a row without its difference"
        assert len(why.split()) >= 5, f"no reason given for: {difference}"
    assert "Not (yet) as in the guide" not in doc

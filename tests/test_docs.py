"""Documentation that must stay true to the code."""

from __future__ import annotations

from pathlib import Path

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


def test_readme_example_runs(tmp_path: Path) -> None:
    """The README's Python example, run as written (in a scratch directory)."""
    import re
    import subprocess
    import sys

    readme = (ROOT / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    script = tmp_path / "example.py"
    script.write_text(code)
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "<agent_memory>" in result.stdout
    assert '"User is vegan"' in result.stdout
    assert "facts=1" in result.stdout

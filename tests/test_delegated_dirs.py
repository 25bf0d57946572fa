"""The directories in `background.DELEGATED`, each as one background job of the
whole suite.

Those that use servers start their own (see `background.DELEGATED`). A session
that was not asked for such a directory by path does not collect it
(tests/conftest.py) and runs it here instead, in a pytest of its own beside the
suite (tests/background.py), with the same hypothesis profile. `pytest
tests/views` (or a file or test in it) runs it inline as usual. A failure here
prints the inner run's failures and its summary line.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import background

ROOT = Path(__file__).resolve().parents[1]


def _register(name: str) -> None:
    @background.job(background.delegated_job(name))
    def _prepare(workdir: Path) -> background.Command:
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/{name}"]
        return background.Command(argv, cwd=ROOT, timeout=1800)


for _name in background.DELEGATED:
    _register(_name)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.background(background.delegated_job(n)))
        for n in background.DELEGATED
    ],
)
def test_the_directory_passes(name: str, request: pytest.FixtureRequest) -> None:
    """Every test in tests/<name> passes, run in its own pytest."""
    if background.asked_for(request.config, ROOT / "tests" / name):
        pytest.skip(f"tests/{name} runs inline in this session")
    result = background.result(background.delegated_job(name))
    assert result.returncode == 0, result.tail()
    summary = result.stdout.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None, result.tail()
    assert int(passed.group(1)) >= 20, summary  # the whole directory ran, not a stray file

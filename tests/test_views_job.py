"""The view property tests (tests/views) as one background job of the whole suite.

They are pure CPU: 1,000 hypothesis examples per property under the ci profile
and no server. A session that was not asked for tests/views by path does not
collect them (tests/conftest.py) and runs them here instead, in a pytest of
their own beside the suite (tests/background.py), so they cost the suite's
wall time almost nothing. `pytest tests/views` runs them inline as usual.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import background

ROOT = Path(__file__).resolve().parents[1]
VIEWS = ROOT / "tests" / "views"


@background.job("views")
def _views_job(workdir: Path) -> background.Command:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(VIEWS)]
    return background.Command(argv, cwd=ROOT, timeout=1800)


@pytest.mark.background("views")
def test_the_view_properties_pass(request: pytest.FixtureRequest) -> None:
    """Every test in tests/views passes, run in its own pytest (same profile)."""
    if background.asked_for(request.config, VIEWS):
        pytest.skip("tests/views runs inline in this session")
    result = background.result("views")
    assert result.returncode == 0, result.tail()
    summary = result.stdout.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None, result.tail()
    assert int(passed.group(1)) >= 20, summary  # the whole directory ran, not a stray file

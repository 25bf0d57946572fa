"""docs/views.md shows what the code renders (regenerate: python tests/views/doc_examples.py)."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings

from agent_memory.contract_tests.view_strategies import agent_memory_inputs, view_facts
from agent_memory.domain.views import Fact, render_agent_memory
from views.doc_examples import DOC, EXAMPLES, block_names, regenerate


def test_every_view_has_an_example_block() -> None:
    assert sorted(block_names(DOC.read_text(encoding="utf-8"))) == sorted(EXAMPLES)


def test_doc_examples_are_current() -> None:
    doc = DOC.read_text(encoding="utf-8")
    for name, render in EXAMPLES.items():
        assert f"<!-- example: {name} -->\n```text\n{render()}\n```" in doc, (
            f"docs/views.md is stale for {name}: run `python tests/views/doc_examples.py`"
        )
    assert regenerate(doc) == doc


def test_the_strategy_example_runs() -> None:
    """The property test shown under "Testing your own budgets" runs and passes
    (its strategies draw what the table says)."""
    blocks = re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.S | re.M)
    assert len(blocks) == 1, blocks
    scope: dict[str, Any] = {}
    exec(compile(blocks[0], str(DOC), "exec"), scope)
    scope["test_profile_fits"]()


@settings(max_examples=10)
@given(fact=view_facts(), kwargs=agent_memory_inputs())
def test_the_strategy_table_is_true(fact: object, kwargs: dict[str, Any]) -> None:
    """`view_facts()` draws one Fact, and `agent_memory_inputs()` already holds
    `budget_bytes`, as the table in docs/views.md says."""
    assert isinstance(fact, Fact)
    assert "budget_bytes" in kwargs
    assert isinstance(render_agent_memory(**kwargs).report.budget_bytes, int)

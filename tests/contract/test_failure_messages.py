"""The shape of the contract suite's failure messages: clause id first, then the
rule, then what was wanted and what was got, labelled; a failure that names no
clause is attributed to its test's clause and rule."""

from __future__ import annotations

import importlib
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agent_memory.contract_tests  # noqa: F401  (loads the contract modules)
from agent_memory.contract_tests import _support
from agent_memory.contract_tests._support import (
    CLAUSE_IN_TEXT,
    Shown,
    attribute_failure,
    clause,
    clause_rules,
    outcome,
)
from agent_memory.domain.errors import DuplicateRecord

_MODULES = ("memory_store", "event_log", "lease_store", "cache", "triple_store")
_ID = re.compile(r"""["']((?:MS|EL|LS|C|TS)-[A-Z]+-[0-9]+)["']""")


def test_a_comparison_is_labelled() -> None:
    assert clause("MS-DEL-4", "delete_scope returns the count", 18, want=12) == (
        "[MS-DEL-4] delete_scope returns the count; wanted 12; got 18"
    )
    assert clause("X-Y-1", "r", None, want=1) == "[X-Y-1] r; wanted 1; got None"
    assert clause("X-Y-1", "r", 2, want=1, detail=["a", "b"]) == (
        "[X-Y-1] r; wanted 1; got 2: ['a', 'b']"
    )
    assert clause("X-Y-1", "r", 3, want=Shown("> 3")) == "[X-Y-1] r; wanted > 3; got 3"
    assert clause("X-Y-1", "r", "seen") == "[X-Y-1] r; got 'seen'"
    assert clause("X-Y-1", "r") == "[X-Y-1] r"


@given(
    st.from_regex(r"[A-Z]{1,4}-[A-Z]{1,6}-[0-9]{1,2}", fullmatch=True),
    st.text(),
    st.integers(),
    st.integers(),
)
def test_clause_id_first_then_wanted_then_got(cid: str, rule: str, got: int, want: int) -> None:
    """Property: whatever the values, the message starts with the clause id and
    labels `wanted` before `got`, each with the value's repr."""
    text = clause(cid, rule, got, want=want)
    head = CLAUSE_IN_TEXT.match(text)
    assert head is not None
    assert head.group(1) == cid
    assert text.endswith(f"; wanted {want!r}; got {got!r}")


def test_outcome_shows_the_error_or_the_result() -> None:
    assert repr(outcome(DuplicateRecord("o", ("a",)))).startswith("DuplicateRecord: ")
    assert repr(outcome(None, [1])) == "no error, returned [1]"


@pytest.mark.parametrize("name", _MODULES)
def test_every_asserted_clause_has_a_rule_in_its_module(name: str) -> None:
    """When this fails, a contract module asserts a clause id its docstring does
    not list: an adapter exception inside that clause could not show the rule."""
    module = importlib.import_module(f"agent_memory.contract_tests.{name}")
    rules = clause_rules(module.__doc__)
    with open(module.__file__ or "", encoding="utf-8") as f:
        used = set(_ID.findall(f.read()))
    assert used, name
    assert used <= set(rules), sorted(used - set(rules))
    assert all(rules[c] and "\n" not in rules[c] for c in used)


def test_an_unattributed_failure_gets_the_clause_and_rule() -> None:
    from agent_memory.contract_tests.memory_store import MemoryStoreContract

    test = MemoryStoreContract.test_search_orders_by_cosine_score
    got = attribute_failure(test, "IndexError: list index out of range")
    assert got == (
        "[MS-SEARCH-1] results are ordered by score descending; "
        "raised IndexError: list index out of range"
    )
    bare = attribute_failure(test, "AssertionError: assert 1 == 2")
    assert bare is not None
    assert bare.startswith("[MS-SEARCH-1] results are ordered by score")
    assert "; got AssertionError: assert 1 == 2" in bare
    named = "AssertionError: [MS-SEARCH-2] scores lie in [-1, 1]; wanted in [-1, 1]; got 2.0"
    assert attribute_failure(test, named) is None
    assert _support.primary_clauses(test)[0] == "MS-SEARCH-1"

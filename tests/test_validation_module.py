"""`agent_memory.validation`, the one import an adapter author needs for the
argument checks: the very functions the built-in adapters call (so the typed
errors are the same), importable on the base install."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agent_memory.validation as public
from agent_memory.adapters._common import validation as adapter_checks
from agent_memory.domain import errors, records
from agent_memory.domain import validation as domain_checks

ROOT = Path(__file__).resolve().parents[1]


def test_every_export_is_the_function_the_adapters_use() -> None:
    """When this fails, a name of `agent_memory.validation` is a copy (or is
    missing): it must be the same object the built-in adapters import, so a
    third-party adapter raises exactly their errors."""
    assert sorted(public.__all__) == sorted(set(public.__all__)), "duplicate names"
    for name in adapter_checks.__all__:
        assert getattr(public, name) is getattr(adapter_checks, name), name
    wanted = {
        "MAX_ID_BYTES", "MAX_LIMIT", "MAX_TTL", "MAX_QUERY_BYTES", "MAX_QUERY_WORD_BYTES",
        "require_scope", "require_id", "require_no_nul", "require_text", "require_utc",
        "require_limit", "require_ttl", "require_positive", "as_vector",
    }  # fmt: skip
    for name in wanted:
        assert getattr(public, name) is getattr(domain_checks, name), name
    assert public.require_dimension is records.require_dimension
    for name in ("InvalidInput", "ScopeRequired", "DimensionMismatch", "DuplicateRecord"):
        assert getattr(public, name) is getattr(errors, name), name
    assert set(public.__all__) >= set(adapter_checks.__all__) | wanted | {"require_dimension"}
    assert all(hasattr(public, name) for name in public.__all__)


def test_the_checks_raise_the_typed_errors() -> None:
    """When this fails, a re-exported check no longer raises the documented type."""
    with pytest.raises(public.ScopeRequired):
        public.require_scope("  ", "owner")
    with pytest.raises(public.InvalidInput, match=r"record\.id"):
        public.require_id("a\x00b", "record.id")
    with pytest.raises(public.InvalidInput, match="attributes"):
        public.require_no_nul({"k": ["ok", "x\x00"]}, "attributes")
    with pytest.raises(public.InvalidInput, match="limit"):
        public.require_limit(public.MAX_LIMIT + 1)
    with pytest.raises(public.InvalidInput, match="ttl"):
        public.require_ttl(timedelta(0))
    space = records.EmbeddingSpace(model="m", dimension=3)
    with pytest.raises(public.DimensionMismatch):
        public.require_dimension(space, np.zeros(4, dtype=np.float32))


@settings(max_examples=50)
@given(st.text(max_size=200))
def test_ids_over_the_bound_are_refused(text: str) -> None:
    """Property: `require_id` accepts exactly the non-blank, NUL-free texts of at
    most MAX_ID_BYTES bytes of UTF-8 (surrogate-free), else raises InvalidInput."""
    padded = text * 4  # most examples cross the bound once repeated
    for value in (text, padded):
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            size = -1
        ok = value.strip() != "" and "\x00" not in value and 0 <= size <= public.MAX_ID_BYTES
        if ok:
            assert public.require_id(value, "id") == value
        else:
            with pytest.raises(public.InvalidInput):
                public.require_id(value, "id")


def test_importable_on_the_base_install() -> None:
    """When this fails, `agent_memory.validation` pulls in pytest, hypothesis or a
    backend driver: an adapter author must get the checks from the base install."""
    code = (
        "import sys\n"
        "BLOCKED = ('pytest', '_pytest', 'pytest_asyncio', 'hypothesis', 'redis',\n"
        "           'psycopg', 'psycopg_pool', 'qdrant_client', 'pymilvus', 'nats')\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Block())\n"
        "from agent_memory.validation import *\n"
        "import agent_memory.validation as v\n"
        "assert len(v.__all__) > 30\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in BLOCKED]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def _nested(depth: int, leaf: object = 1, in_list: bool = False) -> object:
    value = leaf
    for _ in range(depth):
        value = [value] if in_list else {"k": value}
    return value


@settings(max_examples=40, deadline=None)
@given(depth=st.integers(1, 3000), in_list=st.booleans())
def test_json_nesting_past_the_bound_is_invalid_input_never_a_recursion_error(
    depth: int, in_list: bool
) -> None:
    """Property: attributes, metadata and LangGraph values nest at most
    MAX_JSON_DEPTH levels (a flat mapping is 1); deeper is an `InvalidInput`
    naming the field, never a `RecursionError` from `json.dumps` (which came
    at about 1,000 levels)."""
    value = {"v": _nested(depth - 1, in_list=in_list)}
    if depth <= public.MAX_JSON_DEPTH:
        assert domain_checks.require_json_mapping(value, "record.attributes") == value
        return
    with pytest.raises(public.InvalidInput, match=r"record\.attributes.*MAX_JSON_DEPTH"):
        domain_checks.require_json_mapping(value, "record.attributes")
    with pytest.raises(public.InvalidInput, match=r"event\.metadata"):
        records.Event(
            id="e", domain="d", agent="a", action="x", outcome="ok", summary="s",
            occurred_at=datetime.now(UTC), recorded_at=datetime.now(UTC), metadata=value,
        )  # fmt: skip


def _doubling(levels: int) -> list[object]:
    """A list holding the one below it twice, `levels` times: 2 ** levels leaves
    in its JSON, from `levels` lists in memory."""
    value: list[object] = [1]
    for _ in range(levels):
        value = [value, value]
    return value


def _json_count(value: object) -> int:
    """The values `value`'s JSON holds, counted on the JSON itself."""
    decoded = json.loads(json.dumps(value))
    count, stack = 0, [decoded]
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            count += len(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def test_a_value_whose_json_expands_past_the_bound_is_refused_at_once() -> None:
    """Sharing is free in memory and not in JSON: 24 levels of a list holding the
    one below twice is 2 ** 24 leaves once serialised. It used to be accepted
    after about 40 s of `json.dumps` (2 ** 30: hours, GBs); now every JSON field
    refuses it, naming itself and MAX_JSON_VALUES, before serialising."""
    value = {"v": _doubling(24)}
    start = time.perf_counter()
    with pytest.raises(public.InvalidInput, match=r"record\.attributes.*MAX_JSON_VALUES"):
        domain_checks.require_json_mapping(value, "record.attributes")
    with pytest.raises(public.InvalidInput, match=r"event\.metadata.*MAX_JSON_VALUES"):
        records.Event(
            id="e", domain="d", agent="a", action="x", outcome="ok", summary="s",
            occurred_at=datetime.now(UTC), recorded_at=datetime.now(UTC), metadata=value,
        )  # fmt: skip
    with pytest.raises(public.InvalidInput, match=r"MAX_JSON_VALUES"):
        domain_checks.require_json_mapping({"v": _doubling(60)}, "value")
    assert time.perf_counter() - start < 5, "refused only after serialising"
    # a flat list past the bound: refused as soon as the count passes it
    with pytest.raises(public.InvalidInput, match="MAX_JSON_VALUES"):
        domain_checks.require_json_mapping({"v": [0] * public.MAX_JSON_VALUES}, "x")


def test_the_bound_counts_what_the_json_holds_exactly() -> None:
    """At MAX_JSON_VALUES a shared value passes, one more value does not: the
    count is the JSON's, a shared list once per place (checked on the walk
    alone; serialising ten million values is the caller's cost)."""
    inner: list[object] = [0] * 9_999  # 10,000 values
    outer = [inner] * 999  # 1 + 999 * 10,000 = 9,990,001
    rest = public.MAX_JSON_VALUES - 1 - 2 - 9_990_001 - 1  # root, keys "v" "w", list "w"
    at_bound = {"v": outer, "w": [0] * rest}
    domain_checks._require_shape(at_bound, "x")
    assert domain_checks._expanded_size(at_bound, 2**62) == public.MAX_JSON_VALUES
    over = {"v": outer, "w": [0] * (rest + 1)}
    with pytest.raises(public.InvalidInput, match="MAX_JSON_VALUES"):
        domain_checks._require_shape(over, "x")


@st.composite
def _shared_values(draw: st.DrawFn) -> dict[str, object]:
    """Small JSON values whose containers may appear in several places."""
    pool: list[object] = []
    for _ in range(draw(st.integers(1, 12))):
        size = draw(st.integers(0, 4))
        picks = [
            draw(st.sampled_from(pool)) if pool and draw(st.booleans()) else draw(st.integers())
            for _ in range(size)
        ]
        pool.append({f"k{i}": v for i, v in enumerate(picks)} if draw(st.booleans()) else picks)
    return {"v": pool[-1], "w": draw(st.sampled_from(pool))}


@settings(max_examples=200, deadline=None)
@given(_shared_values())
def test_the_count_is_the_json_count_for_any_sharing(value: dict[str, object]) -> None:
    """Property: the count the bound is checked on is the number of values of
    the value's JSON (scalars, containers, keys), whatever is shared, and such a
    value below the bound is accepted unchanged."""
    assert domain_checks._expanded_size(value, 2**62) == _json_count(value)
    assert domain_checks.require_json_mapping(value, "x") == value


def test_a_shared_or_circular_container_is_refused_cleanly() -> None:
    loop: dict[str, object] = {}
    loop["self"] = loop
    with pytest.raises(public.InvalidInput, match=r"record\.attributes"):
        domain_checks.require_json_mapping(loop, "record.attributes")
    shared = _nested(60)
    ok = {"a": shared, "b": {"c": shared}}  # shared, 62 deep at most: accepted
    assert domain_checks.require_json_mapping(ok, "x") == ok
    deep = _nested(public.MAX_JSON_DEPTH - 3)
    over = {"a": deep, "b": {"c": {"d": {"e": deep}}}}  # shallow, then too deep
    rev = {"b": {"c": {"d": {"e": deep}}}, "a": deep}
    for value in (over, rev):
        with pytest.raises(public.InvalidInput, match="MAX_JSON_DEPTH"):
            domain_checks.require_json_mapping(value, "x")

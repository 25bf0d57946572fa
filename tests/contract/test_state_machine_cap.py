"""`MemoryStoreContract.state_machine_examples` caps the state machine's examples."""

from __future__ import annotations

from typing import Any

import pytest

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.contract_tests import Capabilities, state_machine
from agent_memory.contract_tests.state_machine import run_against_oracle
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import EmbeddingSpace

SPACE = EmbeddingSpace(model="cap-test", dimension=4)


async def _examples(monkeypatch: pytest.MonkeyPatch, max_examples: int) -> int:
    """How many state machines (one per example) a run builds."""
    built = 0
    machine = state_machine._StoreVsOracle

    class Counting(machine):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            nonlocal built
            built += 1
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(state_machine, "_StoreVsOracle", Counting)
    store = InMemoryMemoryStore(SPACE)
    await run_against_oracle(store, Capabilities(keyword_search=True), max_examples=max_examples)
    await store.close()
    monkeypatch.setattr(state_machine, "_StoreVsOracle", machine)
    return built


async def test_the_cap_bounds_the_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    assert await _examples(monkeypatch, 1) == 1
    assert await _examples(monkeypatch, 3) == 3


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
async def test_a_bad_cap_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidInput, match="max_examples"):
        await run_against_oracle(InMemoryMemoryStore(SPACE), Capabilities(), max_examples=bad)

"""Proof that the TripleStore contract can fail: the shipped
`TripleStoreContract` runs (in one pytest subprocess) against each one-bug store
of `broken_triples` and against the genuine memory adapter (the control); each
test here asserts that the expected clause id is among the broken run's
failures and that the control passed."""

from __future__ import annotations

import textwrap

import pytest

from broken.harness import run_generated

#: broken store -> the clause the suite must name
BROKEN = {
    "PredicateDroppedTripleStore": "TS-Q-1",
    "TrimmedFilterTripleStore": "TS-Q-3",
    "OwnerlessKeyTripleStore": "TS-ISO-1",
    "LoopPrefixDeleteTripleStore": "TS-DEL-1",
    "TripleOrderLimitTripleStore": "TS-WALK-3",
    "CaseFoldNodeTripleStore": "TS-WALK-4",
    "SelfLoopTwiceTripleStore": "TS-WALK-2",
}

_HEADER = """
import pytest

from agent_memory.adapters.memory import InMemoryTripleStore, MemoryTripleBackend
from agent_memory.contract_tests import Capabilities, TripleStoreContract
from broken.broken_triples import {broken}
"""

_CLASS = """
class Test{adapter}(TripleStoreContract):
    capabilities = Capabilities(reopen=True)

    @pytest.fixture
    def backend(self):
        return MemoryTripleBackend()

    @pytest.fixture
    async def triples(self, backend):
        store = {adapter}(backend)
        yield store
        await store.close()

    @pytest.fixture
    def reopen(self, backend):
        async def _open():
            return {adapter}(backend)

        return _open
"""


def _source() -> str:
    parts = [_HEADER.format(broken=", ".join(sorted(BROKEN)))]
    parts += [_CLASS.format(adapter=name) for name in [*BROKEN, "InMemoryTripleStore"]]
    return "\n".join(textwrap.dedent(p) for p in parts)


@pytest.fixture(scope="module")
def failures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    # Property tests are left out: every bug here is caught by an example-based
    # clause, whatever hypothesis would draw.
    work = tmp_path_factory.mktemp("broken-triples")
    return run_generated(work, "generated_broken_triples", _source(), "not oracle")


def test_control_passes(failures: dict[str, list[str]]) -> None:
    """When this fails, the harness is broken: the genuine adapter must pass."""
    assert not failures.get("InMemoryTripleStore"), "\n".join(failures["InMemoryTripleStore"])


@pytest.mark.parametrize("adapter", sorted(BROKEN))
def test_broken_triple_store_is_caught(failures: dict[str, list[str]], adapter: str) -> None:
    """When this fails, the contract no longer catches this bug: the clause named
    in BROKEN must appear among the broken store's failures."""
    cid = BROKEN[adapter]
    lines = failures.get(adapter, [])
    assert lines, f"{adapter}: the contract passed a broken triple store"
    assert any(f"[{cid}]" in line for line in lines), (
        f"{adapter}: no failure names [{cid}]:\n" + "\n".join(lines)
    )

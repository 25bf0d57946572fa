"""What an adapter declares it can do, and the shape of a conformance factory.

Here, not in `agent_memory.contract_tests`, so that a production module can
declare its `Capabilities` on the base install (the contract suite needs the
`conformance` extra: pytest, pytest-asyncio, hypothesis). A contract test for
an undeclared capability skips with the reason; a declared capability the
adapter does not honour fails.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from attrs import frozen

__all__ = ["Capabilities", "ConformanceFactory"]


@frozen
class Capabilities:
    """One frozen value per adapter under test.

    - `atomic_batches`: a batch add with a duplicate id writes nothing of the batch.
    - `concurrent_duplicate_rejection`: of two concurrent adds of one id, exactly
      one succeeds (a read-then-write backend cannot promise this).
    - `reopen`: the contract class provides a `reopen` fixture that opens a second
      handle on the same data (needed to prove a write racing close is not
      persisted after close).
    - `keyword_search`: the store implements `KeywordSearch.search_text`.
    - `versioned_writes`: the store implements `VersionedWrites` (a store that
      implements it without declaring it is checked too; declaring it makes its
      absence a failure instead of a skip).
    - `ttl_resolution_ms`: the smallest TTL the backend honours precisely;
      TTL tests scale their sleeps to it.
    """

    atomic_batches: bool = True
    concurrent_duplicate_rejection: bool = True
    reopen: bool = True
    keyword_search: bool = False
    versioned_writes: bool = False
    ttl_resolution_ms: int = 50


@runtime_checkable
class ConformanceFactory(Protocol):
    """What `agent-memory conformance --factory module:name` loads.

    Called once per test (and once for the preflight), it returns EMPTY stores:
    one port object, or a mapping with any of the keys `store`, `events`,
    `leases`, `cache`, `audit` (each port returned is claimed and must be
    proven; an `AuditLog` is claimed by its `audit` key only, and with `events`
    and `store` of the same deployment beside it the audit log's erasure
    clauses run through them); it may be async. Optional attributes, read with
    `getattr`: `capabilities` (one `Capabilities`, or a mapping port ->
    `Capabilities`, keyed like the mapping) and `reopen(obj)`, returning (or
    awaiting to) a second handle on the data of `obj`. The run calls only these and each object's
    `close()`: removing what the objects created is the factory's job.
    """

    def __call__(self) -> Any: ...

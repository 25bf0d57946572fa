"""What an adapter declares it can do. A test for an undeclared capability skips
with the reason; a declared capability the adapter does not honour fails."""

from __future__ import annotations

from attrs import frozen

__all__ = ["Capabilities"]


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
    - `ttl_resolution_ms`: the smallest TTL the backend honours precisely;
      TTL tests scale their sleeps to it.
    """

    atomic_batches: bool = True
    concurrent_duplicate_rejection: bool = True
    reopen: bool = True
    keyword_search: bool = False
    ttl_resolution_ms: int = 50

"""In-process `TripleStore`: the reference behaviour every backend must match."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.domain.triples import (
    Triple,
    WalkStep,
    check_filters,
    check_triples,
    order_triples,
    require_hops,
    require_limit,
    require_node,
    walk,
)
from agent_memory.domain.validation import require_scope

__all__ = ["InMemoryTripleStore", "MemoryTripleBackend"]

_Key = tuple[str, str, str, str, str]


class MemoryTripleBackend:
    """Shared state: triples by key, insertion-ordered."""

    def __init__(self) -> None:
        self.triples: dict[_Key, Triple] = {}


class InMemoryTripleStore:
    """`TripleStore` in process (a handle on a `MemoryTripleBackend`)."""

    def __init__(self, backend: MemoryTripleBackend | None = None) -> None:
        self._backend = backend if backend is not None else MemoryTripleBackend()
        self._life = Lifecycle("memory triple store")

    @property
    def backend(self) -> MemoryTripleBackend:
        return self._backend

    async def add(self, triples: Sequence[Triple]) -> int:
        async with self._life.op():
            batch = check_triples(triples)
            added = 0
            for t in batch:
                if t.key not in self._backend.triples:
                    self._backend.triples[t.key] = t
                    added += 1
            return added

    def _scoped(self, owner: str, loop: str | None) -> Iterable[Triple]:
        return (
            t
            for t in self._backend.triples.values()
            if t.owner == owner and (loop is None or t.loop == loop)
        )

    async def query(
        self,
        owner: str,
        *,
        loop: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,
        limit: int = 100,
    ) -> list[Triple]:
        async with self._life.op():
            check_filters(
                owner, loop=loop, subject=subject, predicate=predicate, object_=object, limit=limit
            )
            hits = [
                t
                for t in self._scoped(owner, loop)
                if (subject is None or t.subject == subject)
                and (predicate is None or t.predicate == predicate)
                and (object is None or t.object == object)
            ]
            return order_triples(hits)[:limit]

    async def neighbours(
        self, owner: str, node: str, *, hops: int = 1, loop: str | None = None, limit: int = 100
    ) -> list[WalkStep]:
        async with self._life.op():
            check_filters(owner, loop=loop, limit=limit)
            require_node(node)
            require_hops(hops)
            require_limit(limit)
            scoped = list(self._scoped(owner, loop))

            def edges_of(frontier: frozenset[str]) -> list[Triple]:
                return [t for t in scoped if t.subject in frontier or t.object in frontier]

            return walk(node, hops, limit, edges_of)

    async def delete_scope(self, owner: str, *, loop: str | None = None) -> int:
        async with self._life.op():
            require_scope(owner, "owner")
            if loop is not None:
                require_scope(loop, "loop")
            doomed = [t.key for t in self._scoped(owner, loop)]
            for key in doomed:
                del self._backend.triples[key]
            return len(doomed)

    async def owners(self) -> list[str]:
        """Every owner with a stored triple, sorted (`OwnerListing`)."""
        self._life.check()
        return sorted({t.owner for t in self._backend.triples.values()})

    async def ping(self) -> None:
        self._life.check()

    async def close(self) -> None:
        await self._life.begin_close()

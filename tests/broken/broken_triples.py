"""TripleStores with exactly one bug each, to prove the TS-* clauses can fail
(`test_broken_triple_stores.py`). Each is the in-process adapter with one
method changed."""

from __future__ import annotations

from collections.abc import Sequence

from agent_memory.adapters.memory import InMemoryTripleStore
from agent_memory.domain.triples import (
    Triple,
    WalkStep,
    check_filters,
    check_triples,
    order_triples,
    require_hops,
    triple_sort_key,
    walk,
    walk_order_key,
)
from agent_memory.domain.validation import require_scope, require_text

__all__ = [
    "CaseFoldNodeTripleStore",
    "LoopPrefixDeleteTripleStore",
    "OwnerlessKeyTripleStore",
    "PredicateDroppedTripleStore",
    "SelfLoopTwiceTripleStore",
    "TrimmedFilterTripleStore",
    "TripleOrderLimitTripleStore",
]

_BIG = 10_000


class PredicateDroppedTripleStore(InMemoryTripleStore):
    """TS-Q-1: with subject and object both given the predicate filter is
    dropped (the (subject, object) index path forgets it)."""

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
        if subject is not None and object is not None:
            check_filters(
                owner, loop=loop, subject=subject, predicate=predicate, object_=object, limit=limit
            )
            predicate = None
        return await super().query(
            owner, loop=loop, subject=subject, predicate=predicate, object=object, limit=limit
        )


class TrimmedFilterTripleStore(InMemoryTripleStore):
    """TS-Q-3: query filters and the stored terms are compared trimmed
    (`TRIM(subject) = TRIM(?)`)."""

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

            def same(want: str | None, got: str) -> bool:
                return want is None or want.strip() == got.strip()

            hits = [
                t
                for t in self._scoped(owner, loop)
                if same(subject, t.subject)
                and same(predicate, t.predicate)
                and same(object, t.object)
            ]
            return order_triples(hits)[:limit]


class OwnerlessKeyTripleStore(InMemoryTripleStore):
    """TS-ISO-1: the unique key leaves the owner out (loop, subject, predicate,
    object), so a fact another owner stored in the same loop is not stored."""

    async def add(self, triples: Sequence[Triple]) -> int:
        async with self._life.op():
            batch = check_triples(triples)
            taken = {t.key[1:] for t in self._backend.triples.values()}
            added = 0
            for t in batch:
                if t.key[1:] not in taken:
                    taken.add(t.key[1:])
                    self._backend.triples[t.key] = t
                    added += 1
            return added


class LoopPrefixDeleteTripleStore(InMemoryTripleStore):
    """TS-DEL-1: delete_scope matches the loop as a prefix (`loop LIKE ? || '%'`),
    so deleting loop `l1` deletes loop `l10` too."""

    async def delete_scope(self, owner: str, *, loop: str | None = None) -> int:
        async with self._life.op():
            require_scope(owner, "owner")
            if loop is not None:
                require_scope(loop, "loop")
            doomed = [
                t.key
                for t in self._backend.triples.values()
                if t.owner == owner and (loop is None or t.loop.startswith(loop))
            ]
            for key in doomed:
                del self._backend.triples[key]
            return len(doomed)


class TripleOrderLimitTripleStore(InMemoryTripleStore):
    """TS-WALK-3: the walk's `limit` is applied in triple order (`ORDER BY
    created_at DESC ... LIMIT n` over every reachable triple) before sorting by
    distance, so far triples push near ones out."""

    async def neighbours(
        self, owner: str, node: str, *, hops: int = 1, loop: str | None = None, limit: int = 100
    ) -> list[WalkStep]:
        check_filters(owner, loop=loop, limit=limit)
        every = await super().neighbours(owner, node, hops=hops, loop=loop, limit=_BIG)
        cut = sorted(every, key=lambda s: triple_sort_key(s.triple))[:limit]
        return sorted(cut, key=walk_order_key)


class CaseFoldNodeTripleStore(InMemoryTripleStore):
    """TS-WALK-4: the walk matches nodes case-insensitively (`LOWER(subject) IN
    (...)`, a case-insensitive collation)."""

    async def neighbours(
        self, owner: str, node: str, *, hops: int = 1, loop: str | None = None, limit: int = 100
    ) -> list[WalkStep]:
        async with self._life.op():
            check_filters(owner, loop=loop, limit=limit)
            require_text(node, "node")
            require_hops(hops)
            scoped = list(self._scoped(owner, loop))

            def edges_of(frontier: frozenset[str]) -> list[Triple]:
                low = {f.casefold() for f in frontier}
                return [
                    t for t in scoped if t.subject.casefold() in low or t.object.casefold() in low
                ]

            return walk(node, hops, limit, edges_of)


class SelfLoopTwiceTripleStore(InMemoryTripleStore):
    """TS-WALK-2: a self-loop (subject == object) is listed twice, once per end
    (a UNION ALL of the subject and the object lookups)."""

    async def neighbours(
        self, owner: str, node: str, *, hops: int = 1, loop: str | None = None, limit: int = 100
    ) -> list[WalkStep]:
        steps = await super().neighbours(owner, node, hops=hops, loop=loop, limit=limit)
        out: list[WalkStep] = []
        for step in steps:
            out.append(step)
            if step.triple.subject == step.triple.object:
                out.append(step)
        return out[:limit]

"""`TripleStoreContract`: the conformance suite every `TripleStore` backend must pass.

Subclass it, declare `capabilities`, and override the `triples` fixture (yield
an EMPTY store; clean up after the yield). With `Capabilities(reopen=True)`
also override `reopen` (an async zero-argument callable opening a SECOND
handle on the same data; the suite closes it)::

    class TestAcmeTriples(TripleStoreContract):
        @pytest_asyncio.fixture  # or @pytest.fixture under asyncio_mode = "auto"
        async def triples(self):
            store = AcmeTripleStore(...)
            yield store
            await store.close()

The in-memory adapter is the oracle: the property test replays random graphs
on both and compares every answer.

Clause ids (each assertion message starts with one):

- TS-ADD-1    add returns the number of triples newly stored; adding a stored
              triple again returns 0 and keeps its first source and created_at.
- TS-ADD-2    a triple repeated inside one batch is stored (and counted) once.
- TS-RT-1     every field reads back unchanged: adversarial text, microsecond
              timestamps, empty source.
- TS-Q-1      query filters by subject, predicate and object (exact match, all
              given filters at once, in every combination: no filter is dropped
              because another is given); no filter returns every triple of the
              owner.
- TS-Q-2      results are newest first (to the microsecond), then loop, subject,
              predicate, object ascending by code point; `limit` cuts after
              ordering.
- TS-Q-3      `% _ * ? [ \\`, case, spaces and Unicode forms in a filter are
              literal: no pattern widening, trimming or normalisation.
- TS-ISO-1    owners are isolated (the owner is part of a triple's identity: one
              fact in one loop under two owners is two triples); `loop` narrows
              to one loop, `loop=None` spans all.
- TS-WALK-1   neighbours(hops=1) returns the triples touching the node in either
              direction, at distance 1.
- TS-WALK-2   hops=k reaches further, each triple once at its smallest distance
              (a self-loop too), ordered by distance then triple order; cycles
              terminate.
- TS-WALK-3   neighbours honours `loop` and `limit` (the limit keeps the first
              steps of the walk order: nearest first); an unknown node walks to [].
- TS-WALK-4   the start node is matched exactly: a node differing by case, spaces,
              Unicode form or holding pattern characters is another node.
- TS-DEL-1    delete_scope deletes exactly the owner's triples (of one loop when
              given, matched exactly: loop `l1` never deletes loop `l10`) and
              returns their count (0 when none).
- TS-SCOPE-1  an empty or whitespace-only owner or loop raises `ScopeRequired`.
- TS-INPUT-1  a non-Triple in a batch, a non-positive limit or hops raise
              `InvalidInput`, and nothing of the batch is stored.
- TS-INPUT-2  a triple whose owner, loop, subject, predicate and object are each
              exactly MAX_ID_BYTES bytes of UTF-8 (incompressible, multi-byte)
              is stored, queried by every field, walked and deleted; one byte
              over in any of them raises InvalidInput naming the field, its size
              and the maximum (also in the owner/loop of every operation), and
              nothing of the batch is stored.
- TS-ORACLE-1 property: on random graphs, query and neighbours answer exactly
              like the in-memory oracle.
- TS-CLOSE-1  after close every operation raises `StoreClosed`; close is idempotent.
- TS-SHARED-1 a second handle sees the first one's triples. Needs `reopen`.
- TS-OWN-1    (when the store implements `OwnerListing`) `owners()` lists every
              owner with a triple, once, sorted by code point.
- TS-CANARY-1 the fixture yields an empty store: nothing written by an earlier
              test is visible.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, ClassVar

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_memory.adapters.memory.triples import InMemoryTripleStore
from agent_memory.contract_tests._support import (
    BASE_TIME,
    clause,
    expect_raises,
    expect_too_long,
    mark_async_tests,
    max_id,
    property_settings,
    require_capability,
)
from agent_memory.contract_tests.capabilities import Capabilities
from agent_memory.domain.errors import InvalidInput, ScopeRequired, StoreClosed
from agent_memory.domain.triples import Triple, WalkStep, triple_sort_key
from agent_memory.ports.storage import OwnerListing, TripleStore

__all__ = ["TripleStoreContract"]

ReopenTriples = Callable[[], Awaitable[TripleStore]]

CANARY_OWNER = "agent-memory-contract-canary"
_PROPERTY = property_settings(max_examples=20, port="triples")
_ADVERSARIAL = [
    "a%",
    "a_",
    "*",
    "?",
    "[x]",
    "\\",
    "'; DROP TABLE triples; --",
    "Ünïcødé ✓",
    "日本語",
    "emoji 🧠",
    "tab\tnew\nline",
    " padded ",
    "A",
    "a",
]


def _t(
    subject: str,
    predicate: str,
    obj: str,
    *,
    owner: str = "o",
    loop: str = "l",
    at: int = 0,
    source: str = "",
) -> Triple:
    return Triple(
        owner=owner,
        loop=loop,
        subject=subject,
        predicate=predicate,
        object=obj,
        created_at=BASE_TIME + timedelta(seconds=at),
        source=source,
    )


def _spo(triples: list[Triple]) -> list[tuple[str, str, str]]:
    return [(t.subject, t.predicate, t.object) for t in triples]


def _steps(steps: list[WalkStep]) -> list[tuple[int, str, str, str]]:
    return [(s.distance, s.triple.subject, s.triple.predicate, s.triple.object) for s in steps]


_node = st.sampled_from(["a", "b", "c", "d", "e", "f", "a%", "B"])
_pred = st.sampled_from(["p", "q", "r_"])
_edge = st.tuples(
    _node, _pred, _node, st.sampled_from(["l1", "l2"]), st.integers(min_value=0, max_value=3)
)


@mark_async_tests
class TripleStoreContract:
    """Conformance tests for `TripleStore`; override `triples` (and `reopen`)."""

    capabilities: ClassVar[Capabilities] = Capabilities()

    @pytest.fixture  # sync: its failure shows in strict and auto mode alike
    def triples(self) -> TripleStore:
        """Override: yield an EMPTY TripleStore, close/clean it after the yield."""
        pytest.fail("TripleStoreContract: override the `triples` fixture in your subclass")

    @pytest.fixture
    def reopen(self) -> ReopenTriples | None:
        """Override when `capabilities.reopen`: an async callable opening a second
        handle on the same data as `triples`."""
        return None

    # -- canary (first) --------------------------------------------------------

    async def test_canary_write(self, triples: TripleStore) -> None:
        """Writes under a well-known owner for the last test to look for.

        When this fails, check that add/query work at all (TS-ADD-1, TS-Q-1).
        """
        added = await triples.add([_t("canary", "is", "here", owner=CANARY_OWNER)])
        assert added == 1, clause("TS-CANARY-1", "the canary triple is stored", added, want=1)

    # -- add -------------------------------------------------------------------

    async def test_add_counts_new(self, triples: TripleStore) -> None:
        """add returns how many triples were new; a repeat keeps the first version.

        When this fails, check the uniqueness key: (owner, loop, subject, predicate,
        object) -- insert-if-absent, never an upsert of source/created_at.
        """
        first = await triples.add([_t("s", "p", "o", source="first"), _t("s", "p", "o2")])
        assert first == 2, clause("TS-ADD-1", "two new triples count 2", first, want=2)
        again = await triples.add([_t("s", "p", "o", at=5, source="second")])
        assert again == 0, clause("TS-ADD-1", "a stored triple counts 0", again, want=0)
        got = await triples.query("o", subject="s", object="o")
        assert [(t.source, t.created_at) for t in got] == [("first", BASE_TIME)], clause(
            "TS-ADD-1",
            "the first source and created_at are kept",
            [(t.source, t.created_at) for t in got],
            want=[("first", BASE_TIME)],
            detail=got,
        )

    async def test_add_same_in_batch(self, triples: TripleStore) -> None:
        """A triple twice in one batch is stored and counted once.

        When this fails, check duplicate handling inside one write (ON CONFLICT
        DO NOTHING, or a de-duplicated batch).
        """
        added = await triples.add([_t("s", "p", "o"), _t("s", "p", "o", source="x")])
        assert added == 1, clause("TS-ADD-2", "a repeat inside a batch counts once", added, want=1)
        got = await triples.query("o")
        assert len(got) == 1, clause("TS-ADD-2", "it is stored once", len(got), want=1, detail=got)

    async def test_same_fact_other_loop_is_new(self, triples: TripleStore) -> None:
        """The loop is part of the identity: one fact in two loops is two triples.

        When this fails, check that the loop column is in the unique key.
        """
        added = await triples.add([_t("s", "p", "o", loop="l1"), _t("s", "p", "o", loop="l2")])
        assert added == 2, clause("TS-ADD-1", "one fact in two loops is two triples", added, want=2)

    # -- round trip ------------------------------------------------------------

    @pytest.mark.parametrize("text", _ADVERSARIAL)
    async def test_round_trip(self, triples: TripleStore, text: str) -> None:
        """Every field reads back unchanged.

        When this fails, check text encoding and timestamp precision (microseconds,
        UTC).
        """
        t = Triple(
            owner=f"owner {text}",
            loop=f"loop {text}",
            subject=text,
            predicate=f"p {text}",
            object=f"{text} o",
            created_at=BASE_TIME + timedelta(microseconds=123_457),
            source=text,
        )
        await triples.add([t])
        got = await triples.query(t.owner, loop=t.loop, subject=text)
        assert got == [t], clause("TS-RT-1", "the triple reads back unchanged", got, want=[t])

    # -- query -----------------------------------------------------------------

    async def test_query_filters(self, triples: TripleStore) -> None:
        """Filters by subject, predicate and object, all at once.

        When this fails, check that every given filter is applied (AND) and that
        None means 'any'.
        """
        await triples.add(
            [
                _t("alice", "knows", "bob", at=3),
                _t("alice", "likes", "tea", at=2),
                _t("bob", "knows", "carol", at=1),
                _t("carol", "likes", "bob", at=0),
            ]
        )
        by_subject = _spo(await triples.query("o", subject="alice"))
        assert by_subject == [("alice", "knows", "bob"), ("alice", "likes", "tea")], clause(
            "TS-Q-1",
            "query by subject",
            by_subject,
            want=[("alice", "knows", "bob"), ("alice", "likes", "tea")],
        )
        by_object = _spo(await triples.query("o", object="bob"))
        assert by_object == [("alice", "knows", "bob"), ("carol", "likes", "bob")], clause(
            "TS-Q-1",
            "query by object",
            by_object,
            want=[("alice", "knows", "bob"), ("carol", "likes", "bob")],
        )
        both = _spo(await triples.query("o", predicate="likes", object="bob"))
        assert both == [("carol", "likes", "bob")], clause(
            "TS-Q-1", "filters combine", both, want=[("carol", "likes", "bob")]
        )
        everything = await triples.query("o")
        assert len(everything) == 4, clause(
            "TS-Q-1", "no filter: all", len(everything), want=4, detail=everything
        )
        # Every combination of filters over a cube of facts: each given filter
        # applies, whichever others are given (no index path drops one).
        cube = [
            _t(s, p, o, owner="cube", at=i)
            for i, (s, p, o) in enumerate(itertools.product("xy", "pq", "mn"))
        ]
        await triples.add(cube)
        for s, p, o in itertools.product((None, "x"), (None, "q"), (None, "n")):
            want = _spo(
                sorted(
                    (
                        t
                        for t in cube
                        if s in (None, t.subject)
                        and p in (None, t.predicate)
                        and o in (None, t.object)
                    ),
                    key=triple_sort_key,
                )
            )
            got = _spo(await triples.query("cube", subject=s, predicate=p, object=o))
            assert got == want, clause(
                "TS-Q-1", f"query(subject={s!r}, predicate={p!r}, object={o!r})", got, want=want
            )

    async def test_query_order_and_limit(self, triples: TripleStore) -> None:
        """Newest first, then loop, subject, predicate, object ascending; limit after.

        When this fails, check the ORDER BY (created_at DESC, loop, subject,
        predicate, object -- binary/"C" collation, not locale order).
        """
        await triples.add(
            [
                _t("b", "p", "x", at=0),
                _t("a", "p", "x", at=0),
                _t("B", "p", "x", at=0),
                _t("a", "p", "x", at=0, loop="k"),
                _t("z", "p", "x", at=9),
                _t("a", "q", "x", at=0),
                _t("a", "p", "w", at=0),
                # one microsecond newer than the others at 0: ordered by the full
                # instant, not by a coarser key (seconds, milliseconds) that ties it
                # with them and lets its subject sort it last
                attrs.evolve(_t("zz", "p", "x"), created_at=BASE_TIME + timedelta(microseconds=1)),
            ]
        )
        got = [(t.loop, t.subject, t.predicate, t.object) for t in await triples.query("o")]
        expected = [
            ("l", "z", "p", "x"),
            ("l", "zz", "p", "x"),
            ("k", "a", "p", "x"),
            ("l", "B", "p", "x"),
            ("l", "a", "p", "w"),
            ("l", "a", "p", "x"),
            ("l", "a", "q", "x"),
            ("l", "b", "p", "x"),
        ]
        assert got == expected, clause("TS-Q-2", "triple order", got, want=expected)
        limited = [(t.loop, t.subject) for t in await triples.query("o", limit=3)]
        assert limited == [e[:2] for e in expected[:3]], clause(
            "TS-Q-2", "limit", limited, want=[e[:2] for e in expected[:3]]
        )

    @pytest.mark.parametrize(
        "pattern", ["a%", "a_", "*", "?", "[x]", "\\", "A", "a ", " a", "e\u0301", "\ufb01"]
    )
    async def test_filters_are_literal(self, triples: TripleStore, pattern: str) -> None:
        """Pattern characters, case, spaces and Unicode forms in a filter match
        literally.

        When this fails, check for LIKE/GLOB, case-folding, trimming or Unicode
        normalisation where `=` is meant.
        """
        stored = ["a%", "ab", "a_", "*", "?", "x", "\\", "a", "\u00e9", "fi"]
        await triples.add([_t(s, "p", "o") for s in stored])
        got = _spo(await triples.query("o", subject=pattern))
        expected = [(pattern, "p", "o")] if pattern in stored else []
        assert got == expected, clause(
            "TS-Q-3", f"subject={pattern!r} is literal", got, want=expected
        )

    # -- isolation -------------------------------------------------------------

    async def test_scopes_isolated(self, triples: TripleStore) -> None:
        """Owners never see each other; `loop` narrows, `loop=None` spans loops.

        When this fails, check the owner/loop conditions and key encoding (an owner
        "a:b" must not meet owner "a" loop "b:...").
        """
        added = await triples.add(
            [
                _t("s", "p", "o", owner="a", loop="b:c"),
                _t("s", "p", "o", owner="a:b", loop="c"),
                _t("s", "p", "o2", owner="a", loop="x"),
            ]
        )
        again = await triples.add([_t("s", "p", "o2", owner="a:b", loop="x")])
        assert (added, again) == (3, 1), clause(
            "TS-ISO-1",
            "one fact in one loop under another owner is a new triple",
            (added, again),
            want=(3, 1),
        )
        a_all = await triples.query("a")
        assert len(a_all) == 2, clause(
            "TS-ISO-1", "loop=None spans the owner's loops", len(a_all), want=2, detail=a_all
        )
        a_one = await triples.query("a", loop="b:c")
        assert _spo(a_one) == [("s", "p", "o")], clause(
            "TS-ISO-1", "loop narrows", _spo(a_one), want=[("s", "p", "o")], detail=a_one
        )
        other = await triples.query("a:b")
        assert [t.loop for t in other] == ["c", "x"], clause(
            "TS-ISO-1", "owners isolated", [t.loop for t in other], want=["c", "x"], detail=other
        )
        nobody = await triples.query("a", loop="b")
        assert nobody == [], clause(
            "TS-ISO-1", "a loop name prefix matches nothing", nobody, want=[]
        )

    # -- walks -----------------------------------------------------------------

    async def _chain(self, triples: TripleStore) -> None:
        await triples.add(
            [
                _t("a", "to", "b", at=1),
                _t("b", "to", "c", at=2),
                _t("c", "to", "d", at=3),
                _t("x", "to", "a", at=4),
                _t("d", "to", "a", at=0, loop="other"),
            ]
        )

    async def test_walk_one_hop(self, triples: TripleStore) -> None:
        """hops=1: the triples touching the node, as subject or object.

        When this fails, check that both directions are followed.
        """
        await self._chain(triples)
        got = _steps(await triples.neighbours("o", "a", loop="l"))
        assert got == [(1, "x", "to", "a"), (1, "a", "to", "b")], clause(
            "TS-WALK-1",
            "one hop, both directions, triple order",
            got,
            want=[(1, "x", "to", "a"), (1, "a", "to", "b")],
        )

    async def test_walk_k_hops(self, triples: TripleStore) -> None:
        """hops=k reaches further; each triple once at its smallest distance; cycles end.

        When this fails, check the breadth-first expansion (a visited node is not
        expanded again) and the final order (distance, then triple order).
        """
        await self._chain(triples)
        got = _steps(await triples.neighbours("o", "a", hops=2))
        assert got == [
            (1, "x", "to", "a"),
            (1, "a", "to", "b"),
            (1, "d", "to", "a"),
            (2, "c", "to", "d"),
            (2, "b", "to", "c"),
        ], clause(
            "TS-WALK-2",
            "two hops over every loop",
            got,
            want=[
                (1, "x", "to", "a"),
                (1, "a", "to", "b"),
                (1, "d", "to", "a"),
                (2, "c", "to", "d"),
                (2, "b", "to", "c"),
            ],
        )
        far = _steps(await triples.neighbours("o", "a", hops=8))
        assert len(far) == 5, clause(
            "TS-WALK-2", "a cycle terminates, triples once", len(far), want=5, detail=far
        )
        await triples.add(
            [
                _t("n", "self", "n", owner="loops", at=0),
                _t("n", "to", "m", owner="loops", at=1),
                _t("m", "to", "n", owner="loops", at=2),
            ]
        )
        want = [(1, "m", "to", "n"), (1, "n", "to", "m"), (1, "n", "self", "n")]
        looped = _steps(await triples.neighbours("loops", "n", hops=3))
        assert looped == want, clause(
            "TS-WALK-2", "a self-loop and a 2-cycle are listed once each", looped, want=want
        )

    async def test_walk_loop_limit_unknown(self, triples: TripleStore) -> None:
        """loop narrows the walk, limit cuts it, an unknown node walks to nothing.

        When this fails, check that the loop filter applies at every hop.
        """
        await self._chain(triples)
        in_loop = _steps(await triples.neighbours("o", "a", hops=3, loop="l"))
        assert [s[1:] for s in in_loop] == [
            ("x", "to", "a"),
            ("a", "to", "b"),
            ("b", "to", "c"),
            ("c", "to", "d"),
        ], clause(
            "TS-WALK-3",
            "loop applies at every hop",
            [s[1:] for s in in_loop],
            want=[
                ("x", "to", "a"),
                ("a", "to", "b"),
                ("b", "to", "c"),
                ("c", "to", "d"),
            ],
            detail=in_loop,
        )
        limited = _steps(await triples.neighbours("o", "a", hops=3, limit=2))
        want = [(1, "x", "to", "a"), (1, "a", "to", "b")]
        assert limited == want, clause(
            "TS-WALK-3", "limit keeps the first steps of the walk order", limited, want=want
        )
        none = await triples.neighbours("o", "nowhere", hops=3)
        assert none == [], clause("TS-WALK-3", "unknown node", none, want=[])
        other_owner = await triples.neighbours("someone-else", "a", hops=3)
        assert other_owner == [], clause(
            "TS-WALK-3", "walks stay in the owner", other_owner, want=[]
        )

    @pytest.mark.parametrize("node", ["alice", "ALICE", "alice ", " alice", "e\u0301", "a%", "a_"])
    async def test_walk_node_is_exact(self, triples: TripleStore, node: str) -> None:
        """When this fails, the start node (or the frontier) is matched with
        case-folding, trimming, Unicode normalisation or a LIKE/GLOB pattern
        where `=` is meant: nodes are opaque text."""
        await triples.add(
            [
                _t("Alice", "knows", "bob", at=3),
                _t("alice\u00a0", "knows", "carl", at=2),
                _t("\u00e9", "is", "letter", at=1),
                _t("ab", "is", "word", at=0),
            ]
        )
        got = _steps(await triples.neighbours("o", node, hops=2))
        assert got == [], clause(
            "TS-WALK-4", f"node {node!r} touches no triple: the walk is empty", got, want=[]
        )

    # -- delete ----------------------------------------------------------------

    async def test_delete_scope(self, triples: TripleStore) -> None:
        """delete_scope deletes exactly the owner's (loop's) triples; the count.

        When this fails, check the owner/loop conditions of the DELETE.
        """
        await triples.add(
            [
                _t("s", "p", "1", loop="l1"),
                _t("s", "p", "2", loop="l1"),
                _t("s", "p", "3", loop="l2"),
                _t("s", "p", "5", loop="l10"),
                _t("s", "p", "4", owner="other", loop="l1"),
            ]
        )
        one = await triples.delete_scope("o", loop="l1")
        assert one == 2, clause("TS-DEL-1", "one loop's triples", one, want=2)
        left = _spo(await triples.query("o"))
        assert left == [("s", "p", "5"), ("s", "p", "3")], clause(
            "TS-DEL-1",
            "the other loops stay (l10 too: the loop is matched exactly, not as a prefix)",
            left,
            want=[("s", "p", "5"), ("s", "p", "3")],
        )
        rest = await triples.delete_scope("o")
        assert rest == 2, clause("TS-DEL-1", "the owner's remaining triples", rest, want=2)
        none = await triples.delete_scope("o")
        assert none == 0, clause("TS-DEL-1", "nothing left: 0", none, want=0)
        other = await triples.query("other")
        assert len(other) == 1, clause(
            "TS-DEL-1", "other owners untouched", len(other), want=1, detail=other
        )

    # -- validation ------------------------------------------------------------

    @pytest.mark.parametrize("blank", ["", "   ", "\t\n"])
    async def test_blank_scope(self, triples: TripleStore, blank: str) -> None:
        """An empty or whitespace-only owner or loop raises `ScopeRequired` everywhere.

        When this fails, validate with `domain.validation.require_scope` first.
        """
        rule = "blank scope raises ScopeRequired"
        await expect_raises("TS-SCOPE-1", rule, ScopeRequired, triples.query(blank))
        await expect_raises("TS-SCOPE-1", rule, ScopeRequired, triples.query("o", loop=blank))
        await expect_raises("TS-SCOPE-1", rule, ScopeRequired, triples.neighbours(blank, "n"))
        await expect_raises("TS-SCOPE-1", rule, ScopeRequired, triples.delete_scope(blank))
        await expect_raises(
            "TS-SCOPE-1", rule, ScopeRequired, triples.delete_scope("o", loop=blank)
        )
        with pytest.raises(ScopeRequired):
            _t("s", "p", "o", owner=blank)

    async def test_bad_input(self, triples: TripleStore) -> None:
        """Bad batches, limits and hops raise `InvalidInput`; nothing is stored.

        When this fails, validate the whole batch before writing any of it.
        """
        bad: Any = [_t("s", "p", "o"), ("s", "p", "o")]
        rule = "bad input raises InvalidInput"
        await expect_raises("TS-INPUT-1", rule, InvalidInput, triples.add(bad))
        await expect_raises("TS-INPUT-1", rule, InvalidInput, triples.query("o", limit=0))
        await expect_raises("TS-INPUT-1", rule, InvalidInput, triples.neighbours("o", "s", hops=0))
        await expect_raises(
            "TS-INPUT-1", rule, InvalidInput, triples.neighbours("o", "s", limit=-1)
        )
        stored = await triples.query("o")
        assert stored == [], clause(
            "TS-INPUT-1", "nothing of a bad batch is stored", stored, want=[]
        )

    async def test_ids_at_and_over_the_maximum(self, triples: TripleStore) -> None:
        """When this fails at the maximum, the backend cannot hold MAX_ID_BYTES in
        every field of one triple's key at once (e.g. a composite index entry over
        the engine's limit); over it, the size is not checked before I/O
        (`Triple`'s validators, again in `check_triples`)."""
        owner, loop, s, p, o = (max_id(f"ts-{f}") for f in ("owner", "loop", "s", "p", "o"))
        fact = _t(s, p, o, owner=owner, loop=loop)
        n = await triples.add([fact])
        assert n == 1, clause("TS-INPUT-2", "a maximal triple is stored", n, want=1)
        got = await triples.query(owner, loop=loop, subject=s, predicate=p, object=o)
        assert got == [fact], clause(
            "TS-INPUT-2", "query by every field finds it", got, want=[fact]
        )
        walked = [step.triple for step in await triples.neighbours(owner, o, loop=loop)]
        assert walked == [fact], clause("TS-INPUT-2", "a walk finds it", walked, want=[fact])
        n = await triples.delete_scope(owner, loop=loop)
        assert n == 1, clause("TS-INPUT-2", "delete_scope deletes it", n, want=1)
        long = max_id("ts-over") + "x"
        good = _t("a", "b", "c", owner="over")
        with attrs.validators.disabled():
            bad = {
                f"triple.{f}": attrs.evolve(good, **{f: long})
                for f in ("owner", "loop", "subject", "predicate", "object")
            }
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            *((f, lambda t=t: triples.add([good, t])) for f, t in bad.items()),
            ("owner", lambda: triples.query(long)),
            ("loop", lambda: triples.query("over", loop=long)),
            ("owner", lambda: triples.neighbours(long, "a")),
            ("loop", lambda: triples.neighbours("over", "a", loop=long)),
            ("owner", lambda: triples.delete_scope(long)),
            ("loop", lambda: triples.delete_scope("over", loop=long)),
        ]
        for field, call in calls:
            await expect_too_long("TS-INPUT-2", field, call())
        left = await triples.query("over")
        assert left == [], clause(
            "TS-INPUT-2", "a batch with an over-long id stores nothing", left, want=[]
        )

    # -- oracle ----------------------------------------------------------------

    @_PROPERTY
    @given(edges=st.lists(_edge, max_size=14), start=_node, hops=st.integers(1, 3))
    async def test_matches_oracle(
        self,
        triples: TripleStore,
        edges: list[tuple[str, str, str, str, int]],
        start: str,
        hops: int,
    ) -> None:
        """Property: random graphs answer exactly like the in-memory oracle.

        When this fails, read the falsifying graph: which query or walk differs,
        and is it order (ties) or content?
        """
        owner = f"prop-{uuid.uuid4().hex}"
        batch = [_t(s, p, o, owner=owner, loop=loop, at=at) for s, p, o, loop, at in edges]
        oracle = InMemoryTripleStore()
        want_added = await oracle.add(batch)
        added = await triples.add(batch)
        assert added == want_added, clause("TS-ORACLE-1", "add count", added, want=want_added)
        for loop in (None, "l1"):
            got = await triples.query(owner, loop=loop, subject=start)
            want = await oracle.query(owner, loop=loop, subject=start)
            assert got == want, clause(
                "TS-ORACLE-1", f"query(subject, loop={loop})", got, want=want
            )
            got_all = await triples.query(owner, loop=loop, limit=5)
            want_all = await oracle.query(owner, loop=loop, limit=5)
            assert got_all == want_all, clause(
                "TS-ORACLE-1", "query(limit=5)", got_all, want=want_all
            )
            walked = await triples.neighbours(owner, start, hops=hops, loop=loop)
            want_walk = await oracle.neighbours(owner, start, hops=hops, loop=loop)
            assert walked == want_walk, clause(
                "TS-ORACLE-1", f"walk hops={hops}", walked, want=want_walk
            )
        deleted = await triples.delete_scope(owner)
        assert deleted == want_added, clause(
            "TS-ORACLE-1", "delete_scope count", deleted, want=want_added
        )

    # -- lifecycle -------------------------------------------------------------

    async def test_closed(self, triples: TripleStore) -> None:
        """After close every operation raises `StoreClosed`; close is idempotent.

        When this fails, wrap every operation in the adapter's Lifecycle.
        """
        await triples.close()
        await triples.close()
        rule = "operations after close raise StoreClosed"
        await expect_raises("TS-CLOSE-1", rule, StoreClosed, triples.add([_t("s", "p", "o")]))
        await expect_raises("TS-CLOSE-1", rule, StoreClosed, triples.query("o"))
        await expect_raises("TS-CLOSE-1", rule, StoreClosed, triples.neighbours("o", "s"))
        await expect_raises("TS-CLOSE-1", rule, StoreClosed, triples.delete_scope("o"))
        await expect_raises("TS-CLOSE-1", rule, StoreClosed, triples.ping())

    async def test_shared_handle(self, triples: TripleStore, reopen: ReopenTriples | None) -> None:
        """A second handle sees the first one's triples.

        When this fails, check that the data lives in the backend, not in the handle.
        """
        require_capability(self.capabilities.reopen, "reopen", "a second handle is needed")
        if reopen is None:
            pytest.fail(clause("TS-SHARED-1", "reopen is declared but the fixture is None"))
        await triples.add([_t("s", "p", "o")])
        other = await reopen()
        try:
            got = _spo(await other.query("o"))
        finally:
            await other.close()
        assert got == [("s", "p", "o")], clause(
            "TS-SHARED-1", "the other handle sees it", got, want=[("s", "p", "o")]
        )

    # -- owner listing -------------------------------------------------------

    async def test_owners_lists_every_owner_sorted(self, triples: TripleStore) -> None:
        """When this fails, `owners()` misses, repeats or misorders an owner, or
        lists one whose triples were deleted. Stores without `OwnerListing` skip."""
        if not isinstance(triples, OwnerListing):
            pytest.skip("the triple store does not implement OwnerListing (owners())")
        names = ["b", "a:1", "Z", "\u00e9"]
        await triples.add([_t("s", "p", o, owner=o) for o in names])
        await triples.add([_t("s", "p", "o2", owner="b", loop="l2")])
        got = await triples.owners()
        assert got == sorted(names), clause(
            "TS-OWN-1", "every owner once, sorted", got, want=sorted(names)
        )
        await triples.delete_scope("Z")
        got = await triples.owners()
        want = sorted(set(names) - {"Z"})
        assert got == want, clause(
            "TS-OWN-1", "an owner without triples is not listed", got, want=want
        )

    # -- canary (last) ---------------------------------------------------------

    async def test_zz_canary_absent(self, triples: TripleStore) -> None:
        """The canary of the first test must be gone: each test gets an empty store.

        When this fails, fix the fixture: yield a fresh or emptied store per test.
        """
        got = await triples.query(CANARY_OWNER)
        assert got == [], clause("TS-CANARY-1", "the fixture yields an empty store", got, want=[])

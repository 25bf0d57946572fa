"""`MemoryStoreContract`: the conformance suite for `MemoryStore` backends.

Subclass it once per backend and override the `store` fixture (and `reopen`
when you declare `Capabilities(reopen=True)`, the default)::

    class TestAcmeStore(MemoryStoreContract):
        capabilities = Capabilities(keyword_search=True)

        @pytest_asyncio.fixture  # or @pytest.fixture under asyncio_mode = "auto"
        async def store(self):
            store = AcmeStore(space=EmbeddingSpace("test-model", 8), ...)
            yield store            # EMPTY; vectors use store.space.dimension (>= 2)
            await store.close()    # tests may already have closed it: close is idempotent

        @pytest.fixture
        def reopen(self, store):
            async def open_again():
                return AcmeStore(...)  # a second handle on the same data
            return open_again

Every assertion message starts with a clause id and the rule it checks; every
test's docstring says what to look at when it fails. Clauses:

- MS-ADD-1 a record round-trips every field (attributes as JSON, types exact at every
  depth: an int stays an int, a float a float; importance, context, timestamps to
  the millisecond, vector to float32 precision).
- MS-ADD-2 adding an id the owner already has raises DuplicateRecord and leaves the
  stored record unchanged.
- MS-ADD-3 an id twice in one batch raises DuplicateRecord.
- MS-ADD-4 (atomic_batches) a batch rejected for a duplicate writes nothing.
- MS-ADD-5 (concurrent_duplicate_rejection) of concurrent adds of one id exactly one
  succeeds, the rest raise DuplicateRecord, and the winner is what is stored.
- MS-ADD-6 an empty batch is a no-op.
- MS-ADD-7 one id under two owners in one batch is not a duplicate.
- MS-ADD-8 a large batch is stored completely.
- MS-GET-1 get of a missing id returns None.
- MS-GET-2 get after delete returns None.
- MS-UPD-1 update replaces every field, `created_at` included (the record moves in
  list order), visible to get, list and search.
- MS-UPD-2 update of a missing id raises NotFound and creates nothing.
- MS-UPD-3 update of a deleted id raises NotFound.
- MS-DEL-1 delete returns True once, then False; the record is gone from get, list, search.
- MS-DEL-2 delete_scope with no match returns 0 and deletes nothing.
- MS-DEL-3 delete_scope(owner) removes every record of the owner, only of the owner.
- MS-DEL-4 delete_scope with namespace/kinds removes exactly the matching records:
  nothing of them in get, list or search; the rest untouched (another owner's
  records in the same namespace and kinds included); the count is right.
- MS-DEL-5 delete of a missing id returns False.
- MS-SCOPE-1 an empty or blank owner/namespace is rejected with ScopeRequired by every
  operation, and the rejected call changes nothing.
- MS-SCOPE-2 an empty `kinds` list matches nothing: it never widens to every kind.
- MS-ISO-1..6 the same id under two owners whose names are full of `: * { } | @ - \\`,
  spaces and non-ASCII stays separate in get (1), search (2), list (3), update (4),
  delete (5) and delete_scope (6).
- MS-ISO-7 hostile ids of one owner never collide or match as patterns.
- MS-ISO-8 a hostile namespace filter matches only that namespace, literally
  (never as a prefix: in search, list and delete_scope).
- MS-ISO-9 hostile kinds match only those kinds, literally.
- MS-ISO-10 owners are compared exactly: owners that differ only by case, a
  leading/trailing space, a `.`, or Unicode compatibility form (`"ana "` vs
  `"ana"`, `"ﬁnance"` vs `"finance"`) are separate owners in add, get, list,
  search and delete_scope (nothing trims, folds or normalises them).
- MS-ISO-11 ids are compared exactly: ids that differ only by case, spaces or
  Unicode compatibility form are separate records of one owner.
- MS-ISO-12 namespaces and kinds are compared exactly: a namespace or kind filter
  that differs from a stored one only by case, spaces or Unicode form
  (`"notes"`/`"Notes"`, `"notes "`, `"\\u00e9"`/`"e\\u0301"`) matches only its own
  records in search, list and delete_scope.
- MS-SEARCH-1 results are ordered by score descending.
- MS-SEARCH-2 the score is the cosine similarity, in [-1, 1], independent of norms.
- MS-SEARCH-3 equal scores are ordered by id ascending, also across the limit cut.
- MS-SEARCH-4 min_score drops exactly the records scoring below it (0.0 included).
- MS-SEARCH-5 limit returns the best `limit` records.
- MS-SEARCH-6 a non-positive limit raises InvalidInput.
- MS-SEARCH-7 fewer matches than limit returns each match once.
- MS-SEARCH-8 namespace/kinds filters apply inside the query (the best matching
  records are found even when better non-matching ones exist).
- MS-SEARCH-9 search of an owner without records returns [].
- MS-SEARCH-10 search returns complete records.
- MS-LIST-1 list orders by created_at desc, then id desc.
- MS-LIST-2 cursor pagination yields the full order exactly once, full pages, and
  next_cursor None on the last page.
- MS-LIST-3 pagination stays stable while records are added between pages, and
  terminates (a cursor that does not advance fails; it never pages forever).
- MS-LIST-4 namespace/kinds filters apply to list (and with the cursor).
- MS-LIST-5 a non-positive limit raises InvalidInput.
- MS-LIST-6 list of an owner without records is an empty last page.
- MS-LIST-7 a malformed cursor raises InvalidInput.
- MS-LIST-8 a cursor that is not a string (an int, bytes, a list) raises InvalidInput
  naming `cursor`, never a builtin error.
- MS-LIST-9 paging through an owner while other tasks add, update and delete its
  records returns every record stored for the whole run exactly once, and no
  record twice, in list order; pages cut through runs of equal created_at.
- MS-BOUND-1 every limit (search, list, search_text) above MAX_LIMIT, or a bool,
  raises InvalidInput naming `limit`; MAX_LIMIT itself is accepted.
- MS-BOUND-2 NUL (U+0000) in an owner, id, namespace, kind, content, context or
  attribute string raises InvalidInput naming the field, and nothing is written.
- MS-BOUND-3 an owner, namespace, id and kind of exactly MAX_ID_BYTES bytes of
  UTF-8 each (incompressible, multi-byte), all in one record, round-trip through
  add, get, list, search, search_text, update and delete.
- MS-BOUND-4 an owner, namespace, id or kind one byte over MAX_ID_BYTES raises
  InvalidInput naming the field, its size and the maximum, in every operation
  that takes it, and nothing is written.
- MS-DIM-0 the suite needs a space of dimension >= 2 (a setup error, not a store bug).
- MS-DIM-1 add with a vector of another dimension raises DimensionMismatch and
  writes nothing of the batch.
- MS-DIM-2 update with another dimension raises DimensionMismatch; record unchanged.
- MS-DIM-3 search with another dimension raises DimensionMismatch.
- MS-CLOSE-1 every operation after close raises StoreClosed.
- MS-CLOSE-2 close is idempotent (sequential and concurrent).
- MS-CLOSE-3 (reopen) a write racing close is completed before close returns or
  rejected with StoreClosed; completed writes persist, rejected ones do not.
- MS-CLOSE-4 (reopen) an add rejected after close is not persisted.
- MS-CLOSE-5 (reopen) closing a handle keeps the data.
- MS-CLOSE-6 ping succeeds on an open store.
- MS-KW-0 (keyword_search) a store declaring keyword search implements `search_text`.
- MS-KW-1..9 (keyword_search) search_text finds terms in content (1) and context (2);
  context is never returned as content (3); owners stay isolated (4); namespace and
  kinds filters apply (5); deleted records are not findable (6); a record with more
  of the query's terms ranks higher (7); blank owner, bad limit and closed store are
  rejected (8); matching ignores letter case in both the query and the text (9).
- MS-KW-10 (keyword_search) a query of exactly MAX_QUERY_BYTES whose only matching
  word comes after 2,000 distinct others finds the record: every word counts.
- MS-KW-11 (keyword_search) a query over MAX_QUERY_BYTES, or holding NUL, raises
  InvalidInput naming `query`; a word over MAX_QUERY_WORD_BYTES matches nothing.
- MS-KW-12 (keyword_search) an owner's keyword ranking (order and scores) depends only
  on the owner's own live records: another owner's adds and deletes, and the owner's
  own deleted records, change nothing (statistics are per owner, never index-wide).
- MS-KW-13 (keyword_search) letter case is folded as the in-memory oracle folds it
  (`domain.lexical`: Python's Unicode `str.lower` of each word, on both sides), not
  for ASCII only: "ÉCOLE" finds "école", "MÈRE" "mère", "ΟΔΟΣ" "οδος" (final
  sigma), "ДОМ" "дом", "GROẞ" "groß", "İZMIR" "İzmir"; and nothing folds further
  than that ("STRASSE" does not find "straße", "ÇAĞRI" not its dotless-i spelling).
- MS-KW-14 (keyword_search) property: on words of cased letters of many scripts,
  each in a random mix of upper and lower case, search_text finds exactly the
  records the in-memory oracle finds.
- MS-KW-15 (keyword_search) equal scores are ordered by id ascending, also across
  the limit cut.
- MS-KW-16 (keyword_search) with namespace/kinds, the statistics (record count,
  average length, document frequencies) are those of the owner's records the
  filters leave: a term rare among them outranks one rare only among the
  owner's other records, and the scores equal those of an owner holding only
  the filtered records.
- MS-OWN-1 (when the store implements `OwnerListing`) `owners()` lists every owner
  with a record, once, sorted by code point; an owner whose records were all deleted
  is no longer listed.
- MS-VER-0 (versioned_writes) a store declaring versioned writes implements
  `VersionedWrites`.
- MS-VER-1 (when the store implements `VersionedWrites`) `update_if_older` replaces
  a record whose stored `updated_at` is earlier (search and keyword search then
  see the new version), and leaves one as late or later, or a missing one,
  untouched (False, nothing created); versions compare to the microsecond over
  the whole datetime range (year 1 to 9999).
- MS-VER-2 (`VersionedWrites`) `delete_if_unchanged` deletes the version it names
  and nothing else: another version (also one a microsecond before or after, near
  now and at years 1 and 9999) or a missing record gives False and leaves the
  store as it was; a naive datetime raises InvalidInput naming `updated_at`.
- MS-VER-3 (`VersionedWrites`) conditional writes racing on one record (many
  `update_if_older` with shuffled versions and a `delete_if_unchanged` of the
  first version, all at once) end as one order of them would: the latest
  version stored, or the record deleted and no update applied.
- MS-CANARY-1 a fresh store holds nothing of the owners earlier tests wrote (the
  fixture does not leak data between tests).
- MS-SM-1 random operation sequences agree with the in-memory oracle (with
  `update_if_older` and `delete_if_unchanged` when the store has `VersionedWrites`).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agent_memory.contract_tests._support import (
    BASE_TIME,
    REOPEN_MISSING,
    Shown,
    assert_same_record,
    clause,
    expect_too_long,
    mark_async_tests,
    max_id,
    ms,
    outcome,
    property_settings,
    require_capability,
)
from agent_memory.contract_tests.capabilities import Capabilities
from agent_memory.domain.errors import (
    DimensionMismatch,
    DuplicateRecord,
    InvalidInput,
    NotFound,
    ScopeRequired,
    StoreClosed,
)
from agent_memory.domain.records import MemoryRecord, Page, ScoredRecord
from agent_memory.domain.validation import MAX_LIMIT, MAX_QUERY_BYTES, MAX_QUERY_WORD_BYTES
from agent_memory.ports.storage import KeywordSearch, MemoryStore, OwnerListing, VersionedWrites

__all__ = ["MemoryStoreContract", "Reopen", "assert_same_record"]

#: The `reopen` fixture's value: opens a second handle on the same data.
Reopen = Callable[[], Awaitable[MemoryStore]]

#: The clause each test exists for, where its body does not say it first (see
#: `_support.primary_clauses`); any other clause a failure names is secondary.
PRIMARY_CLAUSES = {
    "test_canary_fresh_store_is_empty": ("MS-CANARY-1",),
    "test_canary_still_empty_at_the_end": ("MS-CANARY-1",),
    "test_get_after_delete_returns_none": ("MS-GET-2",),
    "test_list_pages_while_writers_write": ("MS-LIST-9",),
    "test_state_machine_agrees_with_oracle": ("MS-SM-1",),
}

#: (first, second): owners one normalisation (trim, case fold, NFKC, `.`
#: handling) would merge; the store must keep them apart (MS-ISO-10).
LOOKALIKE_OWNERS = [
    ("ana", "ana "),
    ("ana", " ana"),
    ("ana", "Ana"),
    ("finance", "\ufb01nance"),  # U+FB01 LATIN SMALL LIGATURE FI
    ("\u00e9", "e\u0301"),  # precomposed vs combining accent
    ("a.b", "a"),
    ("a.b", "a_b"),
    ("team.ana", "team"),
]

#: (first, second): ids of one owner that must not collide (MS-ISO-11).
LOOKALIKE_IDS = [
    ("note", "Note"),
    ("note", "note "),
    ("file", "\ufb01le"),
    ("\u00e9", "e\u0301"),
    ("a.b", "a_b"),
]

#: (first, second): namespaces/kinds that must not match each other (MS-ISO-12).
LOOKALIKE_FILTERS = [
    ("notes", "Notes"),
    ("notes", "notes "),
    ("notes", " notes"),
    ("\u00e9", "e\u0301"),  # precomposed vs combining accent
    ("\ufb01le", "file"),  # U+FB01 LATIN SMALL LIGATURE FI
]

OWNER = "owner:ä{1}"
OTHER = "owner:ö{2}"
CANARY_OWNER = "contract-canary"
NS = "ns"
KIND = "fact"
SCORE_TOL = 1e-4
_BLANKS = ["", "   ", "\t", " \n "]

#: (record content, query, found): letter case folds as `domain.lexical` folds it,
#: Unicode-aware (MS-KW-13). Every word needs a non-ASCII letter folded, so a
#: backend that folds ASCII only finds none of the first group; the last group
#: are words the oracle keeps apart, so a backend that folds further (full case
#: folding, dotless i) finds them.
UNICODE_CASE = [
    ("ÉCOLE", "école", True),
    ("mère", "MÈRE", True),
    ("ΣΟΦΙΑ", "σοφια", True),
    ("ΟΔΟΣ", "οδος", True),  # final sigma: "Σ" at a word's end lowers to "ς"
    ("ДОМ", "дом", True),
    ("ŁÓDŹ", "łódź", True),
    ("GROẞ", "groß", True),  # U+1E9E CAPITAL SHARP S lowers to "ß"
    ("İZMIR", "İzmir", True),  # "İ" lowers to "i" + U+0307 on both sides
    ("STRASSE", "straße", False),  # lower-casing, not case folding: "ß" stays
    ("ÇAĞRI", "çağr\u0131", False),  # "I" lowers to "i", never to a dotless i
]

#: Cased letters of many scripts (and the special cases above) the keyword
#: case property (MS-KW-14) builds its words from.
_CASED = "AaÀàÉéÑñÖöÜüŸÿĄąĆćĘęŁłŃńŚśŹźŻżŐőŰűĞğİıŞşǅǆẞßΆάΈέΣσςΩωΌόДдЖжЯяЁёЇїԱաႠⴀ"  # noqa: RUF001
_CASE_WORDS = st.text(st.sampled_from(_CASED), min_size=2, max_size=6)
_RECASE = st.lists(st.booleans(), min_size=6, max_size=6)


def _recase(word: str, upper: Sequence[bool]) -> str:
    """`word` with each letter upper- or lower-cased as `upper` says."""
    return "".join(c.upper() if up else c.lower() for c, up in zip(word, upper, strict=False))


_ISOLATION_CASES = [
    ("a}b", "a", "id"),
    ("*", "a", "*"),
    ("@owner:{x}", "@owner:{y}", "{x}"),
    ("-1", "1", "-1"),
    ("x|y", "x", "x|y"),
    ("ü 名", "u 名", "ü 名"),
    ("a\\b", "a\\\\b", "a\\b"),
    ("a:b", "a", "b:c"),
    ("a b", "a", "a b"),
    ("a*", "ab", "id*"),
    ("%", "_", "%_"),
    ("'; --", "x", "'"),
]


# ----------------------------------------------------------------- builders


def _dim(store: MemoryStore) -> int:
    dim = store.space.dimension
    if dim < 2:
        pytest.fail(clause("MS-DIM-0", "the contract needs store.space.dimension >= 2", dim))
    return dim


def _vec(dim: int, *components: float) -> npt.NDArray[np.float32]:
    v = np.zeros(dim, dtype=np.float32)
    v[: len(components)] = components
    return v


def _angle(dim: int, degrees: float, scale: float = 1.0) -> npt.NDArray[np.float32]:
    rad = math.radians(degrees)
    return _vec(dim, scale * math.cos(rad), scale * math.sin(rad))


def _rec(
    store: MemoryStore,
    id: str,
    *,
    owner: str = OWNER,
    namespace: str = NS,
    kind: str = KIND,
    content: str | None = None,
    vector: npt.NDArray[np.float32] | None = None,
    created_at_ms: int = 0,
    importance: float = 0.5,
    attributes: dict[str, Any] | None = None,
    context: str = "",
) -> MemoryRecord:
    dim = _dim(store)
    created = BASE_TIME + ms(created_at_ms)
    return MemoryRecord(
        id=id,
        owner=owner,
        namespace=namespace,
        kind=kind,
        content=f"content of {id}" if content is None else content,
        vector=_vec(dim, 1.0) if vector is None else vector,
        created_at=created,
        updated_at=created,
        importance=importance,
        attributes={} if attributes is None else attributes,
        context=context,
    )


def _unchecked(record: MemoryRecord, **changes: Any) -> MemoryRecord:
    """A copy with `changes` applied WITHOUT record validation (to feed bad input)."""
    with attrs.validators.disabled():
        return attrs.evolve(record, **changes)


def _ids(hits: Sequence[ScoredRecord]) -> list[str]:
    return [h.record.id for h in hits]


def _page_ids(page: Page) -> list[str]:
    return [r.id for r in page.records]


async def _all_pages(
    store: MemoryStore,
    owner: str,
    *,
    limit: int = 100,
    namespace: str | None = None,
    kinds: Sequence[str] | None = None,
    cid: str = "MS-LIST-2",
) -> list[MemoryRecord]:
    """Every record of `owner`, read page by page. Read-back goes through list:
    its own rules (order, each record once, termination) are checked here under
    list's clauses, so a list bug is never reported as a bug of the calling test
    (`cid`, named in the message as what the read was for)."""
    out: list[MemoryRecord] = []
    cursor: str | None = None
    why = "" if cid.startswith("MS-LIST-") else f" (read back for {cid})"
    for _ in range(10_000):
        page = await store.list(owner, namespace=namespace, kinds=kinds, limit=limit, cursor=cursor)
        out.extend(page.records)
        keys = [(r.created_at, r.id) for r in out]
        if keys != sorted(keys, reverse=True):
            ordered = sorted(out, key=lambda r: (r.created_at, r.id), reverse=True)
            raise AssertionError(
                clause(
                    "MS-LIST-1",
                    f"list orders by created_at desc, then id desc{why}",
                    [r.id for r in out][:20],
                    want=[r.id for r in ordered][:20],
                )
            )
        ids = [r.id for r in out]
        twice = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) < len(ids) else []
        assert not twice, clause(
            "MS-LIST-2",
            f"pages concatenate to the full order, each record once{why}",
            twice,
            want=Shown("no id twice"),
        )
        if page.next_cursor is None:
            return out
        assert page.records, clause(
            "MS-LIST-2", f"a page with a next_cursor is not empty{why}", page
        )
        cursor = page.next_cursor
    raise AssertionError(
        clause("MS-LIST-2", f"pagination terminates{why}", "more than 10000 pages")
    )


async def _raises(
    cid: str, rule: str, exc_type: type[BaseException], awaitable: Awaitable[object]
) -> BaseException:
    """Await and return the expected exception; fail with the clause otherwise."""
    try:
        result = await awaitable
    except exc_type as exc:
        return exc
    except Exception as exc:
        raise AssertionError(
            clause(cid, rule, outcome(exc), want=Shown(exc_type.__name__))
        ) from exc
    raise AssertionError(clause(cid, rule, outcome(None, result), want=Shown(exc_type.__name__)))


# ------------------------------------------------- operations for the grids


async def _scope_op(store: MemoryStore, op: str, blank: str) -> object:
    dim = _dim(store)
    good = _rec(store, "scope-new")
    q = _vec(dim, 1.0)
    if op == "add.owner":
        await store.add([_unchecked(good, owner=blank)])
        return None
    if op == "add.namespace":
        await store.add([_unchecked(good, namespace=blank)])
        return None
    if op == "update.owner":
        await store.update(_unchecked(_rec(store, "seed"), owner=blank))
        return None
    if op == "update.namespace":
        await store.update(_unchecked(_rec(store, "seed"), namespace=blank))
        return None
    if op == "get":
        return await store.get(blank, "seed")
    if op == "delete":
        return await store.delete(blank, "seed")
    if op == "search":
        return await store.search(blank, q)
    if op == "search.namespace":
        return await store.search(OWNER, q, namespace=blank)
    if op == "list":
        return await store.list(blank)
    if op == "list.namespace":
        return await store.list(OWNER, namespace=blank)
    if op == "delete_scope":
        return await store.delete_scope(blank)
    if op == "delete_scope.namespace":
        return await store.delete_scope(OWNER, namespace=blank)
    raise AssertionError(f"unknown op {op}")


_SCOPE_OPS = [
    "add.owner",
    "add.namespace",
    "update.owner",
    "update.namespace",
    "get",
    "delete",
    "search",
    "search.namespace",
    "list",
    "list.namespace",
    "delete_scope",
    "delete_scope.namespace",
]


async def _closed_op(store: MemoryStore, op: str) -> object:
    dim = _dim(store)
    if op == "add":
        await store.add([_rec(store, "after-close")])
        return None
    if op == "get":
        return await store.get(OWNER, "seed")
    if op == "update":
        await store.update(_rec(store, "seed", content="changed after close"))
        return None
    if op == "delete":
        return await store.delete(OWNER, "seed")
    if op == "search":
        return await store.search(OWNER, _vec(dim, 1.0))
    if op == "list":
        return await store.list(OWNER)
    if op == "delete_scope":
        return await store.delete_scope(OWNER)
    if op == "ping":
        await store.ping()
        return None
    raise AssertionError(f"unknown op {op}")


# ------------------------------------------------------------ the contract


@mark_async_tests
class MemoryStoreContract:
    """All `MemoryStore` conformance tests. Override `store` (and `reopen`)."""

    capabilities: Capabilities = Capabilities()
    #: At most this many state machine examples (`MS-SM-1`); None: as many as the
    #: active hypothesis profile runs. For a backend whose every operation is slow
    #: (an engine in process), so a profile's depth does not cost it minutes.
    state_machine_examples: int | None = None

    @pytest.fixture  # sync: its failure shows in strict and auto mode alike
    def store(self) -> MemoryStore:
        """Override: yield an EMPTY store bound to a space of dimension >= 2."""
        pytest.fail("MemoryStoreContract: override the `store` fixture in your subclass")

    @pytest.fixture
    def reopen(self) -> Reopen | None:
        """Override when `capabilities.reopen`: an async callable opening a second
        handle on the store's data."""
        return None

    def _reopen(self, reopen: Reopen | None, cid: str) -> Reopen:
        require_capability(
            self.capabilities.reopen, "reopen", "a second handle is needed to check persistence"
        )
        if reopen is None:
            pytest.fail(clause(cid, REOPEN_MISSING))
        return reopen

    # ------------------------------------------------------------- canaries

    async def test_canary_writes_records(self, store: MemoryStore) -> None:
        """Writes canary records that later tests must not see. When a later canary
        check fails, your fixture shares data between tests: clear it or use a
        fresh database/prefix per test."""
        dim = _dim(store)
        await store.add(
            [
                _rec(store, "canary-1", owner=CANARY_OWNER),
                _rec(store, "canary-2", owner=CANARY_OWNER, namespace="other"),
                _rec(store, "canary-3", owner=OWNER, vector=_vec(dim, 0.0, 1.0)),
            ]
        )
        page = await store.list(CANARY_OWNER)
        assert len(page.records) == 2, clause(
            "MS-CANARY-1",
            "canary records are visible in the test that wrote them",
            len(page.records),
            want=2,
            detail=page,
        )

    async def test_canary_fresh_store_is_empty(self, store: MemoryStore) -> None:
        """The store this test gets must be empty. When it fails, the fixture leaks
        data from earlier tests (the canary test above or any other)."""
        await self._assert_no_leak(store)

    async def _assert_no_leak(self, store: MemoryStore) -> None:
        dim = _dim(store)
        for owner in (CANARY_OWNER, OWNER, OTHER):
            page = await store.list(owner)
            assert not page.records, clause(
                "MS-CANARY-1",
                f"a fresh store has no records of {owner!r}",
                _page_ids(page),
                want=Shown("nothing"),
            )
            hits = await store.search(owner, _vec(dim, 1.0, 1.0), limit=5)
            assert not hits, clause(
                "MS-CANARY-1",
                f"a fresh store finds nothing of {owner!r}",
                _ids(hits),
                want=Shown("nothing"),
            )
        got = await store.get(CANARY_OWNER, "canary-1")
        assert got is None, clause(
            "MS-CANARY-1", "a fresh store has no canary record", got, want=None
        )

    # ------------------------------------------------------------------ add

    @pytest.mark.parametrize("shape", ["plain", "rich", "empty-text"])
    async def test_add_round_trips_every_field(self, store: MemoryStore, shape: str) -> None:
        """When this fails, check your codec: attributes must round-trip as JSON,
        timestamps keep at least milliseconds and come back timezone-aware UTC,
        vectors keep float32 values, and `context` is stored apart from `content`."""
        dim = _dim(store)
        rng = np.random.default_rng(7)
        if shape == "plain":
            rec = _rec(store, "r1")
        elif shape == "rich":
            plus_two = timezone(timedelta(hours=2))
            created = (BASE_TIME + timedelta(microseconds=123_456)).astimezone(plus_two)
            rec = MemoryRecord(
                id="r:1 {ü}",
                owner=OWNER,
                namespace="ns/ü 名",
                kind="kind|x",
                content="Ünïcode ✓ line1\nline2\t'quoted' \"dq\" \\ 名前",
                vector=rng.standard_normal(dim).astype(np.float32) * 3.5,
                created_at=created,
                updated_at=created + timedelta(days=3, milliseconds=7),
                importance=0.123456,
                attributes={
                    "nested": {"list": [1, 2.5, "x", None, True], "deep": {"k": "ü"}},
                    "int": 2**40,
                    "one": 1,
                    "float": 0.1,
                    "whole float": 2.0,
                    "bool": False,
                    "none": None,
                    "empty": {},
                    "ü key": "名",
                },
                context="neighbouring turn: the user asked about pricing",
            )
        else:
            rec = _rec(store, "r-empty", content="", importance=0.0, context="")
        await store.add([rec])
        assert_same_record("MS-ADD-1", await store.get(rec.owner, rec.id), rec)
        listed = await store.list(rec.owner)
        assert len(listed.records) == 1, clause(
            "MS-ADD-1", "list shows the record", len(listed.records), want=1, detail=listed
        )
        assert_same_record("MS-ADD-1", listed.records[0], rec)

    async def test_add_duplicate_of_stored_id_is_rejected(self, store: MemoryStore) -> None:
        """When this fails, `add` overwrites: it must check existence (atomically
        with the write, e.g. SET NX / INSERT without upsert) and raise DuplicateRecord."""
        original = _rec(store, "dup", content="original")
        await store.add([original])
        await _raises(
            "MS-ADD-2",
            "adding an id the owner already has raises DuplicateRecord",
            DuplicateRecord,
            store.add([_rec(store, "dup", content="replacement")]),
        )
        got = await store.get(OWNER, "dup")
        assert got is not None, clause(
            "MS-ADD-2", "a rejected duplicate leaves the stored record unchanged", got
        )
        assert got.content == "original", clause(
            "MS-ADD-2",
            "a rejected duplicate leaves the stored record unchanged",
            got.content,
            want="original",
            detail=got,
        )

    async def test_add_duplicate_within_batch_is_rejected(self, store: MemoryStore) -> None:
        """When this fails, check that the batch is checked for repeated ids before
        writing (a backend upsert would silently keep the last one)."""
        batch = [_rec(store, "twice", content="first"), _rec(store, "twice", content="second")]
        await _raises(
            "MS-ADD-3",
            "an id twice in one batch raises DuplicateRecord",
            DuplicateRecord,
            store.add(batch),
        )
        if self.capabilities.atomic_batches:
            got = await store.get(OWNER, "twice")
            assert got is None, clause(
                "MS-ADD-4", "a batch rejected for a duplicate writes nothing", got, want=None
            )

    async def test_add_atomic_batch_writes_nothing_on_duplicate(self, store: MemoryStore) -> None:
        """When this fails while you declare atomic_batches, your add writes records
        one by one: check all ids first inside one transaction/script, or declare
        atomic_batches=False."""
        require_capability(
            self.capabilities.atomic_batches, "atomic_batches", "partial batches are allowed"
        )
        await store.add([_rec(store, "existing")])
        batch = [_rec(store, "new-1"), _rec(store, "existing"), _rec(store, "new-2")]
        await _raises(
            "MS-ADD-4",
            "a batch with a duplicate raises DuplicateRecord",
            DuplicateRecord,
            store.add(batch),
        )
        for rid in ("new-1", "new-2"):
            got = await store.get(OWNER, rid)
            assert got is None, clause(
                "MS-ADD-4",
                f"a batch rejected for a duplicate writes nothing ({rid})",
                got,
                want=None,
            )
        page = await store.list(OWNER)
        assert _page_ids(page) == ["existing"], clause(
            "MS-ADD-4", "only the pre-existing record remains", _page_ids(page), want=["existing"]
        )

    async def test_add_concurrent_duplicates_exactly_one_wins(self, store: MemoryStore) -> None:
        """When this fails while you declare concurrent_duplicate_rejection, your
        existence check and write are separate round trips: make them one atomic
        operation (INSERT ... ON CONFLICT DO NOTHING + rowcount, SET NX, a script)."""
        require_capability(
            self.capabilities.concurrent_duplicate_rejection,
            "concurrent_duplicate_rejection",
            "check-then-write backends cannot promise it",
        )
        contenders = [_rec(store, "race", content=f"writer {i}") for i in range(12)]

        async def attempt(rec: MemoryRecord) -> bool:
            try:
                await store.add([rec])
            except DuplicateRecord:
                return False
            return True

        wins = await asyncio.gather(*(attempt(r) for r in contenders))
        winners = [r.content for r, won in zip(contenders, wins, strict=True) if won]
        assert len(winners) == 1, clause(
            "MS-ADD-5",
            "exactly one of concurrent adds of one id succeeds",
            len(winners),
            want=1,
            detail=winners,
        )
        got = await store.get(OWNER, "race")
        assert got is not None, clause("MS-ADD-5", "the winner's record is the one stored", got)
        assert got.content == winners[0], clause(
            "MS-ADD-5",
            "the winner's record is the one stored",
            got.content,
            want=winners[0],
            detail=got,
        )

    async def test_add_empty_batch_is_noop(self, store: MemoryStore) -> None:
        """When this fails, `add([])` raised or wrote something: an empty batch must
        simply return (no empty MULTI/INSERT errors)."""
        await store.add([])
        page = await store.list(OWNER)
        assert not page.records, clause(
            "MS-ADD-6", "an empty batch writes nothing", page, want=Shown("nothing")
        )

    async def test_add_same_id_for_two_owners_in_one_batch(self, store: MemoryStore) -> None:
        """When this fails, your duplicate check keys on id alone: key on (owner, id)."""
        batch = [_rec(store, "shared", owner=OWNER), _rec(store, "shared", owner=OTHER)]
        try:
            await store.add(batch)
        except DuplicateRecord as exc:
            raise AssertionError(
                clause("MS-ADD-7", "one id under two owners is not a duplicate", exc)
            ) from exc
        for owner in (OWNER, OTHER):
            got = await store.get(owner, "shared")
            assert got is not None, clause(
                "MS-ADD-7", f"both owners have their record ({owner!r})", got
            )
            assert got.owner == owner, clause(
                "MS-ADD-7",
                f"both owners have their record ({owner!r})",
                got.owner,
                want=owner,
                detail=got,
            )

    async def test_add_large_batch(self, store: MemoryStore) -> None:
        """When this fails, check batching limits (pipeline/statement sizes) in add."""
        dim = _dim(store)
        batch = [
            _rec(store, f"bulk-{i:04d}", vector=_angle(dim, i % 180), created_at_ms=i)
            for i in range(300)
        ]
        await store.add(batch)
        listed = await _all_pages(store, OWNER, limit=100, cid="MS-ADD-8")
        assert len(listed) == 300, clause(
            "MS-ADD-8", "a batch of 300 is stored", len(listed), want=300
        )

    # ------------------------------------------------------------------ get

    @pytest.mark.parametrize("populated", [False, True], ids=["empty-store", "other-ids"])
    async def test_get_missing_returns_none(self, store: MemoryStore, populated: bool) -> None:
        """When this fails, `get` raised or returned something for an id the owner
        does not have (check prefix/pattern matching on keys)."""
        if populated:
            await store.add([_rec(store, "missing-not"), _rec(store, "missing", owner=OTHER)])
        for rid in ("missing", "missing-", "missing*"):
            got = await store.get(OWNER, rid)
            assert got is None, clause(
                "MS-GET-1", "get of a missing id returns None", got, want=None
            )

    async def test_get_after_delete_returns_none(self, store: MemoryStore) -> None:
        """When this fails, delete left the record readable (a cache? a soft delete?)."""
        await store.add([_rec(store, "gone")])
        deleted = await store.delete(OWNER, "gone")
        assert deleted is True, clause(
            "MS-DEL-1", "delete of a stored id returns True", deleted, want=True
        )
        got = await store.get(OWNER, "gone")
        assert got is None, clause("MS-GET-2", "get after delete returns None", got, want=None)

    # --------------------------------------------------------------- update

    async def test_update_replaces_every_field(self, store: MemoryStore) -> None:
        """When this fails, update kept stale data somewhere: the stored record, the
        vector index, or the namespace/kind index used by filters."""
        dim = _dim(store)
        old = _rec(store, "u1", content="old", vector=_vec(dim, 1.0), attributes={"v": 1})
        await store.add([old, _rec(store, "u2", vector=_angle(dim, 45))])
        # a search first, so an index built lazily on the first search (a vector
        # cache, an ANN graph) exists when the update comes and must follow it
        await store.search(OWNER, _vec(dim, 1.0), limit=2)
        new = attrs.evolve(
            old,
            namespace="ns-new",
            kind="kind-new",
            content="new",
            vector=_vec(dim, 0.0, 1.0),
            created_at=old.created_at + timedelta(minutes=30),
            updated_at=old.updated_at + timedelta(hours=1),
            importance=0.9,
            attributes={"v": 2, "x": [1]},
            context="new context",
        )
        await store.update(new)
        got = await store.get(OWNER, "u1")
        if got is not None and got.created_at.tzinfo is not None:
            assert abs(got.created_at - new.created_at) <= ms(1), clause(
                "MS-UPD-1",
                "update replaces created_at too (not only the other fields)",
                got.created_at,
                want=new.created_at,
            )
        assert_same_record("MS-UPD-1", got, new)
        hits = await store.search(OWNER, _vec(dim, 0.0, 1.0), limit=1)
        assert _ids(hits) == ["u1"], clause(
            "MS-UPD-1",
            "search uses the updated vector",
            _ids(hits),
            want=["u1"],
            detail=[(h.record.id, h.score) for h in hits],
        )
        assert hits[0].score > 1 - SCORE_TOL, clause(
            "MS-UPD-1", "search uses the updated vector", [(h.record.id, h.score) for h in hits]
        )
        old_ns = await store.list(OWNER, namespace=NS)
        assert _page_ids(old_ns) == ["u2"], clause(
            "MS-UPD-1",
            "the old namespace no longer lists the record",
            _page_ids(old_ns),
            want=["u2"],
        )
        new_kind = await store.list(OWNER, kinds=["kind-new"])
        assert _page_ids(new_kind) == ["u1"], clause(
            "MS-UPD-1", "the new kind lists the record", _page_ids(new_kind), want=["u1"]
        )
        # The new created_at (30 minutes after u2's) moves u1 first in list order,
        # also page by page (a sort index keyed by the old created_at would not).
        for limit in (10, 1):
            seen: list[MemoryRecord] = []
            cursor: str | None = None
            for _ in range(3):
                page = await store.list(OWNER, limit=limit, cursor=cursor)
                seen += page.records
                if (cursor := page.next_cursor) is None:
                    break
            order = [(r.id, r.created_at) for r in seen]
            want = [("u1", new.created_at), ("u2", old.created_at)]
            rule = f"update replaces created_at: list (pages of {limit}) orders by the new one"
            assert [i for i, _ in order] == ["u1", "u2"], clause("MS-UPD-1", rule, order, want=want)
            assert all(abs(g - w) <= ms(1) for (_, g), (_, w) in zip(order, want, strict=True)), (
                clause("MS-UPD-1", rule, order, want=want)
            )

    @pytest.mark.parametrize("where", ["empty-store", "other-owner-has-it"])
    async def test_update_missing_raises_not_found(self, store: MemoryStore, where: str) -> None:
        """When this fails, update upserts: it must require the (owner, id) to exist."""
        if where == "other-owner-has-it":
            await store.add([_rec(store, "nope", owner=OTHER)])
        await _raises(
            "MS-UPD-2",
            "update of a missing id raises NotFound",
            NotFound,
            store.update(_rec(store, "nope", content="created by update?")),
        )
        got = await store.get(OWNER, "nope")
        assert got is None, clause("MS-UPD-2", "a failed update creates nothing", got, want=None)
        if where == "other-owner-has-it":
            theirs = await store.get(OTHER, "nope")
            assert theirs is not None, clause(
                "MS-UPD-2", "the other owner's record is untouched", theirs
            )
            assert theirs.content == "content of nope", clause(
                "MS-UPD-2",
                "the other owner's record is untouched",
                theirs.content,
                want="content of nope",
                detail=theirs,
            )

    async def test_update_after_delete_raises_not_found(self, store: MemoryStore) -> None:
        """When this fails, delete left something update treats as existing."""
        await store.add([_rec(store, "d")])
        await store.delete(OWNER, "d")
        await _raises(
            "MS-UPD-3",
            "update of a deleted id raises NotFound",
            NotFound,
            store.update(_rec(store, "d")),
        )

    # --------------------------------------------------------------- delete

    async def test_delete_then_gone_everywhere(self, store: MemoryStore) -> None:
        """When this fails, delete misses one of the structures (index, list order
        set, vector index) or returns the wrong flag."""
        dim = _dim(store)
        await store.add([_rec(store, "del"), _rec(store, "keep", vector=_angle(dim, 30))])
        first = await store.delete(OWNER, "del")
        assert first is True, clause(
            "MS-DEL-1", "delete of a stored id returns True", first, want=True
        )
        second = await store.delete(OWNER, "del")
        assert second is False, clause(
            "MS-DEL-1", "a second delete returns False", second, want=False
        )
        page = await store.list(OWNER)
        assert _page_ids(page) == ["keep"], clause(
            "MS-DEL-1", "a deleted record is not listed", _page_ids(page), want=["keep"]
        )
        hits = await store.search(OWNER, _vec(dim, 1.0), limit=10)
        assert _ids(hits) == ["keep"], clause(
            "MS-DEL-1", "a deleted record is not found by search", _ids(hits), want=["keep"]
        )

    async def test_delete_missing_returns_false(self, store: MemoryStore) -> None:
        """When this fails, delete raised or claimed to delete a record that did not exist."""
        assert await store.delete(OWNER, "never") is False, clause(
            "MS-DEL-5", "delete of a missing id returns False", True, want=False
        )
        await store.add([_rec(store, "never", owner=OTHER)])
        assert await store.delete(OWNER, "never") is False, clause(
            "MS-DEL-5", "delete of an id only another owner has returns False", True, want=False
        )
        assert await store.get(OTHER, "never") is not None, clause(
            "MS-DEL-5", "the other owner's record survives", None
        )

    @pytest.mark.parametrize(
        "case", ["empty-store", "other-namespace", "other-kind", "other-owner"]
    )
    async def test_delete_scope_no_match_returns_zero(self, store: MemoryStore, case: str) -> None:
        """When this fails, delete_scope either raised on no match or deleted records
        outside the filter (a filter ignored or widened)."""
        if case != "empty-store":
            await store.add([_rec(store, "a"), _rec(store, "b", kind="other-kind-x")])
        if case == "other-namespace":
            n = await store.delete_scope(OWNER, namespace="no-such-ns")
        elif case == "other-kind":
            n = await store.delete_scope(OWNER, kinds=["no-such-kind"])
        else:
            n = await store.delete_scope(OTHER if case == "other-owner" else OWNER)
        assert n == 0, clause("MS-DEL-2", "delete_scope with no match returns 0", n, want=0)
        remaining = sorted(r.id for r in await _all_pages(store, OWNER))
        want = [] if case == "empty-store" else ["a", "b"]
        assert remaining == want, clause(
            "MS-DEL-2", "a no-match delete_scope deletes nothing", remaining, want=want
        )

    async def test_delete_scope_owner_removes_only_that_owner(self, store: MemoryStore) -> None:
        """When this fails, delete_scope(owner) missed records (other namespaces or
        kinds) or deleted another owner's (a key pattern like `owner*`)."""
        dim = _dim(store)
        mine = [
            _rec(store, "m1"),
            _rec(store, "m2", namespace="ns2", kind="k2", vector=_angle(dim, 20)),
            _rec(store, "m3", namespace="ns3", vector=_angle(dim, 40)),
        ]
        prefix_owner = OWNER + "x"  # an owner whose name extends this one
        theirs = [_rec(store, "m1", owner=OTHER), _rec(store, "t", owner=prefix_owner)]
        await store.add(mine + theirs)
        n = await store.delete_scope(OWNER)
        assert n == 3, clause(
            "MS-DEL-3", "delete_scope(owner) returns the number deleted", n, want=3
        )
        for r in mine:
            got = await store.get(OWNER, r.id)
            assert got is None, clause(
                "MS-DEL-3", "nothing of the owner is left in get", got, want=None
            )
        left = _page_ids(await store.list(OWNER))
        assert left == [], clause("MS-DEL-3", "nothing of the owner is left in list", left, want=[])
        hits = await store.search(OWNER, _vec(dim, 1.0), limit=10)
        assert hits == [], clause(
            "MS-DEL-3", "nothing of the owner is left in search", _ids(hits), want=[]
        )
        for r in theirs:
            got = await store.get(r.owner, r.id)
            assert got is not None, clause(
                "MS-DEL-3", f"other owners' records survive ({r.owner!r})", None
            )

    @pytest.mark.parametrize("by", ["namespace", "kinds", "namespace+kinds"])
    async def test_delete_scope_filtered_leaves_nothing_of_scope(
        self, store: MemoryStore, by: str
    ) -> None:
        """When this fails, the filtered delete_scope disagrees with the filters of
        get/list/search, or leaves a stale entry in one index (e.g. the vector index)."""
        dim = _dim(store)
        records = [
            _rec(store, f"{ns}-{kind}-{i}", namespace=ns, kind=kind, vector=_angle(dim, 10 * i))
            for ns in ("docs", "chat")
            for kind in ("fact", "summary", "route")
            for i in range(3)
        ]
        # another owner with the very same namespaces, kinds and ids: a DELETE
        # whose owner condition got lost takes its records too
        theirs = [attrs.evolve(r, owner=OTHER) for r in records]
        await store.add(records + theirs)
        namespace = "docs" if "namespace" in by else None
        kinds = ["fact", "route"] if "kinds" in by else None

        def doomed(r: MemoryRecord) -> bool:
            return (namespace is None or r.namespace == namespace) and (
                kinds is None or r.kind in kinds
            )

        gone = {r.id for r in records if doomed(r)}
        kept = {r.id for r in records if not doomed(r)}
        n = await store.delete_scope(OWNER, namespace=namespace, kinds=kinds)
        assert n == len(gone), clause(
            "MS-DEL-4", "delete_scope returns the count", n, want=len(gone)
        )
        for rid in sorted(gone):
            got = await store.get(OWNER, rid)
            assert got is None, clause(
                "MS-DEL-4", "nothing of the scope is left in get", got, want=None, detail=rid
            )
        listed = {r.id for r in await _all_pages(store, OWNER, cid="MS-DEL-4")}
        assert listed == kept, clause(
            "MS-DEL-4",
            "list shows exactly the records outside the scope",
            sorted(listed),
            want=sorted(kept),
        )
        for query in (_vec(dim, 1.0), _vec(dim, 0.0, 1.0)):
            hits = await store.search(OWNER, query, limit=len(records))
            found = set(_ids(hits))
            assert not found & gone, clause(
                "MS-DEL-4",
                "nothing of the scope is findable by search",
                sorted(found & gone),
                want=Shown("nothing"),
            )
            assert found == kept, clause(
                "MS-DEL-4",
                "search finds every record outside the scope",
                sorted(found),
                want=sorted(kept),
            )
            scoped = await store.search(OWNER, query, namespace=namespace, kinds=kinds)
            assert scoped == [], clause(
                "MS-DEL-4",
                "a search restricted to the deleted scope is empty",
                _ids(scoped),
                want=[],
            )
        other = {r.id for r in await _all_pages(store, OTHER, cid="MS-DEL-4")}
        assert other == {r.id for r in theirs}, clause(
            "MS-DEL-4",
            "another owner's records in the same namespace and kinds are untouched",
            sorted(other),
            want=sorted(r.id for r in theirs),
        )

    # ---------------------------------------------------------------- scope

    @pytest.mark.parametrize("blank", _BLANKS, ids=["empty", "spaces", "tab", "newline"])
    @pytest.mark.parametrize("op", _SCOPE_OPS)
    async def test_blank_scope_rejected(self, store: MemoryStore, op: str, blank: str) -> None:
        """When this fails, the operation does not call `require_scope` on its owner
        or namespace (records built without validation reach the store, too): a
        blank scope must never mean "everything" or "the default"."""
        await store.add([_rec(store, "seed")])
        await _raises(
            "MS-SCOPE-1",
            f"{op} with a blank scope {blank!r} raises ScopeRequired",
            ScopeRequired,
            _scope_op(store, op, blank),
        )
        page = await store.list(OWNER)
        assert _page_ids(page) == ["seed"], clause(
            "MS-SCOPE-1",
            "a call rejected for a blank scope changes nothing",
            _page_ids(page),
            want=["seed"],
        )
        got = await store.get(OWNER, "seed")
        assert got is not None, clause("MS-SCOPE-1", "the seed record is unchanged", got)
        assert got.content == "content of seed", clause(
            "MS-SCOPE-1",
            "the seed record is unchanged",
            got.content,
            want="content of seed",
            detail=got,
        )

    @pytest.mark.parametrize("op", ["search", "list", "delete_scope"])
    async def test_empty_kinds_matches_nothing(self, store: MemoryStore, op: str) -> None:
        """When this fails, `kinds=[]` was treated like `kinds=None`: an empty filter
        must match nothing (for delete_scope that bug deletes everything)."""
        dim = _dim(store)
        await store.add([_rec(store, "k1"), _rec(store, "k2", kind="other")])
        if op == "search":
            hits = await store.search(OWNER, _vec(dim, 1.0), kinds=[])
            assert hits == [], clause(
                "MS-SCOPE-2", "search with kinds=[] finds nothing", _ids(hits), want=[]
            )
        elif op == "list":
            page = await store.list(OWNER, kinds=[])
            assert not page.records, clause(
                "MS-SCOPE-2",
                "list with kinds=[] lists nothing",
                _page_ids(page),
                want=Shown("nothing"),
            )
        else:
            n = await store.delete_scope(OWNER, kinds=[])
            assert n == 0, clause(
                "MS-SCOPE-2", "delete_scope with kinds=[] deletes nothing", n, want=0
            )
            left = _page_ids(await store.list(OWNER))
            assert sorted(left) == ["k1", "k2"], clause(
                "MS-SCOPE-2",
                "delete_scope with kinds=[] leaves every record",
                sorted(left),
                want=["k1", "k2"],
                detail=left,
            )

    # ------------------------------------------------------------ isolation

    @pytest.mark.parametrize(("owner_a", "owner_b", "rid"), _ISOLATION_CASES)
    async def test_owner_isolation_with_hostile_names(
        self, store: MemoryStore, owner_a: str, owner_b: str, rid: str
    ) -> None:
        """When this fails, owners share keys or queries: escape or hash owner and id
        in keys, and pass them as query parameters, never spliced into query text."""
        dim = _dim(store)
        q = _vec(dim, 1.0)
        a = _rec(store, rid, owner=owner_a, content="A")
        b = _rec(store, rid, owner=owner_b, content="B")
        b_only = _rec(store, "b-only", owner=owner_b, content="B2", vector=_angle(dim, 10))
        await store.add([a, b, b_only])
        for owner, want in ((owner_a, "A"), (owner_b, "B")):
            got = await store.get(owner, rid)
            assert got is not None, clause(
                "MS-ISO-1", f"get({owner!r}, {rid!r}) returns that owner's record", got
            )
            assert got.content == want, clause(
                "MS-ISO-1",
                f"get({owner!r}, {rid!r}) returns that owner's record",
                got.content,
                want=want,
                detail=got,
            )
            assert got.owner == owner, clause(
                "MS-ISO-1",
                f"get({owner!r}, {rid!r}) returns that owner's record",
                got.owner,
                want=owner,
                detail=got,
            )
        hits_a = await store.search(owner_a, q, limit=10)
        assert [(h.record.owner, h.record.id) for h in hits_a] == [(owner_a, rid)], clause(
            "MS-ISO-2",
            "search returns only the owner's records",
            [(h.record.owner, h.record.id) for h in hits_a],
            want=[(owner_a, rid)],
        )
        hits_b = await store.search(owner_b, q, limit=10)
        assert sorted(_ids(hits_b)) == sorted([rid, "b-only"]), clause(
            "MS-ISO-2",
            "search returns only the owner's records",
            sorted(_ids(hits_b)),
            want=sorted([rid, "b-only"]),
            detail=_ids(hits_b),
        )
        page_a = await store.list(owner_a)
        assert [(r.owner, r.id) for r in page_a.records] == [(owner_a, rid)], clause(
            "MS-ISO-3",
            "list returns only the owner's records",
            [(r.owner, r.id) for r in page_a.records],
            want=[(owner_a, rid)],
            detail=page_a.records,
        )
        await store.update(attrs.evolve(a, content="A2"))
        got_b = await store.get(owner_b, rid)
        assert got_b is not None, clause(
            "MS-ISO-4", "update of one owner's record leaves the other's", got_b
        )
        assert got_b.content == "B", clause(
            "MS-ISO-4",
            "update of one owner's record leaves the other's",
            got_b.content,
            want="B",
            detail=got_b,
        )
        deleted = await store.delete(owner_a, "b-only")
        assert deleted is False, clause(
            "MS-ISO-5", "delete cannot reach another owner's record", deleted, want=False
        )
        assert await store.get(owner_b, "b-only") is not None, clause(
            "MS-ISO-5", "the other owner's record survives delete", None
        )
        n = await store.delete_scope(owner_a)
        assert n == 1, clause("MS-ISO-6", "delete_scope counts only the owner's records", n, want=1)
        left_b = sorted(_page_ids(await store.list(owner_b)))
        assert left_b == sorted([rid, "b-only"]), clause(
            "MS-ISO-6",
            "delete_scope leaves other owners' records",
            left_b,
            want=sorted([rid, "b-only"]),
        )
        hits_b = await store.search(owner_b, q, limit=10)
        assert len(hits_b) == 2, clause(
            "MS-ISO-6",
            "other owners' records stay searchable",
            len(hits_b),
            want=2,
            detail=_ids(hits_b),
        )

    async def test_hostile_ids_never_collide(self, store: MemoryStore) -> None:
        """When this fails, ids are used as patterns or normalised (case folding,
        trimming, escaping that maps two ids to one key)."""
        hostile = [
            "x", "X", "x*", "x:", "x:y", "x y", "x ", " x", "x\\", "x|", "{x}", "x-1",
            "ü", "u", "名", "x%", "x_", "x'", 'x"', "x\n", "🙂",
        ]  # fmt: skip
        await store.add([_rec(store, h, content=f"content={h!r}") for h in hostile])
        for h in hostile:
            got = await store.get(OWNER, h)
            assert got is not None, clause("MS-ISO-7", f"id {h!r} reads back its own record", got)
            assert got.id == h, clause(
                "MS-ISO-7", f"id {h!r} reads back its own record", got.id, want=h, detail=got
            )
            assert got.content == f"content={h!r}", clause(
                "MS-ISO-7",
                f"id {h!r} reads back its own record",
                got.content,
                want=f"content={h!r}",
                detail=got,
            )
        deleted = await store.delete(OWNER, "x*")
        assert deleted is True, clause(
            "MS-ISO-7", "delete of the id 'x*' returns True", deleted, want=True
        )
        left = sorted(_page_ids(await store.list(OWNER, limit=100)))
        assert left == sorted(h for h in hostile if h != "x*"), clause(
            "MS-ISO-7",
            "deleting 'x*' deletes only that id",
            left,
            want=sorted(h for h in hostile if h != "x*"),
            detail=sorted(set(hostile) - set(left)),
        )

    @pytest.mark.parametrize(("first", "second"), LOOKALIKE_OWNERS, ids=repr)
    async def test_lookalike_owners_stay_separate(
        self, store: MemoryStore, first: str, second: str
    ) -> None:
        """When this fails, owners are trimmed, case-folded or Unicode-normalised
        (NFC/NFKC) somewhere, or `.` is treated as a separator: store and compare
        the owner string exactly as given."""
        dim = _dim(store)
        cid = "MS-ISO-10"
        for owner, degrees in ((first, 0), (second, 90)):
            record = _rec(store, "same", owner=owner, content=f"of {owner!r}")
            record = attrs.evolve(record, vector=_angle(dim, degrees))
            try:
                await store.add([record])
            except DuplicateRecord as exc:
                raise AssertionError(
                    clause(cid, f"owner {second!r} is not owner {first!r}: both add 'same'", exc)
                ) from exc
        for owner in (first, second):
            got = await store.get(owner, "same")
            assert got is not None, clause(cid, f"get({owner!r}) returns that owner's record", got)
            assert got.owner == owner, clause(
                cid, f"get({owner!r}) returns that owner's record", got.owner, want=owner
            )
            assert got.content == f"of {owner!r}", clause(
                cid,
                f"get({owner!r}) returns that owner's record",
                got.content,
                want=f"of {owner!r}",
            )
            listed = [(r.owner, r.content) for r in (await store.list(owner)).records]
            assert listed == [(owner, f"of {owner!r}")], clause(
                cid,
                f"list({owner!r}) holds only that owner's record",
                listed,
                want=[(owner, f"of {owner!r}")],
            )
            hits = await store.search(owner, _vec(dim, 1.0, 1.0), limit=5)
            found = [(h.record.owner, h.record.content) for h in hits]
            assert found == [(owner, f"of {owner!r}")], clause(
                cid,
                f"search({owner!r}) finds only that owner's record",
                found,
                want=[(owner, f"of {owner!r}")],
            )
        removed = await store.delete_scope(first)
        assert removed == 1, clause(
            cid, f"delete_scope({first!r}) removes one record", removed, want=1
        )
        kept = await store.get(second, "same")
        assert kept is not None, clause(
            cid, f"delete_scope({first!r}) leaves {second!r}'s record", kept
        )

    @pytest.mark.parametrize(("first", "second"), LOOKALIKE_IDS, ids=repr)
    async def test_lookalike_ids_stay_separate(
        self, store: MemoryStore, first: str, second: str
    ) -> None:
        """When this fails, ids are case-folded, trimmed or Unicode-normalised in a
        key or index (a case-insensitive collation, LOWER(), NFKC): compare ids exactly."""
        cid = "MS-ISO-11"
        for rid in (first, second):
            try:
                await store.add([_rec(store, rid, content=f"id {rid!r}")])
            except DuplicateRecord as exc:
                raise AssertionError(
                    clause(cid, f"id {second!r} is not id {first!r}: both can be added", exc)
                ) from exc
        for rid in (first, second):
            got = await store.get(OWNER, rid)
            assert got is not None, clause(cid, f"get of id {rid!r} returns its own record", got)
            assert (got.id, got.content) == (rid, f"id {rid!r}"), clause(
                cid,
                f"get of id {rid!r} returns its own record",
                (got.id, got.content),
                want=(rid, f"id {rid!r}"),
            )
        deleted = await store.delete(OWNER, first)
        assert deleted is True, clause(
            cid, f"delete of id {first!r} returns True", deleted, want=True
        )
        survivor = await store.get(OWNER, second)
        assert survivor is not None, clause(
            cid, f"deleting id {first!r} leaves id {second!r}", survivor
        )
        assert survivor.id == second, clause(
            cid, f"deleting id {first!r} leaves id {second!r}", survivor.id, want=second
        )

    async def test_hostile_namespace_filter_is_literal(self, store: MemoryStore) -> None:
        """When this fails, the namespace filter is matched as a pattern/prefix or
        spliced into query syntax: compare it for exact equality."""
        dim = _dim(store)
        namespaces = ["n", "n*", "n:x", "n x", "*", "n|m", "{n}", "-n", "ü名"]
        await store.add(
            [_rec(store, f"r{i}", namespace=n, created_at_ms=i) for i, n in enumerate(namespaces)]
        )
        for i, n in enumerate(namespaces):
            page = await store.list(OWNER, namespace=n)
            assert _page_ids(page) == [f"r{i}"], clause(
                "MS-ISO-8",
                f"list(namespace={n!r}) matches that namespace only",
                _page_ids(page),
                want=[f"r{i}"],
            )
            hits = await store.search(OWNER, _vec(dim, 1.0), namespace=n)
            assert _ids(hits) == [f"r{i}"], clause(
                "MS-ISO-8",
                f"search(namespace={n!r}) matches that namespace only",
                _ids(hits),
                want=[f"r{i}"],
            )
        count = await store.delete_scope(OWNER, namespace="*")
        assert count == 1, clause(
            "MS-ISO-8", "delete_scope(namespace='*') deletes one record", count, want=1
        )
        # "n" first: a prefix match would take "n*", "n:x", "n x" and "n|m" with it
        for n in namespaces:
            if n == "*":
                continue
            count = await store.delete_scope(OWNER, namespace=n)
            assert count == 1, clause(
                "MS-ISO-8", f"delete_scope(namespace={n!r}) deletes one record", count, want=1
            )

    @pytest.mark.parametrize(("first", "second"), LOOKALIKE_FILTERS, ids=repr)
    async def test_lookalike_namespaces_and_kinds_stay_separate(
        self, store: MemoryStore, first: str, second: str
    ) -> None:
        """When this fails, namespaces or kinds are case-folded, trimmed or
        Unicode-normalised in a key, index or filter (a case-insensitive
        collation, LOWER(), NFC/NFKC, `.strip()`): compare them exactly."""
        dim = _dim(store)
        cid = "MS-ISO-12"
        await store.add(
            [
                _rec(store, "ns-1", namespace=first, created_at_ms=1),
                _rec(store, "ns-2", namespace=second, created_at_ms=2),
                _rec(store, "kind-1", namespace="kinds", kind=first, created_at_ms=3),
                _rec(store, "kind-2", namespace="kinds", kind=second, created_at_ms=4),
            ]
        )
        for ns, rid in ((first, "ns-1"), (second, "ns-2")):
            listed = _page_ids(await store.list(OWNER, namespace=ns))
            assert listed == [rid], clause(
                cid, f"list(namespace={ns!r}) matches that namespace only", listed, want=[rid]
            )
            hits = _ids(await store.search(OWNER, _vec(dim, 1.0), namespace=ns))
            assert hits == [rid], clause(
                cid, f"search(namespace={ns!r}) matches that namespace only", hits, want=[rid]
            )
        for kind, rid in ((first, "kind-1"), (second, "kind-2")):
            listed = _page_ids(await store.list(OWNER, kinds=[kind]))
            assert listed == [rid], clause(
                cid, f"list(kinds=[{kind!r}]) matches that kind only", listed, want=[rid]
            )
            hits = _ids(await store.search(OWNER, _vec(dim, 1.0), kinds=[kind]))
            assert hits == [rid], clause(
                cid, f"search(kinds=[{kind!r}]) matches that kind only", hits, want=[rid]
            )
        counts = (
            await store.delete_scope(OWNER, namespace=second),
            await store.delete_scope(OWNER, kinds=[second]),
        )
        left = sorted(_page_ids(await store.list(OWNER)))
        assert (counts, left) == ((1, 1), ["kind-1", "ns-1"]), clause(
            cid,
            f"delete_scope of namespace/kind {second!r} leaves {first!r}",
            (counts, left),
            want=((1, 1), ["kind-1", "ns-1"]),
        )

    async def test_hostile_kinds_filter_is_literal(self, store: MemoryStore) -> None:
        """When this fails, kinds are matched as patterns or joined into a query
        without escaping (e.g. a tag query where `|` separates alternatives)."""
        dim = _dim(store)
        kinds = ["k", "k*", "k|j", "j", "k j", "{k}", "k-1", "ü"]
        await store.add([_rec(store, f"r{i}", kind=k) for i, k in enumerate(kinds)])
        for i, k in enumerate(kinds):
            page = await store.list(OWNER, kinds=[k])
            assert _page_ids(page) == [f"r{i}"], clause(
                "MS-ISO-9",
                f"list(kinds=[{k!r}]) matches that kind only",
                _page_ids(page),
                want=[f"r{i}"],
            )
            hits = await store.search(OWNER, _vec(dim, 1.0), kinds=[k])
            assert _ids(hits) == [f"r{i}"], clause(
                "MS-ISO-9",
                f"search(kinds=[{k!r}]) matches that kind only",
                _ids(hits),
                want=[f"r{i}"],
            )
        n = await store.delete_scope(OWNER, kinds=["k|j", "*"])
        assert n == 1, clause("MS-ISO-9", "delete_scope(kinds=['k|j', '*']) deletes one", n, want=1)

    # --------------------------------------------------------------- search

    async def _angles_fixture(self, store: MemoryStore) -> dict[str, float]:
        """Records at known angles from the query e0; returns id -> expected score."""
        dim = _dim(store)
        layout = {"r-f": 0.0, "r-a": 30.0, "r-d": 60.0, "r-b": 90.0, "r-e": 120.0, "r-c": 180.0}
        scales = {"r-f": 5.0, "r-a": 0.25, "r-d": 1.0, "r-b": 2.0, "r-e": 1.0, "r-c": 3.0}
        await store.add(
            [_rec(store, rid, vector=_angle(dim, deg, scales[rid])) for rid, deg in layout.items()]
        )
        return {rid: math.cos(math.radians(deg)) for rid, deg in layout.items()}

    async def test_search_orders_by_cosine_score(self, store: MemoryStore) -> None:
        """When this fails, check the distance metric (cosine, not L2 or inner
        product on unnormalised vectors), the distance-to-score conversion
        (score = 1 - cosine distance) and the sort direction."""
        dim = _dim(store)
        expected = await self._angles_fixture(store)
        hits = await store.search(OWNER, _vec(dim, 2.0), limit=10)
        want = sorted(expected, key=lambda rid: -expected[rid])
        assert _ids(hits) == want, clause(
            "MS-SEARCH-1", "results by score descending", _ids(hits), want=want
        )
        for h in hits:
            assert -1.0 - 1e-6 <= h.score <= 1.0 + 1e-6, clause(
                "MS-SEARCH-2", "scores lie in [-1, 1]", h.score, want=Shown("in [-1, 1]")
            )
            assert abs(h.score - expected[h.record.id]) <= SCORE_TOL, clause(
                "MS-SEARCH-2",
                f"the score of {h.record.id} is its cosine similarity regardless of norms",
                h.score,
                want=expected[h.record.id],
            )

    @pytest.mark.parametrize("limit", [10, 4, 2])
    async def test_search_ties_by_id_ascending(self, store: MemoryStore, limit: int) -> None:
        """When this fails, equal scores come back in insertion or engine order: add
        the id as a secondary sort key (and fetch past the cut to break ties)."""
        dim = _dim(store)
        tied = ["t3", "t1", "t5", "t0", "t4", "t2"]
        await store.add(
            [_rec(store, "best", vector=_vec(dim, 1.0))]
            + [_rec(store, t, vector=_angle(dim, 45)) for t in tied]
            + [_rec(store, "worst", vector=_angle(dim, 170))]
        )
        hits = await store.search(OWNER, _vec(dim, 1.0), limit=limit)
        want = (["best", *sorted(tied), "worst"])[:limit]
        assert _ids(hits) == want, clause(
            "MS-SEARCH-3", "equal scores are ordered by id ascending", _ids(hits), want=want
        )

    @pytest.mark.parametrize("min_score", [0.95, 0.3, 0.0, -0.6, -1.0])
    async def test_search_min_score(self, store: MemoryStore, min_score: float) -> None:
        """When this fails, min_score is applied to the distance instead of the
        score, with the wrong comparison direction, or tested for truth
        (`if min_score:` drops min_score=0.0)."""
        dim = _dim(store)
        expected = await self._angles_fixture(store)
        hits = await store.search(OWNER, _vec(dim, 1.0), limit=10, min_score=min_score)
        want = sorted(
            (r for r, s in expected.items() if s >= min_score), key=lambda r: -expected[r]
        )
        # A record whose exact score lies within rounding of min_score without
        # equalling it (r-b at 90 degrees scores cos(pi/2), about 6e-17, against
        # 0.0) may fall on either side of it: float32 storage decides.
        edge = {r for r, s in expected.items() if 0 < abs(s - min_score) <= SCORE_TOL}
        got = [i for i in _ids(hits) if i not in edge]
        assert got == [i for i in want if i not in edge], clause(
            "MS-SEARCH-4",
            f"min_score={min_score} keeps exactly scores >= it",
            _ids(hits),
            want=want,
        )

    @pytest.mark.parametrize("limit", [1, 2, 5])
    async def test_search_limit_returns_best(self, store: MemoryStore, limit: int) -> None:
        """When this fails, the limit is applied before ranking, or not at all."""
        dim = _dim(store)
        expected = await self._angles_fixture(store)
        hits = await store.search(OWNER, _vec(dim, 1.0), limit=limit)
        want = sorted(expected, key=lambda r: -expected[r])[:limit]
        assert _ids(hits) == want, clause(
            "MS-SEARCH-5", f"limit={limit} returns the best", _ids(hits), want=want
        )

    @pytest.mark.parametrize("limit", [0, -1])
    async def test_search_rejects_non_positive_limit(self, store: MemoryStore, limit: int) -> None:
        """When this fails, validate `limit` (require_positive) before querying."""
        await store.add([_rec(store, "x")])
        await _raises(
            "MS-SEARCH-6",
            f"search(limit={limit}) raises InvalidInput",
            InvalidInput,
            store.search(OWNER, _vec(_dim(store), 1.0), limit=limit),
        )

    async def test_search_fewer_matches_than_limit(self, store: MemoryStore) -> None:
        """When this fails, search padded results, repeated records, or failed when
        the engine had fewer than `limit` candidates."""
        dim = _dim(store)
        await store.add([_rec(store, f"f{i}", vector=_angle(dim, 20 * i)) for i in range(3)])
        hits = await store.search(OWNER, _vec(dim, 1.0), limit=50)
        assert _ids(hits) == ["f0", "f1", "f2"], clause(
            "MS-SEARCH-7",
            "fewer matches than limit returns each match once",
            _ids(hits),
            want=["f0", "f1", "f2"],
        )

    @pytest.mark.parametrize("by", ["namespace", "kinds", "namespace+kinds", "min_score"])
    async def test_search_filters_inside_query(self, store: MemoryStore, by: str) -> None:
        """When this fails, filters are applied after a top-k over all records (so
        better non-matching records crowd out the matches): filter inside the query."""
        dim = _dim(store)
        noise = [
            _rec(store, f"noise-{i:02d}", namespace="other", kind="noise", vector=_vec(dim, 1.0))
            for i in range(25)
        ]
        near = [
            _rec(store, "near-ns", namespace="target", kind="noise", vector=_angle(dim, 30)),
            _rec(store, "near-kind", namespace="other", kind="wanted", vector=_angle(dim, 40)),
            _rec(store, "near-both", namespace="target", kind="wanted", vector=_angle(dim, 50)),
            _rec(store, "far-both", namespace="target", kind="wanted2", vector=_angle(dim, 80)),
        ]
        await store.add(noise + near)
        q = _vec(dim, 1.0)
        if by == "namespace":
            hits = await store.search(OWNER, q, limit=3, namespace="target")
            want = ["near-ns", "near-both", "far-both"]
        elif by == "kinds":
            hits = await store.search(OWNER, q, limit=2, kinds=["wanted", "wanted2"])
            want = ["near-kind", "near-both"]
        elif by == "namespace+kinds":
            hits = await store.search(OWNER, q, limit=5, namespace="target", kinds=["wanted"])
            want = ["near-both"]
        else:
            hits = await store.search(OWNER, q, limit=3, namespace="target", min_score=0.6)
            want = ["near-ns", "near-both"]
        assert _ids(hits) == want, clause(
            "MS-SEARCH-8", f"the {by} filter applies inside the query", _ids(hits), want=want
        )

    async def test_search_unknown_owner_is_empty(self, store: MemoryStore) -> None:
        """When this fails, search of an owner without records raised or returned
        other owners' records."""
        await store.add([_rec(store, "x", owner=OTHER)])
        hits = await store.search(OWNER, _vec(_dim(store), 1.0))
        assert hits == [], clause(
            "MS-SEARCH-9", "an owner without records finds nothing", hits, want=[]
        )

    async def test_search_returns_complete_records(self, store: MemoryStore) -> None:
        """When this fails, search decodes records differently from get (missing
        attributes/context, truncated timestamps or vectors)."""
        dim = _dim(store)
        rec = _rec(
            store,
            "full",
            vector=_angle(dim, 10, 2.0),
            attributes={"a": [1, {"b": None}]},
            importance=0.75,
            context="ctx",
            created_at_ms=1234,
        )
        await store.add([rec])
        hits = await store.search(OWNER, _vec(dim, 1.0))
        assert len(hits) == 1, clause(
            "MS-SEARCH-10", "the record is found", len(hits), want=1, detail=_ids(hits)
        )
        assert_same_record("MS-SEARCH-10", hits[0].record, rec)

    # ----------------------------------------------------------------- list

    async def _list_fixture(self, store: MemoryStore) -> list[MemoryRecord]:
        """12 records with repeated created_at values; returns them in list order."""
        order = [5, 1, 3, 3, 0, 7, 3, 1, 9, 7, 2, 3]
        records = [_rec(store, f"l{i:02d}", created_at_ms=t * 1000) for i, t in enumerate(order)]
        random.Random(3).shuffle(records)
        await store.add(records)
        return sorted(records, key=lambda r: (r.created_at, r.id), reverse=True)

    async def test_list_orders_by_created_desc_then_id_desc(self, store: MemoryStore) -> None:
        """When this fails, list sorts by insertion order or by id only: sort by
        (created_at desc, id desc)."""
        want = [r.id for r in await self._list_fixture(store)]
        page = await store.list(OWNER, limit=50)
        assert _page_ids(page) == want, clause(
            "MS-LIST-1", "list orders by created_at desc, then id desc", _page_ids(page), want=want
        )
        assert page.next_cursor is None, clause(
            "MS-LIST-2", "next_cursor is None on the last page", page.next_cursor, want=None
        )

    @pytest.mark.parametrize("limit", [1, 3, 4, 5, 12])
    async def test_list_pagination(self, store: MemoryStore, limit: int) -> None:
        """When this fails, the keyset cursor is wrong: it must encode the last
        record's (created_at, id) and the next page start strictly after it
        (ties on created_at broken by id)."""
        want = [r.id for r in await self._list_fixture(store)]
        got: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            page = await store.list(OWNER, limit=limit, cursor=cursor)
            pages += 1
            assert len(page.records) <= limit, clause(
                "MS-LIST-2",
                f"a page holds at most limit={limit}",
                len(page.records),
                want=Shown(f"<= {limit}"),
            )
            got.extend(_page_ids(page))
            if page.next_cursor is None:
                break
            assert len(page.records) == limit, clause(
                "MS-LIST-2", "every page but the last is full", len(page.records), want=limit
            )
            cursor = page.next_cursor
            assert pages <= len(want), clause("MS-LIST-2", "pagination terminates", pages)
        assert got == want, clause(
            "MS-LIST-2", "pages concatenate to the full order, each record once", got, want=want
        )
        assert pages == max(1, math.ceil(len(want) / limit)), clause(
            "MS-LIST-2",
            "the last page (even when exactly full) has next_cursor None",
            pages,
            want=max(1, math.ceil(len(want) / limit)),
        )

    async def test_list_pagination_stable_while_adding(self, store: MemoryStore) -> None:
        """When this fails, the cursor is an offset (or otherwise positional): new
        records shift pages. Use a keyset cursor on (created_at, id)."""
        before = await self._list_fixture(store)
        pre_ids = [r.id for r in before]
        seen: list[MemoryRecord] = []
        cursor: str | None = None
        round_ = 0
        while True:
            page = await store.list(OWNER, limit=3, cursor=cursor)
            seen.extend(page.records)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
            round_ += 1
            # Each round adds one record behind the cursor and reads three: a
            # cursor that does not advance would page forever, so stop it here.
            ids = [r.id for r in seen]
            twice = sorted({i for i in ids if ids.count(i) > 1})
            assert not twice, clause(
                "MS-LIST-3", "no record appears twice across pages", twice, want=[], detail=ids
            )
            assert round_ <= len(pre_ids), clause(
                "MS-LIST-3", "pagination terminates", round_, want=Shown(f"<= {len(pre_ids)}")
            )
            last = page.records[-1]
            await store.add(
                [
                    _rec(store, f"new-top-{round_}", created_at_ms=100_000 + round_),
                    _rec(store, f"new-bottom-{round_}", created_at_ms=-100_000 - round_),
                    attrs.evolve(last, id=last.id + "~tie-ahead", content="tie"),
                ]
            )
        ids = [r.id for r in seen]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        assert not twice, clause(
            "MS-LIST-3", "no record appears twice across pages", twice, want=[], detail=ids
        )
        missing = [i for i in pre_ids if i not in ids]
        assert not missing, clause(
            "MS-LIST-3", "no pre-existing record is skipped", missing, want=Shown("nothing")
        )
        keys = [(r.created_at, r.id) for r in seen]
        ordered = sorted(seen, key=lambda r: (r.created_at, r.id), reverse=True)
        assert keys == sorted(keys, reverse=True), clause(
            "MS-LIST-3",
            "pages continue in list order after the cursor",
            ids,
            want=[r.id for r in ordered],
        )

    async def test_list_pages_while_writers_write(self, store: MemoryStore) -> None:
        """When this fails, one `list` call reads the backend in several steps
        that do not see the same records (an offset continued after a write, a
        count then a bounded read): a record deleted or added in between shifts
        the rest, so a record is skipped or repeated. Read each page from one
        consistent view, or continue by key (created_at, id), never by position.
        Export and migrate page through everything while agents keep writing."""
        # Three rounds, one owner each: a positional read is caught on most.
        for owner in (OWNER, OTHER, f"{OWNER}/3"):
            await self._page_while_writing(store, owner)

    async def _page_while_writing(self, store: MemoryStore, owner: str) -> None:
        # Two runs of equal created_at, so that pages cut through ties; in each,
        # records written meanwhile ("v" deleted, "z" added) sort ahead of the
        # stable "s" ones, where a positional read shifts them.
        stable = [_rec(store, f"s{i:03d}", owner=owner, created_at_ms=i % 2) for i in range(60)]
        volatile = [_rec(store, f"v{i:03d}", owner=owner, created_at_ms=i % 2) for i in range(60)]
        await store.add([*stable, *volatile])
        stable_ids = {r.id for r in stable}
        done = asyncio.Event()

        doomed = list(volatile)
        random.Random(9).shuffle(doomed)

        async def writer(w: int) -> None:
            n = 0
            while not done.is_set():
                if doomed:
                    await store.delete(owner, doomed.pop().id)
                new = _rec(store, f"z{n:03d}-{w}", owner=owner, created_at_ms=n % 2)
                await store.add([new])
                if n % 3 == 0:
                    kept = stable[(n * 7 + w) % len(stable)]
                    await store.update(attrs.evolve(kept, content=f"edited {n}"))
                n += 1
                await asyncio.sleep(0)

        writers = [asyncio.create_task(writer(w)) for w in range(3)]
        seen: list[MemoryRecord] = []
        try:
            cursor: str | None = None
            for _ in range(1000):
                page = await store.list(owner, limit=4, cursor=cursor)
                seen.extend(page.records)
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
                await asyncio.sleep(0)
        finally:
            done.set()
            await asyncio.gather(*writers)
        ids = [r.id for r in seen]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        assert not twice, clause(
            "MS-LIST-9", "no record is returned twice while others write", twice, want=[]
        )
        missing = sorted(stable_ids - set(ids))
        assert not missing, clause(
            "MS-LIST-9",
            "every record stored for the whole run is returned while others write",
            missing,
            want=[],
        )
        keys = [(r.created_at, r.id) for r in seen]
        assert keys == sorted(keys, reverse=True), clause(
            "MS-LIST-9", "pages written meanwhile still come in list order", ids
        )

    async def test_list_filters(self, store: MemoryStore) -> None:
        """When this fails, list ignores namespace/kinds or combines them wrongly
        with the cursor."""
        records = [
            _rec(store, f"{ns}-{k}-{i}", namespace=ns, kind=k, created_at_ms=i)
            for ns in ("a", "b")
            for k in ("x", "y", "z")
            for i in range(3)
        ]
        await store.add(records)
        for namespace, kinds in (("a", None), (None, ["x", "z"]), ("b", ["y"])):
            want = [
                r.id
                for r in sorted(records, key=lambda r: (r.created_at, r.id), reverse=True)
                if (namespace is None or r.namespace == namespace)
                and (kinds is None or r.kind in kinds)
            ]
            got = [
                r.id
                for r in await _all_pages(
                    store, OWNER, limit=2, namespace=namespace, kinds=kinds, cid="MS-LIST-4"
                )
            ]
            assert got == want, clause(
                "MS-LIST-4", f"list(namespace={namespace!r}, kinds={kinds!r}) pages", got, want=want
            )

    @pytest.mark.parametrize("limit", [0, -5])
    async def test_list_rejects_non_positive_limit(self, store: MemoryStore, limit: int) -> None:
        """When this fails, validate `limit` (require_positive) in list."""
        await _raises(
            "MS-LIST-5",
            f"list(limit={limit}) raises InvalidInput",
            InvalidInput,
            store.list(OWNER, limit=limit),
        )

    async def test_list_unknown_owner_is_empty_last_page(self, store: MemoryStore) -> None:
        """When this fails, list of an owner without records raised or returned a cursor."""
        await store.add([_rec(store, "x", owner=OTHER)])
        page = await store.list(OWNER)
        assert page.records == (), clause(
            "MS-LIST-6", "an owner without records gets an empty last page", page, want=()
        )
        assert page.next_cursor is None, clause(
            "MS-LIST-6",
            "an owner without records gets an empty last page",
            page.next_cursor,
            want=None,
            detail=page,
        )

    async def test_list_rejects_malformed_cursor(self, store: MemoryStore) -> None:
        """When this fails, decode cursors with `domain.ranking.decode_cursor` (which
        raises InvalidInput) instead of failing with a raw error."""
        await store.add([_rec(store, "x")])
        await _raises(
            "MS-LIST-7",
            "a malformed cursor raises InvalidInput",
            InvalidInput,
            store.list(OWNER, cursor="not a cursor!"),
        )

    @pytest.mark.parametrize("cursor", [123, b"abc", ["x"], 1.5])
    async def test_list_cursor_of_another_type_is_invalid(
        self, store: MemoryStore, cursor: object
    ) -> None:
        """When this fails, the cursor is decoded without checking that it is a
        string first (an AttributeError or TypeError escapes)."""
        exc = await _raises(
            "MS-LIST-8",
            f"list(cursor={cursor!r}) raises InvalidInput",
            InvalidInput,
            store.list(OWNER, cursor=cursor),  # type: ignore[arg-type]
        )
        assert "cursor" in str(exc), clause(
            "MS-LIST-8",
            "the message names `cursor`",
            str(exc),
            want=Shown("a message containing 'cursor'"),
        )

    @pytest.mark.parametrize("limit", [MAX_LIMIT + 1, 2**63, True])
    async def test_limits_above_the_maximum_are_invalid(
        self, store: MemoryStore, limit: int
    ) -> None:
        """When this fails, a limit is passed to the engine unchecked: check it is
        an int (not a bool) in [1, MAX_LIMIT] before any query."""
        await store.add([_rec(store, "a")])
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "search": lambda: store.search(OWNER, _vec(_dim(store), 1.0), limit=limit),
            "list": lambda: store.list(OWNER, limit=limit),
        }
        if self.capabilities.keyword_search and isinstance(store, KeywordSearch):
            kw = store
            calls["search_text"] = lambda: kw.search_text(OWNER, "zebra", limit=limit)
        for name, call in calls.items():
            exc = await _raises(
                "MS-BOUND-1", f"{name}(limit={limit!r}) raises InvalidInput", InvalidInput, call()
            )
            assert "limit" in str(exc), clause(
                "MS-BOUND-1",
                "the message names `limit`",
                str(exc),
                want=Shown("a message containing 'limit'"),
            )
        hits = await store.search(OWNER, _vec(_dim(store), 1.0), limit=MAX_LIMIT)
        assert _ids(hits) == ["a"], clause(
            "MS-BOUND-1", "search(limit=MAX_LIMIT)", _ids(hits), want=["a"]
        )
        page = await store.list(OWNER, limit=MAX_LIMIT)
        assert [r.id for r in page.records] == ["a"], clause(
            "MS-BOUND-1",
            "list(limit=MAX_LIMIT) is accepted",
            [r.id for r in page.records],
            want=["a"],
            detail=page,
        )

    @pytest.mark.parametrize(
        "field", ["owner", "id", "namespace", "kind", "content", "context", "attributes"]
    )
    async def test_nul_in_text_is_invalid_and_writes_nothing(
        self, store: MemoryStore, field: str
    ) -> None:
        """When this fails, NUL reaches the backend (PostgreSQL refuses it with a
        server error): reject it in the argument checks, on every backend alike."""
        value: object = {"k": "a\x00b"} if field == "attributes" else "a\x00b"
        bad = _unchecked(_rec(store, "n1"), **{field: value})
        exc = await _raises(
            "MS-BOUND-2",
            f"add with NUL in {field} raises InvalidInput",
            InvalidInput,
            store.add([bad]),
        )
        assert field in str(exc), clause(
            "MS-BOUND-2",
            f"the message names {field}",
            str(exc),
            want=Shown(f"a message containing {field!r}"),
        )
        page = await store.list(OWNER)
        assert page.records == (), clause("MS-BOUND-2", "nothing is written", page, want=())

    async def test_ids_at_the_maximum_round_trip(self, store: MemoryStore) -> None:
        """When this fails, the backend cannot hold MAX_ID_BYTES in every id field
        of one record (e.g. a key or index entry over the engine's size limit, or
        a column narrower than the maximum): widen it so every bound id fits."""
        owner, namespace, rid, kind = (max_id(f"ms-{f}") for f in ("owner", "ns", "id", "kind"))
        rec = _rec(store, rid, owner=owner, namespace=namespace, kind=kind, content="zebra")
        await store.add([rec])
        assert_same_record("MS-BOUND-3", await store.get(owner, rid), rec)
        page = await store.list(owner, namespace=namespace, kinds=[kind])
        assert _page_ids(page) == [rid], clause(
            "MS-BOUND-3", "list finds it", _page_ids(page), want=[rid], detail=page
        )
        hits = await store.search(owner, _vec(_dim(store), 1.0), namespace=namespace, kinds=[kind])
        assert _ids(hits) == [rid], clause("MS-BOUND-3", "search finds it", _ids(hits), want=[rid])
        if self.capabilities.keyword_search and isinstance(store, KeywordSearch):
            found = await store.search_text(owner, "zebra", namespace=namespace, kinds=[kind])
            assert _ids(found) == [rid], clause(
                "MS-BOUND-3", "search_text finds it", _ids(found), want=[rid]
            )
        changed = attrs.evolve(rec, content="changed")
        await store.update(changed)
        assert_same_record("MS-BOUND-3", await store.get(owner, rid), changed)
        assert await store.delete(owner, rid), clause("MS-BOUND-3", "delete finds it")
        left = await store.get(owner, rid)
        assert left is None, clause("MS-BOUND-3", "delete removes it", left, want=None)

    async def test_ids_over_the_maximum_are_invalid(self, store: MemoryStore) -> None:
        """When this fails, an id over MAX_ID_BYTES reaches the engine (PostgreSQL
        then fails with a server error a caller would retry forever): check the
        size in the argument checks (`require_id`/`require_scope`), before any I/O."""
        seed = _rec(store, "seed")
        await store.add([seed])
        long = max_id("ms-over") + "x"
        q = _vec(_dim(store), 1.0)
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            *(
                (f, lambda f=f: store.add([_unchecked(_rec(store, "new"), **{f: long})]))
                for f in ("owner", "namespace", "id", "kind")
            ),
            *(
                (f, lambda f=f: store.update(_unchecked(seed, **{f: long})))
                for f in ("namespace", "kind")
            ),
            ("owner", lambda: store.get(long, "seed")),
            ("id", lambda: store.get(OWNER, long)),
            ("owner", lambda: store.delete(long, "seed")),
            ("id", lambda: store.delete(OWNER, long)),
            ("owner", lambda: store.search(long, q)),
            ("namespace", lambda: store.search(OWNER, q, namespace=long)),
            ("kinds", lambda: store.search(OWNER, q, kinds=[long])),
            ("owner", lambda: store.list(long)),
            ("namespace", lambda: store.list(OWNER, namespace=long)),
            ("kinds", lambda: store.list(OWNER, kinds=[long])),
            ("owner", lambda: store.delete_scope(long)),
            ("namespace", lambda: store.delete_scope(OWNER, namespace=long)),
            ("kinds", lambda: store.delete_scope(OWNER, kinds=[long])),
        ]
        if self.capabilities.keyword_search and isinstance(store, KeywordSearch):
            kw = store
            calls += [
                ("owner", lambda: kw.search_text(long, "zebra")),
                ("namespace", lambda: kw.search_text(OWNER, "zebra", namespace=long)),
                ("kinds", lambda: kw.search_text(OWNER, "zebra", kinds=[long])),
            ]
        for field, call in calls:
            await expect_too_long("MS-BOUND-4", field, call())
        assert_same_record("MS-BOUND-4", await store.get(OWNER, "seed"), seed)
        page = await store.list(OWNER)
        assert _page_ids(page) == ["seed"], clause(
            "MS-BOUND-4", "nothing is written", _page_ids(page), want=["seed"], detail=page
        )

    # ------------------------------------------------------------ dimension

    @pytest.mark.parametrize("delta", [1, -1])
    async def test_add_dimension_mismatch(self, store: MemoryStore, delta: int) -> None:
        """When this fails, add does not compare each vector with space.dimension
        before writing (check the whole batch first)."""
        dim = _dim(store)
        good = _rec(store, "good")
        bad = _rec(store, "bad", vector=np.ones(dim + delta, dtype=np.float32))
        await _raises(
            "MS-DIM-1",
            f"add with a vector of dimension {dim + delta} raises DimensionMismatch",
            DimensionMismatch,
            store.add([good, bad]),
        )
        page = await store.list(OWNER)
        assert not page.records, clause(
            "MS-DIM-1",
            "a batch with a wrongly sized vector writes nothing",
            _page_ids(page),
            want=Shown("nothing"),
        )

    @pytest.mark.parametrize("delta", [1, -1])
    async def test_update_dimension_mismatch(self, store: MemoryStore, delta: int) -> None:
        """When this fails, update does not check the vector's dimension."""
        dim = _dim(store)
        rec = _rec(store, "u")
        await store.add([rec])
        await _raises(
            "MS-DIM-2",
            "update with another dimension raises DimensionMismatch",
            DimensionMismatch,
            store.update(attrs.evolve(rec, vector=np.ones(dim + delta, dtype=np.float32))),
        )
        assert_same_record("MS-DIM-2", await store.get(OWNER, "u"), rec)

    @pytest.mark.parametrize("delta", [1, -1])
    async def test_search_dimension_mismatch(self, store: MemoryStore, delta: int) -> None:
        """When this fails, search does not check the query vector's dimension."""
        dim = _dim(store)
        await store.add([_rec(store, "s")])
        await _raises(
            "MS-DIM-3",
            "search with another dimension raises DimensionMismatch",
            DimensionMismatch,
            store.search(OWNER, np.ones(dim + delta, dtype=np.float32)),
        )

    # ---------------------------------------------------------------- close

    @pytest.mark.parametrize(
        "op", ["add", "get", "update", "delete", "search", "list", "delete_scope", "ping"]
    )
    async def test_operation_after_close_raises(
        self, store: MemoryStore, reopen: Reopen | None, op: str
    ) -> None:
        """When this fails, the operation does not check the closed flag first (use
        `Lifecycle.op()`); with reopen, an add rejected after close was still written."""
        await store.add([_rec(store, "seed")])
        await store.close()
        await _raises(
            "MS-CLOSE-1",
            f"{op} after close raises StoreClosed",
            StoreClosed,
            _closed_op(store, op),
        )
        if op == "add" and self.capabilities.reopen and reopen is not None:
            await asyncio.sleep(0.05)
            other = await reopen()
            try:
                got = await other.get(OWNER, "after-close")
                assert got is None, clause(
                    "MS-CLOSE-4", "an add rejected after close is not persisted", got, want=None
                )
            finally:
                await other.close()

    async def test_close_is_idempotent(self, store: MemoryStore) -> None:
        """When this fails, a second close (or two concurrent ones) raised: close
        must be idempotent (`Lifecycle.begin_close` returns False to later callers)."""
        await store.close()
        try:
            await store.close()
            await asyncio.gather(store.close(), store.close())
        except Exception as exc:
            raise AssertionError(clause("MS-CLOSE-2", "close is idempotent", exc)) from exc

    async def test_close_racing_writes(self, store: MemoryStore, reopen: Reopen | None) -> None:
        """When this fails, close does not wait for in-flight writes, or a write
        that started after close still lands: gate every operation with
        `Lifecycle.op()` and release resources only after `begin_close()`."""
        opener = self._reopen(reopen, "MS-CLOSE-3")
        log: list[tuple[str, str]] = []
        records = [_rec(store, f"race-{i:03d}") for i in range(60)]

        async def write(rec: MemoryRecord) -> None:
            try:
                await store.add([rec])
            except StoreClosed:
                log.append(("rejected", rec.id))
                return
            log.append(("ok", rec.id))

        async def closer() -> None:
            await store.close()
            log.append(("closed", ""))

        tasks = [asyncio.create_task(write(r)) for r in records[:30]]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(closer()))
        tasks += [asyncio.create_task(write(r)) for r in records[30:]]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        assert not errors, clause(
            "MS-CLOSE-3",
            "a write racing close succeeds or raises StoreClosed",
            errors[:3],
            want=Shown("nothing"),
        )
        closed_at = log.index(("closed", ""))
        late = [rid for kind, rid in log[closed_at:] if kind == "ok"]
        assert not late, clause(
            "MS-CLOSE-3", "no write completes after close returned", late, want=Shown("nothing")
        )
        ok = {rid for kind, rid in log if kind == "ok"}
        rejected = {rid for kind, rid in log if kind == "rejected"}
        await asyncio.sleep(0.05)
        other = await opener()
        try:
            for rid in sorted(ok):
                assert await other.get(OWNER, rid) is not None, clause(
                    "MS-CLOSE-3", "a write completed before close persists", rid
                )
            for rid in sorted(rejected):
                got = await other.get(OWNER, rid)
                assert got is None, clause(
                    "MS-CLOSE-3",
                    "a write rejected by close is never persisted",
                    got,
                    want=None,
                    detail=rid,
                )
        finally:
            await other.close()

    async def test_close_keeps_data(self, store: MemoryStore, reopen: Reopen | None) -> None:
        """When this fails, close deletes data (e.g. drops a temporary index)
        instead of only releasing the connection."""
        opener = self._reopen(reopen, "MS-CLOSE-5")
        rec = _rec(store, "durable")
        await store.add([rec])
        await store.close()
        other = await opener()
        try:
            assert_same_record("MS-CLOSE-5", await other.get(OWNER, "durable"), rec)
        finally:
            await other.close()

    async def test_ping_on_open_store(self, store: MemoryStore) -> None:
        """When this fails, ping raised on a healthy, open store."""
        try:
            await store.ping()
        except Exception as exc:
            raise AssertionError(
                clause("MS-CLOSE-6", "ping succeeds on an open store", exc)
            ) from exc

    # -------------------------------------------------------- keyword search

    def _keyword(self, store: MemoryStore) -> KeywordSearch:
        require_capability(
            self.capabilities.keyword_search, "keyword_search", "no full-text search"
        )
        if not isinstance(store, KeywordSearch):
            pytest.fail(clause("MS-KW-0", "keyword_search is declared: implement search_text"))
        return store

    async def test_keyword_finds_term_in_content(self, store: MemoryStore) -> None:
        """When this fails, the full-text index does not cover `content` or the
        query is not tokenised like the documents."""
        kw = self._keyword(store)
        await store.add(
            [
                _rec(store, "k1", content="the quick zebra crosses the road"),
                _rec(store, "k2", content="a slow turtle"),
            ]
        )
        hits = await kw.search_text(OWNER, "zebra")
        assert _ids(hits)[:1] == ["k1"], clause(
            "MS-KW-1", "a content term is found", _ids(hits)[:1], want=["k1"], detail=_ids(hits)
        )
        assert "k2" not in _ids(hits) or hits[-1].score < hits[0].score, clause(
            "MS-KW-1", "a record without the term does not tie with one with it", _ids(hits)
        )

    async def test_keyword_finds_term_in_context_not_returned_as_content(
        self, store: MemoryStore
    ) -> None:
        """When this fails, `context` is not indexed, or is stored into/merged with
        `content` (context is searchable but never part of the content)."""
        kw = self._keyword(store)
        rec = _rec(store, "c1", content="plain words only", context="earlier turn: aardvark")
        await store.add([rec, _rec(store, "c2", content="nothing here")])
        hits = await kw.search_text(OWNER, "aardvark")
        assert _ids(hits)[:1] == ["c1"], clause(
            "MS-KW-2", "a context term is found", _ids(hits)[:1], want=["c1"], detail=_ids(hits)
        )
        assert hits[0].record.content == "plain words only", clause(
            "MS-KW-3",
            "context is never returned as content",
            hits[0].record.content,
            want="plain words only",
        )
        assert hits[0].record.context == rec.context, clause(
            "MS-KW-3", "context round-trips separately", hits[0].record.context, want=rec.context
        )

    @pytest.mark.parametrize(("owner_a", "owner_b", "rid"), _ISOLATION_CASES[:6])
    async def test_keyword_isolation(
        self, store: MemoryStore, owner_a: str, owner_b: str, rid: str
    ) -> None:
        """When this fails, the owner is not part of the full-text query (or is
        spliced in unescaped)."""
        kw = self._keyword(store)
        await store.add(
            [
                _rec(store, rid, owner=owner_a, content="zebra in a"),
                _rec(store, rid, owner=owner_b, content="zebra in b"),
                _rec(store, "b2", owner=owner_b, content="zebra zebra zebra"),
            ]
        )
        hits = await kw.search_text(owner_a, "zebra", limit=10)
        assert [(h.record.owner, h.record.content) for h in hits] == [(owner_a, "zebra in a")], (
            clause(
                "MS-KW-4",
                "keyword search returns only the owner's records",
                [(h.record.owner, h.record.content) for h in hits],
                want=[(owner_a, "zebra in a")],
                detail=_ids(hits),
            )
        )

    async def test_keyword_filters(self, store: MemoryStore) -> None:
        """When this fails, namespace/kinds are applied after the full-text top-k
        (or not at all): put them inside the query."""
        kw = self._keyword(store)
        noise = [
            _rec(store, f"n{i}", namespace="other", kind="noise", content="zebra zebra zebra")
            for i in range(15)
        ]
        await store.add(
            [
                *noise,
                _rec(store, "in-ns", namespace="target", kind="noise", content="zebra"),
                _rec(store, "in-kind", namespace="other", kind="wanted", content="zebra"),
                _rec(store, "in-both", namespace="target", kind="wanted", content="zebra"),
            ]
        )
        got = set(_ids(await kw.search_text(OWNER, "zebra", limit=2, namespace="target")))
        assert got == {"in-ns", "in-both"}, clause(
            "MS-KW-5", "namespace filter", sorted(got), want=sorted({"in-ns", "in-both"})
        )
        got = set(_ids(await kw.search_text(OWNER, "zebra", limit=2, kinds=["wanted"])))
        assert got == {"in-kind", "in-both"}, clause(
            "MS-KW-5", "kinds filter", sorted(got), want=sorted({"in-kind", "in-both"})
        )
        got = set(_ids(await kw.search_text(OWNER, "zebra", namespace="target", kinds=["wanted"])))
        assert got == {"in-both"}, clause(
            "MS-KW-5", "namespace + kinds filter", sorted(got), want=sorted({"in-both"})
        )

    async def test_keyword_deleted_not_findable(self, store: MemoryStore) -> None:
        """When this fails, the full-text index keeps deleted documents."""
        kw = self._keyword(store)
        await store.add(
            [
                _rec(store, "d1", namespace="gone", content="zebra"),
                _rec(store, "d2", namespace="gone", context="zebra"),
                _rec(store, "d3", namespace="kept", content="zebra"),
                _rec(store, "d4", namespace="kept", content="zebra again"),
            ]
        )
        await store.delete_scope(OWNER, namespace="gone")
        await store.delete(OWNER, "d4")
        got = _ids(await kw.search_text(OWNER, "zebra"))
        assert got == ["d3"], clause(
            "MS-KW-6", "deleted records are not findable", got, want=["d3"]
        )

    async def test_keyword_more_terms_rank_higher(self, store: MemoryStore) -> None:
        """When this fails, the ranking does not reward matching terms (check the
        scoring direction: higher is better)."""
        kw = self._keyword(store)
        await store.add(
            [
                _rec(store, "a-one", content="kiwi is a fruit"),
                _rec(store, "b-both", content="giraffe eats kiwi"),
                _rec(store, "c-none", content="nothing relevant here"),
            ]
        )
        hits = await kw.search_text(OWNER, "giraffe kiwi")
        ids = _ids(hits)
        assert ids[:2] == ["b-both", "a-one"], clause(
            "MS-KW-7",
            "a record with more query terms ranks higher",
            ids[:2],
            want=["b-both", "a-one"],
            detail=ids,
        )
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True), clause(
            "MS-KW-7",
            "scores are descending (higher is better)",
            scores,
            want=sorted(scores, reverse=True),
        )

    @pytest.mark.parametrize(
        ("content", "query"),
        [("Zebra crossing", "zebra"), ("quiet lagoon", "LAGOON"), ("Über Café", "über café")],
        ids=["upper-text", "upper-query", "non-ascii"],
    )
    async def test_keyword_ignores_case(self, store: MemoryStore, content: str, query: str) -> None:
        """When this fails, the keyword index or the query is not case-folded the
        same way (e.g. a case-sensitive LIKE/GLOB, or tokens lower-cased on one side
        only): lower-case (`domain.lexical`) both the indexed text and the query terms."""
        kw = self._keyword(store)
        await store.add([_rec(store, "case", content=content), _rec(store, "other", content="x")])
        hits = await kw.search_text(OWNER, query)
        assert _ids(hits)[:1] == ["case"], clause(
            "MS-KW-9",
            f"search_text({query!r}) finds {content!r}",
            _ids(hits)[:1],
            want=["case"],
            detail=_ids(hits),
        )

    async def test_keyword_folds_unicode_case_as_the_oracle(self, store: MemoryStore) -> None:
        """When this fails, letter case is folded for ASCII only (e.g. an engine's
        `lower()` under the C locale, SQLite's NOCASE), or further than the oracle
        (case folding "ß" to "ss"): fold each word with the `domain.lexical` rules
        (`tokenize`, `query_terms`) on both the indexed text and the query."""
        kw = self._keyword(store)
        await store.add(
            [_rec(store, f"u{i}", content=c) for i, (c, _, _) in enumerate(UNICODE_CASE)]
            + [_rec(store, "other", content="x")]
        )
        for i, (content, query, found) in enumerate(UNICODE_CASE):
            got = _ids(await kw.search_text(OWNER, query))
            want = [f"u{i}"] if found else []
            rule = f"search_text({query!r}) {'finds' if found else 'does not find'} {content!r}"
            assert got == want, clause("MS-KW-13", rule, got, want=want)

    @property_settings(max_examples=15)
    # Pinned: a final capital sigma lowers to "ς", so "οδοσ" does not find "ΟΔΟΣ"
    # (PostgreSQL lowers it to a non-final sigma); "İ" lowers to "i" + U+0307 (RediSearch missed
    # the escaped combining dot); "ẞ" lowers to "ß", never to "ss".
    @example(words=[("ΟΔΟΣ", [True] * 6, [False] * 6)])
    @example(words=[("İZMIR", [True] * 6, [True] + [False] * 5)])
    @example(words=[("ẞTRAẞE", [True] * 6, [False] * 6), ("STRASSE", [True] * 6, [False] * 6)])
    @given(
        words=st.lists(
            st.tuples(_CASE_WORDS, _RECASE, _RECASE),
            min_size=1,
            max_size=4,
            unique_by=lambda t: t[0],
        )
    )
    async def test_keyword_case_property(
        self, store: MemoryStore, words: list[tuple[str, list[bool], list[bool]]]
    ) -> None:
        """Property: when this fails, the falsifying words show which letters this
        backend folds unlike the in-memory oracle (`domain.lexical`: `str.lower`
        of each word): fold with those rules on both sides."""
        from agent_memory.adapters.memory import InMemoryMemoryStore

        kw = self._keyword(store)
        owner = f"case-{random.getrandbits(64):x}"
        oracle = InMemoryMemoryStore(space=store.space)
        records = [
            _rec(store, f"w{i}", owner=owner, content=_recase(word, up))
            for i, (word, up, _) in enumerate(words)
        ]
        await store.add(records)
        await oracle.add(records)
        try:
            for word, _, down in words:
                query = _recase(word, down)
                got = sorted(_ids(await kw.search_text(owner, query, limit=10)))
                want = sorted(_ids(await oracle.search_text(owner, query, limit=10)))
                assert got == want, clause(
                    "MS-KW-14",
                    f"search_text({query!r}) over {[r.content for r in records]!r} finds "
                    "what the oracle finds",
                    got,
                    want=want,
                )
        finally:
            await store.delete_scope(owner)
            await oracle.close()

    async def test_keyword_ranking_depends_only_on_owner(self, store: MemoryStore) -> None:
        """When this fails, the keyword statistics (record count, average length,
        document frequencies) are counted over more than the owner's live records:
        other owners' records, or deleted records still counted until a garbage
        collection (index-wide BM25). Compute them over the owner's filtered records."""
        kw = self._keyword(store)
        texts = [
            "apple cherry pie",
            "apple tart",
            "cherry jam on warm toast",
            "apple apple crumble",
            "banana split",
            "cherry",
        ]
        await store.add([_rec(store, f"a{i}", content=t) for i, t in enumerate(texts)])

        async def rankings() -> list[list[tuple[str, float]]]:
            out = []
            for namespace, kinds in ((None, None), (NS, [KIND])):
                hits = await kw.search_text(
                    OWNER, "apple cherry", limit=4, namespace=namespace, kinds=kinds
                )
                out.append([(h.record.id, h.score) for h in hits])
            return out

        def same(got: list[list[tuple[str, float]]], want: list[list[tuple[str, float]]]) -> bool:
            return all(
                [i for i, _ in g] == [i for i, _ in w]
                and all(
                    math.isclose(a, b, rel_tol=1e-9) for (_, a), (_, b) in zip(g, w, strict=True)
                )
                for g, w in zip(got, want, strict=True)
            )

        base = await rankings()
        assert len(base[0]) == 4, clause(
            "MS-KW-12", "four of five records match", len(base[0]), want=4, detail=base[0]
        )
        assert len({s for _, s in base[0]}) > 1, clause(
            "MS-KW-12", "the owner's records rank with distinct scores", base[0]
        )
        noise = [
            _rec(store, f"b{i:03d}", owner=OTHER, content=f"cherry cherry noise number {i}")
            for i in range(300)
        ]
        await store.add(noise)
        got = await rankings()
        assert same(got, base), clause(
            "MS-KW-12", "another owner's adds change nothing", {"before": base, "after": got}
        )
        for r in noise[:100]:
            await store.delete(OTHER, r.id)
        await store.delete_scope(OTHER)
        got = await rankings()
        assert same(got, base), clause(
            "MS-KW-12", "another owner's deletes change nothing", {"before": base, "after": got}
        )
        history = [
            _rec(store, f"h{i:02d}", namespace="history", content=f"cherry apple noise {i} " * 3)
            for i in range(30)
        ]
        await store.add(history)
        for r in history[:10]:
            await store.delete(OWNER, r.id)
        await store.delete_scope(OWNER, namespace="history")
        got = await rankings()
        assert same(got, base), clause(
            "MS-KW-12",
            "the owner's own deleted records change nothing",
            {"before": base, "after": got},
        )

    async def test_keyword_ties_by_id_ascending(self, store: MemoryStore) -> None:
        """When this fails, equal keyword scores come back in insertion, engine or
        descending id order: sort by score descending, then id ascending (code
        point order), before cutting at `limit` (fetch past the cut to break ties)."""
        kw = self._keyword(store)
        tied = ["k3", "k1", "k5", "k0", "k4", "k2"]
        await store.add(
            [_rec(store, "best", content="walrus seal")]
            + [_rec(store, t, content="walrus") for t in tied]
            + [_rec(store, "worst", content="walrus on a long pale beach of stones")]
        )
        for limit in (10, 4, 2):
            hits = await kw.search_text(OWNER, "walrus seal", limit=limit)
            scores = {h.record.id: h.score for h in hits if h.record.id in tied}
            assert len(set(scores.values())) <= 1, clause(
                "MS-KW-15", "records of identical text score equally", scores
            )
            want = ["best", *sorted(tied), "worst"][:limit]
            assert _ids(hits) == want, clause(
                "MS-KW-15",
                f"equal scores are ordered by id ascending (limit={limit})",
                _ids(hits),
                want=want,
                detail=[(h.record.id, h.score) for h in hits],
            )

    async def test_keyword_statistics_of_the_filtered_records(self, store: MemoryStore) -> None:
        """When this fails, search_text with namespace/kinds scores with
        statistics (record count, average length, document frequencies) over
        more than the records the filters leave: all the owner's records, say.
        Count them over the owner's live records that pass the filters."""
        kw = self._keyword(store)
        records = [
            _rec(store, "t-alpha", namespace="target", kind="wanted", content="alpha"),
            _rec(store, "t-beta", namespace="target", kind="wanted", content="beta"),
            _rec(store, "t-beta2", namespace="target", kind="wanted", content="beta gamma"),
        ]
        # "alpha" is rare among the filtered records, common among the rest
        records += [
            _rec(store, f"k-alpha{i}", namespace="target", kind="noise", content="alpha noise")
            for i in range(8)
        ]
        records += [
            _rec(store, f"n-alpha{i}", namespace="other", kind="wanted", content="alpha other")
            for i in range(8)
        ]
        await store.add(records)
        query = "alpha beta"
        hits = await kw.search_text(OWNER, query, limit=20, namespace="target", kinds=["wanted"])
        want = ["t-alpha", "t-beta", "t-beta2"]
        assert _ids(hits) == want, clause(
            "MS-KW-16",
            "with namespace and kinds, a term rare among the filtered records (alpha) "
            "outranks one rare among all the owner's (beta)",
            _ids(hits),
            want=want,
            detail=[(h.record.id, h.score) for h in hits],
        )
        filters: list[tuple[str | None, list[str] | None]] = [
            ("target", ["wanted"]),
            ("target", None),
            (None, ["wanted"]),
        ]
        for n, (namespace, kinds) in enumerate(filters):
            alone = f"kw-alone-{n}"
            await store.add(
                [
                    attrs.evolve(r, owner=alone)
                    for r in records
                    if (namespace is None or r.namespace == namespace)
                    and (kinds is None or r.kind in kinds)
                ]
            )
            got = [
                (h.record.id, h.score)
                for h in await kw.search_text(
                    OWNER, query, limit=20, namespace=namespace, kinds=kinds
                )
            ]
            ref = [(h.record.id, h.score) for h in await kw.search_text(alone, query, limit=20)]
            same = [i for i, _ in got] == [i for i, _ in ref] and all(
                math.isclose(a, b, rel_tol=1e-9) for (_, a), (_, b) in zip(got, ref, strict=True)
            )
            assert same, clause(
                "MS-KW-16",
                f"search_text(namespace={namespace!r}, kinds={kinds!r}) scores as an owner "
                "holding only the records the filters leave",
                got,
                want=ref,
            )
            await store.delete_scope(alone)

    async def test_keyword_rejects_bad_input_and_closed(self, store: MemoryStore) -> None:
        """When this fails, search_text skips the checks every operation makes."""
        kw = self._keyword(store)
        await store.add([_rec(store, "x", content="zebra")])
        for blank in _BLANKS:
            await _raises(
                "MS-KW-8",
                f"search_text with blank owner {blank!r} raises ScopeRequired",
                ScopeRequired,
                kw.search_text(blank, "zebra"),
            )
        await _raises(
            "MS-KW-8",
            "search_text(limit=0) raises InvalidInput",
            InvalidInput,
            kw.search_text(OWNER, "zebra", limit=0),
        )
        await store.close()
        await _raises(
            "MS-KW-8",
            "search_text after close raises StoreClosed",
            StoreClosed,
            kw.search_text(OWNER, "zebra"),
        )

    async def test_keyword_query_at_the_maximum_honours_every_word(
        self, store: MemoryStore
    ) -> None:
        """When this fails, the backend keeps only the first terms of a long query
        (or cannot take a query of MAX_QUERY_BYTES): every word must count."""
        kw = self._keyword(store)
        await store.add([_rec(store, "z", content="zebra crossing")])
        words = " ".join(f"q{i}x" for i in range(2000))
        query = words + " " * (MAX_QUERY_BYTES - len(words.encode()) - 6) + " zebra"
        hits = await kw.search_text(OWNER, query)
        assert _ids(hits) == ["z"], clause(
            "MS-KW-10",
            "a MAX_QUERY_BYTES query finds its last word's record",
            _ids(hits),
            want=["z"],
        )

    async def test_keyword_query_bounds(self, store: MemoryStore) -> None:
        """When this fails, an oversized or NUL query reaches the engine, or words
        longer than MAX_QUERY_WORD_BYTES are matched on this backend only."""
        kw = self._keyword(store)
        long_word = "y" * (MAX_QUERY_WORD_BYTES + 1)
        await store.add([_rec(store, "y", content=long_word)])
        for name, query in {
            "a query over MAX_QUERY_BYTES": "x" * (MAX_QUERY_BYTES + 1),
            "a query holding NUL": "zebra\x00",
        }.items():
            exc = await _raises(
                "MS-KW-11",
                f"{name} raises InvalidInput",
                InvalidInput,
                kw.search_text(OWNER, query),
            )
            assert "query" in str(exc), clause(
                "MS-KW-11",
                "the message names `query`",
                str(exc),
                want=Shown("a message containing 'query'"),
            )
        hits = await kw.search_text(OWNER, long_word)
        assert hits == [], clause(
            "MS-KW-11", "an over-long word matches nothing", _ids(hits), want=[]
        )

    # -------------------------------------------------------- owner listing

    async def test_owners_lists_every_owner_sorted(self, store: MemoryStore) -> None:
        """When this fails, `owners()` misses an owner, repeats one, does not sort by
        code point, or still lists an owner whose records are all gone. Stores
        without `OwnerListing` skip (export then needs the owners named)."""
        if not isinstance(store, OwnerListing):
            pytest.skip("the store does not implement OwnerListing (owners())")
        names = [OWNER, OTHER, "Zeta", "a b", "\u00e9"]
        await store.add([_rec(store, f"r{i}", owner=o) for i, o in enumerate(names)])
        await store.add([_rec(store, "r-again", owner=OWNER, namespace="other")])
        got = await store.owners()
        assert got == sorted(names), clause(
            "MS-OWN-1", "every owner once, sorted", got, want=sorted(names)
        )
        await store.delete_scope("Zeta")
        await store.delete(OTHER, f"r{names.index(OTHER)}")
        got = await store.owners()
        want = sorted(set(names) - {"Zeta", OTHER})
        assert got == want, clause(
            "MS-OWN-1", "an owner without records is not listed", got, want=want
        )

    # -------------------------------------------------------- versioned writes

    def _versioned(self, store: MemoryStore) -> VersionedWrites:
        """The store's conditional writes: checked when it implements them or
        declares them (`versioned_writes`); declared and missing fails."""
        if isinstance(store, VersionedWrites):
            return store
        if self.capabilities.versioned_writes:
            pytest.fail(
                clause(
                    "MS-VER-0",
                    "versioned_writes is declared: implement update_if_older and "
                    "delete_if_unchanged",
                )
            )
        pytest.skip(
            "the store does not implement VersionedWrites (update_if_older, delete_if_unchanged)"
        )

    async def test_update_if_older_replaces_only_an_older_version(self, store: MemoryStore) -> None:
        """When this fails, `update_if_older` replaced a version as late or later
        (a copy would overwrite a writer's newer record), created a missing
        record, or left the indexes on the old version. Stores without
        `VersionedWrites` skip (a re-embed then reads, then writes)."""
        versioned = self._versioned(store)
        dim = _dim(store)
        first = _rec(store, "v1", content="alpha granite", vector=_vec(dim, 1.0))
        await store.add([first])
        later = attrs.evolve(
            first,
            content="omega basalt",
            vector=_vec(dim, -1.0),
            updated_at=first.updated_at + ms(5),
        )
        done = await versioned.update_if_older(later)
        got = await store.get(OWNER, "v1")
        seen = (done, got.content if got else None)
        assert seen == (True, "omega basalt"), clause(
            "MS-VER-1", "an older stored version is replaced", seen, want=(True, "omega basalt")
        )
        hits = await store.search(OWNER, _vec(dim, -1.0), limit=1)
        found = [(h.record.id, h.record.content) for h in hits]
        assert found == [("v1", "omega basalt")], clause(
            "MS-VER-1", "vector search sees the new version", found, want=[("v1", "omega basalt")]
        )
        if self.capabilities.keyword_search and isinstance(store, KeywordSearch):
            new_words = _ids(await store.search_text(OWNER, "basalt"))
            old_words = _ids(await store.search_text(OWNER, "granite"))
            assert (new_words, old_words) == (["v1"], []), clause(
                "MS-VER-1",
                "keyword search sees the new version only",
                (new_words, old_words),
                want=(["v1"], []),
            )
        for label, version in (("as late", later.updated_at), ("earlier", first.updated_at)):
            stale = attrs.evolve(first, content=f"stale {label}", updated_at=version)
            done = await versioned.update_if_older(stale)
            got = await store.get(OWNER, "v1")
            seen = (done, got.content if got else None)
            assert seen == (False, "omega basalt"), clause(
                "MS-VER-1",
                f"a stored version is kept against one {label}",
                seen,
                want=(False, "omega basalt"),
            )
        # versions far from now: before 1970 (negative in microseconds) and past
        # 2255 (beyond a double's exact integers)
        far = _rec(store, "far")
        steps = [
            (datetime(1, 1, 2, tzinfo=UTC), None),
            (datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), True),
            (datetime(1, 1, 3, tzinfo=UTC), False),
            (datetime(9999, 12, 31, 23, 59, 59, 999998, tzinfo=UTC), True),
            (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), True),
            (datetime(9999, 12, 31, 23, 59, 59, 999998, tzinfo=UTC), False),
        ]
        await store.add([attrs.evolve(far, updated_at=steps[0][0])])
        for version, want in steps[1:]:
            done = await versioned.update_if_older(attrs.evolve(far, updated_at=version))
            assert done is want, clause(
                "MS-VER-1", f"a version of {version.isoformat()} is compared exactly", done,
                want=want,
            )  # fmt: skip
        missing = _rec(store, "never-added")
        done = await versioned.update_if_older(missing)
        created = await store.get(OWNER, "never-added") is not None
        assert (done, created) == (False, False), clause(
            "MS-VER-1",
            "a missing record is neither updated nor created",
            (done, created),
            want=(False, False),
        )

    async def test_delete_if_unchanged_deletes_only_that_version(self, store: MemoryStore) -> None:
        """When this fails, `delete_if_unchanged` deleted another version than
        the one it names (a writer's newer record, lost), or took a naive
        datetime. Stores without `VersionedWrites` skip."""
        versioned = self._versioned(store)
        first = _rec(store, "d1")
        await store.add([first, _rec(store, "d2")])
        newer = attrs.evolve(first, content="newer", updated_at=first.updated_at + ms(1))
        await store.update(newer)
        done = await versioned.delete_if_unchanged(OWNER, "d1", first.updated_at)
        kept = await store.get(OWNER, "d1")
        seen = (done, kept.content if kept else None)
        assert seen == (False, "newer"), clause(
            "MS-VER-2", "another version is kept", seen, want=(False, "newer")
        )
        other_zone = newer.updated_at.astimezone(timezone(timedelta(hours=-5)))
        done = await versioned.delete_if_unchanged(OWNER, "d1", other_zone)
        left_there = await store.get(OWNER, "d1") is not None
        assert (done, left_there) == (True, False), clause(
            "MS-VER-2",
            "the version named (in any time zone) is deleted",
            (done, left_there),
            want=(True, False),
        )
        done = await versioned.delete_if_unchanged(OWNER, "d1", newer.updated_at)
        assert done is False, clause("MS-VER-2", "a missing record gives False", done, want=False)
        left = _page_ids(await store.list(OWNER))
        assert left == ["d2"], clause("MS-VER-2", "the other record stays", left, want=["d2"])
        naive = newer.updated_at.replace(tzinfo=None)
        with pytest.raises(InvalidInput) as caught:
            await versioned.delete_if_unchanged(OWNER, "d2", naive)
        assert caught.value.field == "updated_at", clause(
            "MS-VER-2", "a naive datetime names updated_at", caught.value.field, want="updated_at"
        )
        # versions compare to the microsecond: near now, and at both ends of the
        # range (before 1970, past a double's exact integers of microseconds)
        versions = [
            BASE_TIME + timedelta(microseconds=123_457),
            datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
            datetime(9999, 12, 31, 23, 59, 59, 999998, tzinfo=UTC),
        ]
        for i, version in enumerate(versions):
            rid = f"us{i}"
            await store.add([attrs.evolve(_rec(store, rid), updated_at=version)])
            for label, near in (
                ("1 microsecond before", version - timedelta(microseconds=1)),
                ("1 microsecond after", version + timedelta(microseconds=1)),
            ):
                done = await versioned.delete_if_unchanged(OWNER, rid, near)
                still = await store.get(OWNER, rid) is not None
                assert (done, still) == (False, True), clause(
                    "MS-VER-2",
                    f"a version {label} the stored {version.isoformat()} is another "
                    "version: nothing is deleted (compare to the microsecond)",
                    (done, still),
                    want=(False, True),
                )
            done = await versioned.delete_if_unchanged(OWNER, rid, version)
            gone = await store.get(OWNER, rid) is None
            assert (done, gone) == (True, True), clause(
                "MS-VER-2",
                f"the stored version {version.isoformat()} itself is deleted "
                "(kept to the microsecond)",
                (done, gone),
                want=(True, True),
            )

    async def test_conditional_writes_racing_on_one_record_end_in_order(
        self, store: MemoryStore
    ) -> None:
        """When this fails, a conditional write was not atomic: an older version
        replaced a later one (a lost write), or a delete and an update both took
        effect. Stores without `VersionedWrites` skip."""
        versioned = self._versioned(store)
        rng = random.Random(20261207)
        for round_ in range(5):
            rid = f"race-{round_}"
            first = _rec(store, rid)
            await store.add([first])
            versions = [first.updated_at + ms(i) for i in range(1, 25)]
            rng.shuffle(versions)
            ops: list[Awaitable[bool]] = [
                versioned.update_if_older(
                    attrs.evolve(first, content=f"at {v.isoformat()}", updated_at=v)
                )
                for v in versions
            ]
            at = rng.randrange(len(ops) + 1)
            ops.insert(at, versioned.delete_if_unchanged(OWNER, rid, first.updated_at))
            results = await asyncio.gather(*ops)
            deleted, updated = results[at], results[:at] + results[at + 1 :]
            got = await store.get(OWNER, rid)
            if got is None:
                assert (deleted, any(updated)) == (True, False), clause(
                    "MS-VER-3",
                    "deleted first, so no update applies",
                    (deleted, updated),
                    want="delete True, every update False",
                )
            else:
                assert not deleted, clause(
                    "MS-VER-3",
                    "an update came first, so the delete is refused",
                    deleted,
                    want=False,
                )
                want = max(versions)
                seen = (got.updated_at, got.content)
                assert seen == (want, f"at {want.isoformat()}"), clause(
                    "MS-VER-3",
                    "the latest version stays",
                    seen,
                    want=(want, f"at {want.isoformat()}"),
                )
            await store.delete(OWNER, rid)

    # -------------------------------------------------------- state machine

    async def test_state_machine_agrees_with_oracle(self, store: MemoryStore) -> None:
        """When this fails, hypothesis prints the shortest operation sequence on
        which this store and the in-memory oracle disagree: replay it by hand."""
        from agent_memory.contract_tests.state_machine import run_against_oracle

        await run_against_oracle(store, self.capabilities, max_examples=self.state_machine_examples)

    # ------------------------------------------------------- final canary

    async def test_canary_still_empty_at_the_end(self, store: MemoryStore) -> None:
        """Same check as the first canary, after every other test ran. When it
        fails, some test's data survived into this fresh store."""
        await self._assert_no_leak(store)

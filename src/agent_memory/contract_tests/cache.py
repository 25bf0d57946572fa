"""`CacheContract`: the conformance suite every `Cache` backend must pass.

Subclass it, declare `capabilities`, and override the `cache` fixture (yield
an EMPTY cache; clean up after the yield). With `Capabilities(reopen=True)`
also override `reopen`: a fixture returning an async zero-argument callable
that opens a SECOND handle on the same data (the suite closes it itself)::

    class TestAcmeCache(CacheContract):
        capabilities = Capabilities(ttl_resolution_ms=10)

        @pytest_asyncio.fixture  # or @pytest.fixture under asyncio_mode = "auto"
        async def cache(self):
            cache = AcmeCache(...)
            yield cache
            await cache.close()

Short TTLs are scaled to `capabilities.ttl_resolution_ms` (4x the resolution,
then a sleep of 3x past it).

Clause ids (each assertion message starts with one):

- C-RT-1    put then get returns the same bytes: b"", NUL, non-UTF-8, large.
- C-RT-2    property: adversarial keys and arbitrary bytes round-trip.
- C-RT-3    get of a missing key is None (not b"").
- C-OVR-1   put overwrites the value.
- C-OVR-2   put overwrites the TTL too: ttl=None after a TTL makes it
            persistent, a TTL after ttl=None makes it expire, and a TTL after
            a TTL counts from the second put (a long one outlives the short one
            it replaced, a short one expires before the long one would).
- C-TTL-1   an entry expires after its ttl: get None, delete False,
            delete_prefix does not count it.
- C-TTL-2   ttl=None keeps an entry past other entries' expiry.
- C-DEL-1   delete returns True once for a present entry, then False; the entry
            is gone; other keys stay.
- C-DELP-1  delete_prefix deletes exactly the keys starting with the prefix and
            returns their count (0 when none).
- C-DELP-2  prefix characters such as `* ? [ % _ \\` are literal.
- C-ISO-1   scopes are isolated, whatever characters their names hold (a key
            put in one scope is absent from every other).
- C-ISO-2   (scope, key) pairs that join to the same string stay distinct.
- C-ISO-3   keys are compared exactly: keys one trim, case fold or Unicode
            normalisation apart (`"k"`/`"K"`, `"k "`, `"\\u00e9"`/`"e\\u0301"`,
            `"\\ufb01le"`/`"file"`) are separate entries in put, get, delete and
            delete_prefix.
- C-SCOPE-1 an empty or whitespace-only scope raises `ScopeRequired` everywhere.
- C-INPUT-1 a non-positive or non-timedelta ttl, a blank key, a non-bytes value
            raise `InvalidInput` and store nothing.
- C-INPUT-2 a ttl above MAX_TTL (e.g. 999,999,999 days) raises InvalidInput naming
  `ttl`, never OverflowError; MAX_TTL itself is accepted.
- C-INPUT-3 a scope and key of exactly MAX_ID_BYTES bytes of UTF-8 each
            (incompressible, multi-byte) put, get and delete; one byte over in
            either raises InvalidInput naming the field, its size and the
            maximum, in every operation, and stores nothing.
- C-CLOSE-1 after close every operation raises `StoreClosed`; close is idempotent.
- C-CLOSE-2 a put racing close either completed before close returned (and is
            visible from another handle) or was rejected with `StoreClosed` (and
            is never persisted). Needs `reopen`.
- C-SHARED-1 a second handle sees the first one's entries. Needs `reopen`.
- C-LIST-1  (when the cache implements `CacheListing`) `entries(scope, prefix)` lists
            the scope's live entries under the literal prefix (`%`, `_`, `*`
            match only themselves), by key in code-point order (binary
            collation: "B" before "a"), with value and expires_at (None
            without ttl; else put time + ttl within the ttl resolution, not
            the listing time + ttl).
- C-CANARY-1 the fixture yields an empty cache: nothing written by an earlier
            test is visible.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, ClassVar

import pytest
from hypothesis import given

from agent_memory.contract_tests._support import (
    ShortTtl,
    Shown,
    clause,
    expect_closed,
    expect_raises,
    expect_too_long,
    mark_async_tests,
    max_id,
    outcome,
    property_settings,
    race_close,
    require_reopen,
)
from agent_memory.contract_tests.capabilities import Capabilities
from agent_memory.contract_tests.event_strategies import (
    ADVERSARIAL_SCOPE_PAIRS,
    cache_keys,
    cache_values,
)
from agent_memory.domain.errors import InvalidInput, ScopeRequired
from agent_memory.domain.validation import MAX_TTL
from agent_memory.ports.storage import Cache, CacheListing

__all__ = ["CacheContract"]

ReopenCache = Callable[[], Awaitable[Cache]]

CANARY_SCOPE = "agent-memory-contract-canary"
_PROPERTY = property_settings(max_examples=25, port="cache")
_LITERAL = ["*", "?", "[", "%", "_", "\\"]
_SEPARATORS = [":", "|", "/", "}"]
#: (first, second): keys one trim, case fold or Unicode normalisation (NFC,
#: NFKC) apart; the cache must keep them apart (C-ISO-3).
_LOOKALIKE_KEYS = [
    ("k", "K"),
    ("k", "k "),
    ("k", " k"),
    ("\u00e9", "e\u0301"),  # precomposed vs combining accent
    ("file", "\ufb01le"),  # U+FB01 LATIN SMALL LIGATURE FI
]
_VALUES = {
    "empty": b"",
    "nul": b"\x00",
    "non-utf8": b"\xff\xfe\xfd\xc3\x28",
    "latin1": "é".encode("latin-1"),
    "every-byte": bytes(range(256)),
    "large": bytes(range(256)) * 256,
}


def _short_repr(value: bytes | None) -> object:
    if value is None or len(value) <= 40:
        return value
    return f"<{len(value)} bytes starting {value[:16]!r}>"


async def _error_of(op: Awaitable[object]) -> BaseException | None:
    """The exception `op` raises, or None."""
    try:
        await op
    except Exception as exc:
        return exc
    return None


@mark_async_tests
class CacheContract(ShortTtl):
    """Conformance tests for `Cache`; override `cache` (and `reopen`)."""

    capabilities: ClassVar[Capabilities] = Capabilities()

    @pytest.fixture  # sync: its failure shows in strict and auto mode alike
    def cache(self) -> Cache:
        """Override: yield an EMPTY Cache, close/clean it after the yield."""
        pytest.fail("CacheContract: override the `cache` fixture in your subclass")

    @pytest.fixture
    def reopen(self) -> ReopenCache | None:
        """Override when `capabilities.reopen`: an async callable opening a second
        handle on the same data as `cache`."""
        return None

    # -- canary (first) --------------------------------------------------------

    async def test_canary_write(self, cache: Cache) -> None:
        """Writes under a well-known scope for the last test to look for.

        When this fails, check that put/get work at all (C-RT-1).
        """
        await cache.put(CANARY_SCOPE, "canary", b"canary")
        got = await cache.get(CANARY_SCOPE, "canary")
        assert got == b"canary", clause(
            "C-CANARY-1", "the canary entry is stored", got, want=b"canary"
        )

    # -- round trip ------------------------------------------------------------

    @pytest.mark.parametrize("name", list(_VALUES))
    async def test_round_trip(self, cache: Cache, name: str) -> None:
        """put then get returns exactly the bytes stored.

        When this fails, check the codec: bytes, not text (no decode/encode), and
        b"" must come back as b"" (not None).
        """
        value = _VALUES[name]
        await cache.put("s", f"k-{name}", value)
        got = await cache.get("s", f"k-{name}")
        assert got == value, clause(
            "C-RT-1", f"{name} value reads back unchanged", got, want=value, detail=_short_repr(got)
        )
        assert type(got) is bytes, clause("C-RT-1", "get returns bytes", type(got).__name__)

    @_PROPERTY
    @given(key=cache_keys(), value=cache_values())
    async def test_round_trip_property(self, cache: Cache, key: str, value: bytes) -> None:
        """Property: adversarial keys and arbitrary bytes round-trip.

        When this fails, read the falsifying key/value: which character breaks the
        key layout, which bytes the codec?
        """
        scope = f"rt-{uuid.uuid4().hex}"
        await cache.put(scope, key, value)
        got = await cache.get(scope, key)
        assert got == value, clause("C-RT-2", "any bytes under any key read back", got, want=value)
        deleted = await cache.delete_prefix(scope, key)
        assert deleted == 1, clause(
            "C-RT-2", "delete_prefix(key) finds exactly it", deleted, want=1
        )

    async def test_get_missing(self, cache: Cache) -> None:
        """A missing key reads as None.

        When this fails, check that a miss is not turned into b"" or an error.
        """
        await cache.put("s", "present", b"")
        got = await cache.get("s", "absent")
        assert got is None, clause("C-RT-3", "get of a missing key is None", got, want=None)

    async def test_overwrite(self, cache: Cache) -> None:
        """put on an existing key replaces the value.

        When this fails, check that put is an upsert (no insert-if-absent).
        """
        await cache.put("s", "k", b"first")
        await cache.put("s", "k", b"second")
        got = await cache.get("s", "k")
        assert got == b"second", clause("C-OVR-1", "put overwrites the value", got, want=b"second")

    async def test_overwrite_replaces_ttl(self, cache: Cache) -> None:
        """An overwrite also replaces the TTL (None makes it persistent).

        When this fails, check that put without a ttl clears an earlier expiry
        (e.g. Redis SET without KEEPTTL, expires_at = NULL in SQL).
        """
        await cache.put("s", "to-persistent", b"a", self._short())
        await cache.put("s", "to-persistent", b"b", None)
        await cache.put("s", "to-expiring", b"a", None)
        await cache.put("s", "to-expiring", b"b", self._short())
        await cache.put("s", "to-longer", b"a", self._short())
        await cache.put("s", "to-longer", b"b", timedelta(seconds=60))
        await cache.put("s", "to-shorter", b"a", timedelta(seconds=60))
        await cache.put("s", "to-shorter", b"b", self._short())
        await self._outlive_short()
        longer = await cache.get("s", "to-longer")
        assert longer == b"b", clause(
            "C-OVR-2",
            "a long ttl on overwrite replaces the short one (counted from the second put)",
            longer,
            want=b"b",
        )
        shorter = await cache.get("s", "to-shorter")
        assert shorter is None, clause(
            "C-OVR-2", "a short ttl on overwrite replaces the long one", shorter, want=None
        )
        kept = await cache.get("s", "to-persistent")
        assert kept == b"b", clause(
            "C-OVR-2", "ttl=None on overwrite makes it persist", kept, want=b"b"
        )
        gone = await cache.get("s", "to-expiring")
        assert gone is None, clause(
            "C-OVR-2", "a ttl on overwrite makes it expire", gone, want=None
        )

    # -- ttl -------------------------------------------------------------------

    async def test_ttl_expiry(self, cache: Cache) -> None:
        """An entry expires after its ttl: gone for get, delete and delete_prefix.

        When this fails, check the expiry comparison on read (expires_at <= now is
        expired) and that delete/delete_prefix ignore expired entries.
        """
        await cache.put("s", "t/a", b"x", self._short())
        await cache.put("s", "t/b", b"y", self._short())
        await cache.put("s", "t/c", b"z", self._short())
        await cache.put("s", "u/live", b"w", timedelta(seconds=60))
        await self._outlive_short()
        got = await cache.get("s", "t/a")
        assert got is None, clause("C-TTL-1", "get after the ttl is None", got, want=None)
        deleted = await cache.delete("s", "t/b")
        assert deleted is False, clause(
            "C-TTL-1", "delete of an expired entry is False", deleted, want=False
        )
        count = await cache.delete_prefix("s", "t/")
        assert count == 0, clause("C-TTL-1", "delete_prefix does not count expired", count, want=0)
        live = await cache.get("s", "u/live")
        assert live == b"w", clause(
            "C-TTL-1", "an entry whose ttl has not passed stays", live, want=b"w"
        )

    async def test_ttl_none_persists(self, cache: Cache) -> None:
        """ttl=None keeps an entry past the expiry of others.

        When this fails, check that None means 'no expiry' (not 0 or a default ttl).
        """
        await cache.put("s", "forever", b"f")
        await cache.put("s", "brief", b"b", self._short())
        await self._outlive_short()
        got = (await cache.get("s", "forever"), await cache.get("s", "brief"))
        assert got == (b"f", None), clause(
            "C-TTL-2", "ttl=None persists while the short ttl expired", got, want=(b"f", None)
        )

    # -- delete ----------------------------------------------------------------

    async def test_delete(self, cache: Cache) -> None:
        """delete is True once for a present entry, then False; others stay.

        When this fails, check the return value (whether something was deleted).
        """
        await cache.put("s", "a", b"1")
        await cache.put("s", "ab", b"2")
        first = await cache.delete("s", "a")
        second = await cache.delete("s", "a")
        assert (first, second) == (True, False), clause(
            "C-DEL-1", "delete returns True then False", (first, second), want=(True, False)
        )
        got = (await cache.get("s", "a"), await cache.get("s", "ab"))
        assert got == (None, b"2"), clause(
            "C-DEL-1", "only the deleted key is gone", got, want=(None, b"2")
        )
        missing = await cache.delete("s", "never")
        assert missing is False, clause(
            "C-DEL-1", "delete of a missing key is False", missing, want=False
        )

    async def test_delete_prefix(self, cache: Cache) -> None:
        """delete_prefix deletes exactly the matching keys and returns the count.

        When this fails, check the prefix match (starts-with on the key only, in
        this scope only) and the count.
        """
        keys = ["d/1", "d/2", "d/", "d", "dx", "e/1", "D/1"]
        for k in keys:
            await cache.put("s", k, k.encode())
        count = await cache.delete_prefix("s", "d/")
        assert count == 3, clause("C-DELP-1", "delete_prefix('d/') deletes 3", count, want=3)
        left = {k: await cache.get("s", k) for k in keys}
        want = {k: (None if k.startswith("d/") else k.encode()) for k in keys}
        assert left == want, clause(
            "C-DELP-1", "only keys starting with 'd/' are gone", left, want=want
        )
        none = await cache.delete_prefix("s", "zz")
        assert none == 0, clause("C-DELP-1", "no match deletes nothing and returns 0", none, want=0)

    @pytest.mark.parametrize("char", _LITERAL)
    async def test_delete_prefix_is_literal(self, cache: Cache, char: str) -> None:
        """Pattern characters in the prefix match only themselves.

        When this fails, escape the prefix for the backend's pattern language
        (Redis SCAN MATCH glob, SQL LIKE ... ESCAPE) or compare prefixes directly.
        """
        keys = [f"k{char}1", f"k{char}", f"k{char}{char}", "kx1", "k1", "k", "kk", "x"]
        for k in keys:
            await cache.put("s", k, b"v")
        count = await cache.delete_prefix("s", f"k{char}")
        survivors = sorted([k for k in keys if await cache.get("s", k) is not None])
        want = sorted(k for k in keys if not k.startswith(f"k{char}"))
        assert (count, survivors) == (3, want), clause(
            "C-DELP-2",
            f"prefix 'k{char}' is matched literally (3 deleted)",
            (count, survivors),
            want=(3, want),
        )

    # -- isolation -------------------------------------------------------------

    @pytest.mark.parametrize(
        ("first", "second"), ADVERSARIAL_SCOPE_PAIRS, ids=[repr(p) for p in ADVERSARIAL_SCOPE_PAIRS]
    )
    async def test_scopes_isolated(self, cache: Cache, first: str, second: str) -> None:
        """The same key in two scopes is two entries, however the scopes are spelled.

        When this fails, check how the scope is put into keys or queries: escape
        or hash it; no glob/LIKE/regex; no case or Unicode folding.
        """
        await cache.put(first, "k", b"first")
        await cache.put(second, "k", b"second")
        got = (await cache.get(first, "k"), await cache.get(second, "k"))
        assert got == (b"first", b"second"), clause(
            "C-ISO-1",
            f"scopes {first!r} and {second!r} keep their own values",
            got,
            want=(b"first", b"second"),
        )
        count = await cache.delete_prefix(first, "")
        assert count == 1, clause("C-ISO-1", f"delete_prefix in {first!r} deletes 1", count, want=1)
        left = await cache.get(second, "k")
        assert left == b"second", clause(
            "C-ISO-1", f"clearing {first!r} leaves {second!r} intact", left, want=b"second"
        )
        # a key only one scope holds is absent from the other (no lookup by key alone)
        await cache.put(first, "only-first", b"mine")
        absent = await cache.get(second, "only-first")
        assert absent is None, clause(
            "C-ISO-1", f"a key put in {first!r} only is absent from {second!r}", absent, want=None
        )

    @pytest.mark.parametrize("sep", _SEPARATORS)
    async def test_scope_key_join_collision(self, cache: Cache, sep: str) -> None:
        """(scope 'a{sep}b', key 'c') and (scope 'a', key 'b{sep}c') are distinct.

        When this fails, the storage key is scope + separator + key without
        escaping: escape or length-prefix the parts.
        """
        await cache.put(f"a{sep}b", "c", b"outer")
        await cache.put("a", f"b{sep}c", b"inner")
        got = (await cache.get(f"a{sep}b", "c"), await cache.get("a", f"b{sep}c"))
        assert got == (b"outer", b"inner"), clause(
            "C-ISO-2",
            "joined-looking (scope, key) pairs keep their own values",
            got,
            want=(b"outer", b"inner"),
        )
        deleted = await cache.delete("a", f"b{sep}c")
        outer = await cache.get(f"a{sep}b", "c")
        assert (deleted, outer) == (True, b"outer"), clause(
            "C-ISO-2", "deleting one pair leaves the other", (deleted, outer), want=(True, b"outer")
        )

    # -- bad input -------------------------------------------------------------

    @pytest.mark.parametrize(("first", "second"), _LOOKALIKE_KEYS, ids=repr)
    async def test_lookalike_keys_stay_separate(
        self, cache: Cache, first: str, second: str
    ) -> None:
        """When this fails, keys are trimmed, case-folded or Unicode-normalised
        (a case-insensitive collation, LOWER(), NFC/NFKC on the way in,
        `.strip()`): keys are opaque and compared exactly."""
        await cache.put("s", f"p/{first}", b"1")
        await cache.put("s", f"p/{second}", b"2")
        got = (await cache.get("s", f"p/{first}"), await cache.get("s", f"p/{second}"))
        assert got == (b"1", b"2"), clause(
            "C-ISO-3",
            f"keys {first!r} and {second!r} are two entries",
            got,
            want=(b"1", b"2"),
        )
        deleted = await cache.delete("s", f"p/{second}")
        left = await cache.get("s", f"p/{first}")
        assert (deleted, left) == (True, b"1"), clause(
            "C-ISO-3",
            f"deleting key {second!r} leaves key {first!r}",
            (deleted, left),
            want=(True, b"1"),
        )
        await cache.put("s", f"p/{second}", b"2")
        count = await cache.delete_prefix("s", f"p/{second}")
        left = await cache.get("s", f"p/{first}")
        assert (count, left) == (1, b"1"), clause(
            "C-ISO-3",
            f"delete_prefix({second!r}) deletes only its own key",
            (count, left),
            want=(1, b"1"),
        )

    @pytest.mark.parametrize("op", ["get", "put", "delete", "delete_prefix"])
    async def test_blank_scope(self, cache: Cache, op: str) -> None:
        """An empty or whitespace-only scope raises `ScopeRequired`.

        When this fails, check that the operation validates its scope first
        (`domain.validation.require_scope`).
        """
        calls: dict[str, Callable[[str], Awaitable[object]]] = {
            "get": lambda scope: cache.get(scope, "k"),
            "put": lambda scope: cache.put(scope, "k", b"v"),
            "delete": lambda scope: cache.delete(scope, "k"),
            "delete_prefix": lambda scope: cache.delete_prefix(scope, ""),
        }
        for blank in ("", " ", "\t\n"):
            await expect_raises(
                "C-SCOPE-1",
                f"{op} with scope {blank!r} raises ScopeRequired",
                ScopeRequired,
                calls[op](blank),
            )

    @pytest.mark.parametrize(
        "case", ["ttl-zero", "ttl-negative", "ttl-not-timedelta", "blank-key", "value-not-bytes"]
    )
    async def test_invalid_input(self, cache: Cache, case: str) -> None:
        """Bad ttl, blank key or non-bytes value raise `InvalidInput`; nothing stored.

        When this fails, check the argument validation at the top of put (and get/
        delete for keys).
        """
        key, value, ttl = "k", b"v", None
        bad: Any = None
        if case == "ttl-zero":
            ttl = timedelta(0)
        elif case == "ttl-negative":
            ttl = timedelta(seconds=-1)
        elif case == "ttl-not-timedelta":
            bad = 5
            ttl = bad
        elif case == "blank-key":
            key = "  "
        else:
            bad = "text"
            value = bad
        await expect_raises(
            "C-INPUT-1",
            f"put with {case} raises InvalidInput",
            InvalidInput,
            cache.put("s", key, value, ttl),
        )
        if case == "blank-key":
            key_ops: dict[str, Callable[[], Awaitable[object]]] = {
                "get": lambda: cache.get("s", key),
                "delete": lambda: cache.delete("s", key),
            }
            for name, op in key_ops.items():
                await expect_raises(
                    "C-INPUT-1", f"{name} with a blank key raises InvalidInput", InvalidInput, op()
                )
        else:
            got = await cache.get("s", key)
            assert got is None, clause("C-INPUT-1", "a rejected put stores nothing", got, want=None)

    async def test_ttl_above_the_maximum_is_invalid(self, cache: Cache) -> None:
        """When this fails, `now + ttl` overflows (or the engine refuses the expiry):
        check the ttl against MAX_TTL before any arithmetic."""
        for ttl in (MAX_TTL + timedelta(microseconds=1), timedelta(days=999_999_999)):
            exc = await _error_of(cache.put("s", "k", b"v", ttl))
            rule = f"put(ttl={ttl}) raises InvalidInput"
            assert isinstance(exc, InvalidInput), clause(
                "C-INPUT-2", rule, outcome(exc), want=Shown("InvalidInput")
            )
            assert "ttl" in str(exc), clause(
                "C-INPUT-2",
                "the message names `ttl`",
                str(exc),
                want=Shown("a message containing 'ttl'"),
            )
        left = await cache.get("s", "k")
        assert left is None, clause("C-INPUT-2", "nothing stored", left, want=None)
        await cache.put("s", "k", b"v", MAX_TTL)
        got = await cache.get("s", "k")
        assert got == b"v", clause("C-INPUT-2", "a MAX_TTL entry is stored", got, want=b"v")

    async def test_ids_at_and_over_the_maximum(self, cache: Cache) -> None:
        """When this fails at the maximum, the backend cannot hold MAX_ID_BYTES in
        scope and key at once (a key or index entry over the engine's limit); over
        it, the size is not checked before I/O (`require_scope`/`require_id`)."""
        scope, key = max_id("c-scope"), max_id("c-key")
        await cache.put(scope, key, b"v")
        got = await cache.get(scope, key)
        assert got == b"v", clause(
            "C-INPUT-3", "an entry of maximal ids round-trips", got, want=b"v"
        )
        if isinstance(cache, CacheListing):
            listed = [e.key for e in await cache.entries(scope, key[:10])]
            assert listed == [key], clause("C-INPUT-3", "entries lists it", listed, want=[key])
        assert await cache.delete(scope, key), clause("C-INPUT-3", "delete finds it")
        long = max_id("c-over") + "x"
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("scope", lambda: cache.put(long, "k", b"v")),
            ("key", lambda: cache.put("s", long, b"v")),
            ("scope", lambda: cache.get(long, "k")),
            ("key", lambda: cache.get("s", long)),
            ("scope", lambda: cache.delete(long, "k")),
            ("key", lambda: cache.delete("s", long)),
            ("scope", lambda: cache.delete_prefix(long, "")),
        ]
        for field, call in calls:
            await expect_too_long("C-INPUT-3", field, call())
        left = await cache.get("s", "k")
        assert left is None, clause("C-INPUT-3", "nothing stored", left, want=None)

    # -- lifecycle ---------------------------------------------------------------

    async def test_operations_after_close(self, cache: Cache) -> None:
        """After close (twice), every operation raises `StoreClosed`.

        When this fails, check that every method goes through the lifecycle guard
        and that a second close is a no-op.
        """
        await cache.put("s", "k", b"v")
        await cache.close()
        try:
            await cache.close()
        except Exception as exc:
            pytest.fail(clause("C-CLOSE-1", "a second close does not raise", repr(exc)))
        await expect_closed(
            "C-CLOSE-1",
            {
                "get": lambda: cache.get("s", "k"),
                "put": lambda: cache.put("s", "k2", b"v"),
                "delete": lambda: cache.delete("s", "k"),
                "delete_prefix": lambda: cache.delete_prefix("s", ""),
                "ping": lambda: cache.ping(),
            },
        )

    async def test_put_racing_close(self, cache: Cache, reopen: ReopenCache | None) -> None:
        """Puts racing close: completed before close returned, or rejected.

        When this fails, check that close waits for in-flight operations before
        releasing resources and that no write is queued to run after close.
        """
        opener = require_reopen(self.capabilities, "C-CLOSE-2", reopen)
        keys = [f"race-{i:02d}" for i in range(20)]
        puts = [(k, partial(cache.put, "s", k, k.encode())) for k in keys]
        results = await race_close("C-CLOSE-2", "put", puts, cache.close)
        done = sorted(k for k, r in zip(keys, results, strict=True) if r is None)
        other = await opener()
        try:
            for _ in range(2):
                stored = sorted([k for k in keys if await other.get("s", k) is not None])
                assert stored == done, clause(
                    "C-CLOSE-2",
                    "exactly the puts that completed before close are persisted",
                    stored,
                    want=done,
                )
                await asyncio.sleep(self._res().total_seconds() * 2)
        finally:
            await other.close()

    async def test_second_handle_shares_entries(
        self, cache: Cache, reopen: ReopenCache | None
    ) -> None:
        """A second handle reads, overwrites and deletes the same entries.

        When this fails, check that handles share the backend (no per-handle
        in-process cache in front of it).
        """
        opener = require_reopen(self.capabilities, "C-SHARED-1", reopen)
        await cache.put("s", "k", b"one")
        other = await opener()
        try:
            seen = await other.get("s", "k")
            assert seen == b"one", clause(
                "C-SHARED-1", "the second handle reads it", seen, want=b"one"
            )
            await other.put("s", "k", b"two")
            again = await cache.get("s", "k")
            assert again == b"two", clause(
                "C-SHARED-1", "the first handle sees it", again, want=b"two"
            )
            deleted = await other.delete("s", "k")
            gone = await cache.get("s", "k")
            assert (deleted, gone) == (True, None), clause(
                "C-SHARED-1",
                "a delete on one handle shows on the other",
                (deleted, gone),
                want=(True, None),
            )
        finally:
            await other.close()

    # -- listing (CacheListing) ----------------------------------------------

    async def test_entries_lists_live_entries_by_key(self, cache: Cache) -> None:
        """`entries(scope, prefix)` returns the scope's live entries with that key
        prefix, by key, with their value and expiry (None without a ttl).

        When this fails, check the prefix is literal, expired entries and other
        scopes are left out, and expires_at is put time + ttl. Caches without
        `CacheListing` skip (export then cannot include their entries).
        """
        if not isinstance(cache, CacheListing):
            pytest.skip("the cache does not implement CacheListing (entries())")
        await cache.put("s", "k/b", b"b")
        await cache.put("s", "k/a", b"")
        put_c = datetime.now(UTC)
        await cache.put("s", "k/c", b"c", timedelta(seconds=60))
        put_c_done = datetime.now(UTC)
        await cache.put("s", "k/gone", b"g", self._short())
        await cache.put("s", "k%", b"not under k/")
        await cache.put("s2", "k/x", b"other scope")
        await self._outlive_short()
        got = await cache.entries("s", "k/")
        keys = [(e.key, e.value) for e in got]
        assert keys == [("k/a", b""), ("k/b", b"b"), ("k/c", b"c")], clause(
            "C-LIST-1",
            "live entries of the scope with the prefix, by key",
            keys,
            want=[("k/a", b""), ("k/b", b"b"), ("k/c", b"c")],
        )
        no_ttl = [got[0].expires_at, got[1].expires_at]
        assert no_ttl == [None, None], clause(
            "C-LIST-1",
            "an entry without ttl has no expiry",
            no_ttl,
            want=[None, None],
            detail=got[:2],
        )
        expires = got[2].expires_at
        # 3x the resolution: well under the 7x that listing waits after the put,
        # so an expiry counted from the listing is caught, and a backend reading
        # the remaining ttl (PTTL) a little after its clock is not.
        tol = self._res() * 3
        low = put_c + timedelta(seconds=60) - tol
        high = put_c_done + timedelta(seconds=60) + tol
        assert expires is not None, clause("C-LIST-1", "an entry with a ttl has an expiry", got[2])
        assert low <= expires <= high, clause(
            "C-LIST-1",
            f"expires_at is put time + ttl within {tol} (not the listing time + ttl)",
            expires,
            want=Shown(f"between {low!r} and {high!r}"),
        )
        for pattern, want_keys in (("k%", ["k%"]), ("k_", []), ("k*", [])):
            listed = [e.key for e in await cache.entries("s", pattern)]
            assert listed == want_keys, clause(
                "C-LIST-1",
                f"the prefix {pattern!r} is literal (no LIKE or glob wildcards)",
                listed,
                want=want_keys,
            )
        every = [e.key for e in await cache.entries("s")]
        assert every == ["k%", "k/a", "k/b", "k/c"], clause(
            "C-LIST-1", "no prefix lists the whole scope", every, want=["k%", "k/a", "k/b", "k/c"]
        )
        # code-point order: upper case before lower case, "é" after "z" (a
        # case-insensitive or locale collation orders these otherwise)
        mixed = ["o/b", "o/B", "o/é", "o/a", "o/Z", "o/z", "o/A"]
        for key in mixed:
            await cache.put("s3", key, key.encode())
        order = [e.key for e in await cache.entries("s3")]
        assert order == sorted(mixed), clause(
            "C-LIST-1", "entries are ordered by key in code-point order", order, want=sorted(mixed)
        )

    # -- canary (last) ---------------------------------------------------------

    async def test_canary_fixture_is_empty(self, cache: Cache) -> None:
        """The fixture must yield an EMPTY cache: the first test's canary is gone.

        When this fails, your `cache` fixture leaks data between tests: use a
        fresh key prefix/schema per test, or delete everything after the yield.
        """
        got = await cache.get(CANARY_SCOPE, "canary")
        assert got is None, clause("C-CANARY-1", "a fresh fixture holds no entries", got, want=None)

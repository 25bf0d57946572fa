"""`LeaseStoreContract`: the conformance suite every `LeaseStore` backend must pass.

Subclass it, declare `capabilities`, and override the `leases` fixture (yield
an EMPTY store; clean up after the yield). With `Capabilities(reopen=True)` also
override `reopen`: a fixture returning an async zero-argument callable that
opens a SECOND handle on the same data (the suite closes that handle itself)::

    class TestAcmeLeases(LeaseStoreContract):
        capabilities = Capabilities(ttl_resolution_ms=10)

        @pytest_asyncio.fixture  # or @pytest.fixture under asyncio_mode = "auto"
        async def leases(self):
            store = AcmeLeaseStore(...)
            yield store
            await store.close()

Short TTLs are scaled to `capabilities.ttl_resolution_ms` (4x the resolution,
then a sleep of 3x past it), so the suite stays fast on precise backends.

Clause ids (each assertion message starts with one):

- LS-ACQ-1  acquiring a free key returns the lease (scope, key, owner, payload,
            positive token, expires_at = now + ttl) and `get` returns it.
- LS-ACQ-2  a key held by another owner cannot be acquired (None); the lease
            is unchanged.
- LS-ACQ-3  re-acquiring a lease we hold keeps the token, sets expires_at to
            now + ttl (counted from the call, not from the old expiry) and
            replaces the payload.
- LS-EXC-1  of 50 concurrent acquirers of one key exactly one gets it.
- LS-EXC-2  the same across two handles (needs `reopen`).
- LS-EXP-1  an expired lease can be taken by another owner, with a larger token.
- LS-EXP-2  an expired lease is invisible to `get` and `scan`.
- LS-EXP-3  re-acquiring one's own lease after it expired is a fresh
            acquisition: a new token, strictly larger than the expired one's
            (every acquire after expiry mints a token, whoever acquires; only
            an unexpired lease re-acquired by its holder keeps its token).
- LS-RENEW-1 renew by a non-owner raises `LeaseNotHeld`; the lease is unchanged.
- LS-RENEW-2 renew of an expired, released or never-held lease raises
            `LeaseNotHeld`.
- LS-RENEW-3 renew by the owner sets expires_at to now + ttl (counted from the
            call, not from the old expiry) and keeps the token; the payload is
            replaced when given (`b""` too) and kept when None.
- LS-REL-1  release by a non-owner (or of a free key) returns False and changes
            nothing.
- LS-REL-2  release by the owner returns True; the key is free (get is None).
- LS-REL-3  release of an expired lease returns False, also for the owner it
            had (an expired lease is free: nobody holds it), and changes
            nothing: the key stays free and the next acquire mints a larger
            token.
- LS-FENCE-1 fencing tokens only grow across acquire/release/expire cycles.
- LS-FENCE-2 property: random acquire/release sequences agree with a model
            (exclusive owner, re-acquire keeps the token, fresh tokens grow).
- LS-SCAN-1 scan(prefix) returns the unexpired leases whose key starts with the
            prefix, with payloads, ordered by key (code-point order).
- LS-SCAN-2 prefix characters such as `* % _ [ ? \\` are literal.
- LS-SCAN-3 scan never lists an expired lease, also when nothing has read it
  since it expired (no lazy expiry that only `get` or `acquire` performs).
- LS-ISO-1  scopes are isolated, whatever characters their names hold.
- LS-ISO-2  (scope, key) pairs that join to the same string stay distinct.
- LS-ISO-3  owners and keys are compared exactly: owners (or keys) one trim,
            case fold or Unicode normalisation apart (`"ana"`/`"Ana"`,
            `"ana "`, `"\\u00e9"`/`"e\\u0301"`, `"\\ufb01nance"`/`"finance"`)
            are different owners (keys): a lookalike owner cannot acquire,
            renew or release the lease, and lookalike keys are two leases.
- LS-PAY-1  property: any payload bytes and adversarial keys round-trip.
- LS-SCOPE-1 an empty or whitespace-only scope raises `ScopeRequired` everywhere.
- LS-INPUT-1 a blank key or owner, a non-positive or non-timedelta ttl raise
            `InvalidInput`.
- LS-INPUT-2 a ttl above MAX_TTL (e.g. 999,999,999 days) raises InvalidInput naming
  `ttl`, never OverflowError; MAX_TTL itself is accepted.
- LS-INPUT-3 a scope, key and owner of exactly MAX_ID_BYTES bytes of UTF-8 each
            (incompressible, multi-byte) acquire, renew, get, scan and release;
            one byte over in any of them raises InvalidInput naming the field,
            its size and the maximum, in every operation, and stores nothing.
- LS-CLOSE-1 after close every operation raises `StoreClosed`; close is
            idempotent.
- LS-CLOSE-2 an acquire racing close either completed before close returned
            (and is held, seen from another handle) or was rejected with
            `StoreClosed` (and the key is free). Needs `reopen`.
- LS-CANARY-1 the fixture yields an empty store: nothing written by an earlier
            test is visible.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    lease_payloads,
)
from agent_memory.domain.errors import InvalidInput, LeaseNotHeld, ScopeRequired
from agent_memory.domain.records import Lease
from agent_memory.domain.validation import MAX_TTL
from agent_memory.ports.storage import LeaseStore

__all__ = ["LeaseStoreContract"]

ReopenLeaseStore = Callable[[], Awaitable[LeaseStore]]

CANARY_SCOPE = "agent-memory-contract-canary"
LONG = timedelta(seconds=60)
_PROPERTY = property_settings(max_examples=25, port="leases")
_LITERAL = ["*", "%", "_", "[", "?", "\\"]
_SEPARATORS = [":", "|", "/", "}"]
#: (first, second): owners/keys one trim, case fold or Unicode normalisation
#: (NFC, NFKC) apart; the store must keep them apart (LS-ISO-3).
_LOOKALIKES = [
    ("ana", "Ana"),
    ("ana", "ana "),
    ("ana", " ana"),
    ("\u00e9", "e\u0301"),  # precomposed vs combining accent
    ("finance", "\ufb01nance"),  # U+FB01 LATIN SMALL LIGATURE FI
]


def _brief(lease: Lease | None) -> tuple[str, int, bytes] | None:
    return None if lease is None else (lease.owner, lease.token, lease.payload)


async def _error_of(op: Awaitable[object]) -> BaseException | None:
    """The exception `op` raises, or None."""
    try:
        await op
    except Exception as exc:
        return exc
    return None


@mark_async_tests
class LeaseStoreContract(ShortTtl):
    """Conformance tests for `LeaseStore`; override `leases` (and `reopen`)."""

    capabilities: ClassVar[Capabilities] = Capabilities()

    @pytest.fixture  # sync: its failure shows in strict and auto mode alike
    def leases(self) -> LeaseStore:
        """Override: yield an EMPTY LeaseStore, close/clean it after the yield."""
        pytest.fail("LeaseStoreContract: override the `leases` fixture in your subclass")

    @pytest.fixture
    def reopen(self) -> ReopenLeaseStore | None:
        """Override when `capabilities.reopen`: an async callable opening a second
        handle on the same data as `leases`."""
        return None

    # -- helpers ---------------------------------------------------------------

    async def _must_acquire(
        self, cid: str, store: LeaseStore, scope: str, key: str, owner: str, **kw: Any
    ) -> Lease:
        lease = await store.acquire(scope, key, owner, kw.pop("ttl", LONG), **kw)
        # A refused acquire of a free key breaks LS-ACQ-1, whichever test needed it.
        why = "" if cid == "LS-ACQ-1" else f" (for {cid})"
        assert lease is not None, clause(
            "LS-ACQ-1", f"{owner!r} acquires free key {key!r}{why}", lease, want=Shown("a Lease")
        )
        return lease

    def _check_expiry(
        self,
        cid: str,
        op: str,
        lease: Lease,
        before: datetime,
        after: datetime,
        ttl: timedelta,
    ) -> None:
        """`lease.expires_at` is the call's now + ttl, never counted from the
        lease's earlier expiry. The tolerance is generous (a second, or the
        resolution if larger): the tests using it renew a lease with seconds left."""
        tol = max(self._res(), timedelta(seconds=1))
        low, high = before + ttl - tol, after + ttl + tol
        assert low <= lease.expires_at <= high, clause(
            cid,
            f"{op} sets expires_at to now + ttl within {tol} (not the old expiry + ttl)",
            lease.expires_at,
            want=Shown(f"between {low!r} and {high!r}"),
        )

    # -- canary (first) --------------------------------------------------------

    async def test_canary_write(self, leases: LeaseStore) -> None:
        """Takes a lease under a well-known scope for the last test to look for.

        When this fails, check that acquire works at all (LS-ACQ-1).
        """
        lease = await self._must_acquire(
            "LS-CANARY-1", leases, CANARY_SCOPE, "canary", "canary-owner", payload=b"canary"
        )
        got = _brief(await leases.get(CANARY_SCOPE, "canary"))
        assert got == ("canary-owner", lease.token, b"canary"), clause(
            "LS-CANARY-1",
            "the canary lease is held",
            got,
            want=("canary-owner", lease.token, b"canary"),
        )

    # -- acquire ---------------------------------------------------------------

    async def test_acquire_free_key(self, leases: LeaseStore) -> None:
        """A free key is acquired; the lease carries what was asked for.

        When this fails, check the lease fields built by acquire and the expiry
        computation (now + ttl, timezone-aware UTC).
        """
        ttl = timedelta(seconds=30)
        before = datetime.now(UTC)
        lease = await self._must_acquire(
            "LS-ACQ-1", leases, "s", "job:1", "worker-a", ttl=ttl, payload=b"\x00p"
        )
        after = datetime.now(UTC)
        fields = (lease.scope, lease.key, lease.owner, lease.payload)
        assert fields == ("s", "job:1", "worker-a", b"\x00p"), clause(
            "LS-ACQ-1",
            "the lease names scope, key, owner and payload",
            fields,
            want=("s", "job:1", "worker-a", b"\x00p"),
        )
        assert lease.token >= 1, clause(
            "LS-ACQ-1", "the token is positive", lease.token, want=Shown(">= 1")
        )
        tol = self._res()
        assert before + ttl - tol <= lease.expires_at <= after + ttl + tol, clause(
            "LS-ACQ-1",
            f"expires_at is now + ttl within {tol}",
            lease.expires_at,
            want=Shown(f"between {before + ttl - tol!r} and {after + ttl + tol!r}"),
        )
        got = await leases.get("s", "job:1")
        assert _brief(got) == _brief(lease), clause(
            "LS-ACQ-1", "get returns the acquired lease", _brief(got), want=_brief(lease)
        )

    async def test_acquire_held_by_other(self, leases: LeaseStore) -> None:
        """Another owner cannot take a held lease; the holder's lease is unchanged.

        When this fails, check that acquire compares the current owner atomically
        (SET NX / compare-and-set / INSERT ... ON CONFLICT with an owner check).
        """
        held = await self._must_acquire("LS-ACQ-2", leases, "s", "k", "a", payload=b"mine")
        stolen = await leases.acquire("s", "k", "b", LONG, b"theirs")
        assert stolen is None, clause(
            "LS-ACQ-2", "a held lease is not granted", stolen, want=None, detail=_brief(stolen)
        )
        got = await leases.get("s", "k")
        assert _brief(got) == _brief(held), clause(
            "LS-ACQ-2", "the holder's lease is unchanged", _brief(got), want=_brief(held)
        )

    async def test_reacquire_by_owner(self, leases: LeaseStore) -> None:
        """Re-acquiring our own lease keeps the token, extends, replaces the payload.

        When this fails, check the 'already ours' branch of acquire: it must not
        mint a new token.
        """
        first = await self._must_acquire(
            "LS-ACQ-3", leases, "s", "k", "a", ttl=timedelta(seconds=5), payload=b"v1"
        )
        before = datetime.now(UTC)
        second = await leases.acquire("s", "k", "a", timedelta(seconds=50), b"v2")
        after = datetime.now(UTC)
        assert second is not None, clause("LS-ACQ-3", "the owner re-acquires its lease", second)
        assert second.token == first.token, clause(
            "LS-ACQ-3", "re-acquire keeps the token", second.token, want=first.token
        )
        assert second.expires_at > first.expires_at + timedelta(seconds=30), clause(
            "LS-ACQ-3",
            "re-acquire extends the expiry",
            second.expires_at,
            want=Shown(f"after {first.expires_at + timedelta(seconds=30)!r}"),
        )
        self._check_expiry("LS-ACQ-3", "re-acquire", second, before, after, timedelta(seconds=50))
        got = await leases.get("s", "k")
        assert _brief(got) == ("a", first.token, b"v2"), clause(
            "LS-ACQ-3",
            "re-acquire replaces the payload",
            _brief(got),
            want=("a", first.token, b"v2"),
        )

    async def test_concurrent_acquirers(self, leases: LeaseStore) -> None:
        """50 concurrent acquirers of one key: exactly one wins.

        When this fails, the acquire is check-then-act: make it one atomic step
        (SET NX PX, a Lua script, a row lock or a conditional upsert).
        """
        owners = [f"worker-{i}" for i in range(50)]
        results = await asyncio.gather(
            *(leases.acquire("s", "contended", o, LONG, o.encode()) for o in owners)
        )
        winners = [r for r in results if r is not None]
        assert len(winners) == 1, clause(
            "LS-EXC-1",
            "exactly one of 50 concurrent acquirers gets the lease",
            len(winners),
            want=1,
            detail=[_brief(w) for w in winners],
        )
        got = await leases.get("s", "contended")
        assert _brief(got) == _brief(winners[0]), clause(
            "LS-EXC-1", "the stored lease is the winner's", _brief(got), want=_brief(winners[0])
        )

    async def test_concurrent_acquirers_across_handles(
        self, leases: LeaseStore, reopen: ReopenLeaseStore | None
    ) -> None:
        """50 acquirers split over two handles: exactly one wins.

        When this fails, check that exclusivity lives in the backend, not in
        per-handle state (an in-process lock is not enough).
        """
        opener = require_reopen(self.capabilities, "LS-EXC-2", reopen)
        other = await opener()
        try:
            calls = [
                (leases if i % 2 else other).acquire("s", "contended", f"w{i}", LONG)
                for i in range(50)
            ]
            results = await asyncio.gather(*calls)
            winners = [_brief(r) for r in results if r is not None]
            assert len(winners) == 1, clause(
                "LS-EXC-2",
                "exactly one of 50 acquirers on two handles wins",
                len(winners),
                want=1,
                detail=winners,
            )
        finally:
            await other.close()

    # -- expiry ----------------------------------------------------------------

    async def test_expired_lease_taken_by_another(self, leases: LeaseStore) -> None:
        """After the ttl passes another owner acquires, with a larger token.

        When this fails, check the expiry comparison and that a fresh acquisition
        increments the per-key counter rather than restarting it.
        """
        first = await self._must_acquire("LS-EXP-1", leases, "s", "k", "a", ttl=self._short())
        await self._outlive_short()
        second = await leases.acquire("s", "k", "b", LONG)
        assert second is not None, clause("LS-EXP-1", "an expired lease can be taken", second)
        assert second.token > first.token, clause(
            "LS-EXP-1",
            "the new holder's token is larger",
            second.token,
            want=Shown(f"> {first.token!r}"),
        )

    async def test_expired_lease_reacquired_by_its_owner(self, leases: LeaseStore) -> None:
        """When this fails, the 'already ours' branch of acquire compares the
        stored owner but not the expiry (an expired record still in the backend,
        or a lazy expiry nothing has triggered yet), so the last owner keeps the
        old token: while it was expired another process may have acted on the
        key, and fencing needs a new, larger token. Take the 'ours' branch only
        for an unexpired lease; otherwise mint a token as for any other owner."""
        first = await self._must_acquire(
            "LS-EXP-3", leases, "s", "k", "a", ttl=self._short(), payload=b"v1"
        )
        await self._outlive_short()
        again = await leases.acquire("s", "k", "a", LONG, b"v2")
        assert again is not None, clause(
            "LS-EXP-3", "the owner re-acquires its expired lease", again, want=Shown("a Lease")
        )
        assert again.token > first.token, clause(
            "LS-EXP-3",
            "re-acquiring one's own expired lease mints a new, larger token",
            again.token,
            want=Shown(f"> {first.token!r}"),
            detail=_brief(again),
        )
        got = await leases.get("s", "k")
        assert _brief(got) == ("a", again.token, b"v2"), clause(
            "LS-EXP-3",
            "get shows the fresh lease",
            _brief(got),
            want=("a", again.token, b"v2"),
        )

    async def test_expired_lease_invisible(self, leases: LeaseStore) -> None:
        """An expired lease is gone from `get` and `scan`; live ones stay.

        When this fails, check that get/scan filter on expires_at > now (or rely
        on a backend TTL set from the same ttl).
        """
        await self._must_acquire("LS-EXP-2", leases, "s", "p/short", "a", ttl=self._short())
        await self._must_acquire("LS-EXP-2", leases, "s", "p/long", "a")
        await self._outlive_short()
        got = await leases.get("s", "p/short")
        assert got is None, clause(
            "LS-EXP-2", "get of an expired lease is None", got, want=None, detail=_brief(got)
        )
        keys = [lease.key for lease in await leases.scan("s", "p/")]
        assert keys == ["p/long"], clause(
            "LS-EXP-2", "scan skips expired leases", keys, want=["p/long"]
        )

    # -- renew -----------------------------------------------------------------

    async def test_renew_by_non_owner(self, leases: LeaseStore) -> None:
        """Renew by someone else raises `LeaseNotHeld` and changes nothing.

        When this fails, check the owner comparison in renew (atomic with the
        update).
        """
        held = await self._must_acquire("LS-RENEW-1", leases, "s", "k", "a", payload=b"a")
        await expect_raises(
            "LS-RENEW-1",
            "renew by a non-owner raises LeaseNotHeld",
            LeaseNotHeld,
            leases.renew("s", "k", "b", timedelta(seconds=600), b"b"),
        )
        got = await leases.get("s", "k")
        assert got is not None, clause("LS-RENEW-1", "the lease is still held", got)
        assert (_brief(got), got.expires_at) == (_brief(held), held.expires_at), clause(
            "LS-RENEW-1",
            "a refused renew leaves owner, token, payload, expiry",
            (_brief(got), got.expires_at),
            want=(_brief(held), held.expires_at),
            detail=_brief(got),
        )

    @pytest.mark.parametrize("state", ["expired", "released", "never-held"])
    async def test_renew_not_held(self, leases: LeaseStore, state: str) -> None:
        """Renew of an expired, released or never-held lease raises `LeaseNotHeld`.

        When this fails, check that renew checks expiry and existence, not only the
        stored owner (an expired record may still be in the backend).
        """
        if state == "expired":
            await self._must_acquire("LS-RENEW-2", leases, "s", "k", "a", ttl=self._short())
            await self._outlive_short()
        elif state == "released":
            await self._must_acquire("LS-RENEW-2", leases, "s", "k", "a")
            assert await leases.release("s", "k", "a"), clause(
                "LS-RENEW-2", "the owner releases its lease"
            )
        await expect_raises(
            "LS-RENEW-2",
            f"renew of a {state} lease raises LeaseNotHeld",
            LeaseNotHeld,
            leases.renew("s", "k", "a", LONG),
        )
        got = await leases.get("s", "k")
        assert got is None, clause(
            "LS-RENEW-2", "a refused renew revives nothing", got, want=None, detail=_brief(got)
        )

    @pytest.mark.parametrize(
        "payload", [None, b"new\xff", b""], ids=["keep-payload", "new-payload", "empty-payload"]
    )
    async def test_renew_extends(self, leases: LeaseStore, payload: bytes | None) -> None:
        """Renew extends expires_at, keeps the token; payload replaced or kept.

        When this fails, check renew's payload handling (None keeps it) and that
        it computes expires_at from now + ttl without minting a token.
        """
        held = await self._must_acquire(
            "LS-RENEW-3", leases, "s", "k", "a", ttl=timedelta(seconds=5), payload=b"old"
        )
        before = datetime.now(UTC)
        renewed = await leases.renew("s", "k", "a", timedelta(seconds=50), payload)
        after = datetime.now(UTC)
        want_payload = b"old" if payload is None else payload
        assert (renewed.token, renewed.payload) == (held.token, want_payload), clause(
            "LS-RENEW-3",
            "renew keeps the token and applies the payload rule",
            (renewed.token, renewed.payload),
            want=(held.token, want_payload),
            detail=_brief(renewed),
        )
        assert renewed.expires_at > held.expires_at + timedelta(seconds=30), clause(
            "LS-RENEW-3",
            "renew extends expires_at",
            renewed.expires_at,
            want=Shown(f"after {held.expires_at + timedelta(seconds=30)!r}"),
        )
        self._check_expiry("LS-RENEW-3", "renew", renewed, before, after, timedelta(seconds=50))
        got = await leases.get("s", "k")
        assert _brief(got) == ("a", held.token, want_payload), clause(
            "LS-RENEW-3",
            "get shows the renewed lease",
            _brief(got),
            want=("a", held.token, want_payload),
        )

    # -- release ---------------------------------------------------------------

    async def test_release_by_non_owner(self, leases: LeaseStore) -> None:
        """Release by another owner, or of a free key, returns False.

        When this fails, check the owner comparison in release (delete only when
        the stored owner matches, atomically).
        """
        held = await self._must_acquire("LS-REL-1", leases, "s", "k", "a")
        released = await leases.release("s", "k", "b")
        assert released is False, clause(
            "LS-REL-1", "non-owner release returns False", released, want=False
        )
        got = await leases.get("s", "k")
        assert _brief(got) == _brief(held), clause(
            "LS-REL-1", "a refused release leaves the lease intact", _brief(got), want=_brief(held)
        )
        free = await leases.release("s", "free", "a")
        assert free is False, clause(
            "LS-REL-1", "release of a free key returns False", free, want=False
        )

    async def test_release_by_owner(self, leases: LeaseStore) -> None:
        """Release by the owner frees the key; a second release returns False.

        When this fails, check that release deletes the lease (keeping the fencing
        counter) and reports whether it did.
        """
        held = await self._must_acquire("LS-REL-2", leases, "s", "k", "a")
        released = await leases.release("s", "k", "a")
        assert released is True, clause(
            "LS-REL-2", "owner release returns True", released, want=True
        )
        got = await leases.get("s", "k")
        assert got is None, clause(
            "LS-REL-2", "a released key is free", got, want=None, detail=_brief(got)
        )
        again = await leases.release("s", "k", "a")
        assert again is False, clause(
            "LS-REL-2", "a second release returns False", again, want=False
        )
        nxt = await self._must_acquire("LS-REL-2", leases, "s", "k", "b")
        assert nxt.token > held.token, clause(
            "LS-REL-2",
            "the next holder gets a larger token",
            nxt.token,
            want=Shown(f"> {held.token!r}"),
        )

    async def test_release_of_expired_lease(self, leases: LeaseStore) -> None:
        """When this fails, release compares the stored owner but not the expiry
        (`DELETE ... WHERE owner = ?` without `AND expires_at > now`, or a lazy
        expiry nothing has triggered yet): an expired lease is free, so its last
        owner no longer holds it and release must return False, as for a free
        key."""
        held = await self._must_acquire("LS-REL-3", leases, "s", "k", "a", ttl=self._short())
        await self._outlive_short()
        released = await leases.release("s", "k", "a")
        assert released is False, clause(
            "LS-REL-3",
            "release of its own expired lease by the owner it had returns False",
            released,
            want=False,
        )
        got = await leases.get("s", "k")
        assert got is None, clause(
            "LS-REL-3", "the expired key stays free", got, want=None, detail=_brief(got)
        )
        nxt = await self._must_acquire("LS-REL-3", leases, "s", "k", "b")
        assert nxt.token > held.token, clause(
            "LS-REL-3",
            "the next holder gets a larger token",
            nxt.token,
            want=Shown(f"> {held.token!r}"),
        )

    # -- fencing ---------------------------------------------------------------

    async def test_tokens_only_grow(self, leases: LeaseStore) -> None:
        """Tokens grow across release, expiry and changes of owner.

        When this fails, check that the per-key counter survives release and expiry
        (it must not live in the lease record that gets deleted).
        """
        tokens: list[int] = []
        lease = await self._must_acquire("LS-FENCE-1", leases, "s", "k", "a")
        tokens.append(lease.token)
        await leases.release("s", "k", "a")
        lease = await self._must_acquire("LS-FENCE-1", leases, "s", "k", "b", ttl=self._short())
        tokens.append(lease.token)
        await self._outlive_short()
        lease = await self._must_acquire("LS-FENCE-1", leases, "s", "k", "c")
        tokens.append(lease.token)
        again = await self._must_acquire("LS-FENCE-1", leases, "s", "k", "c")
        assert again.token == lease.token, clause(
            "LS-FENCE-1", "re-acquire by the holder keeps the token", again.token, want=lease.token
        )
        await leases.release("s", "k", "c")
        lease = await self._must_acquire("LS-FENCE-1", leases, "s", "k", "a")
        tokens.append(lease.token)
        assert all(x < y for x, y in itertools.pairwise(tokens)), clause(
            "LS-FENCE-1", "each fresh acquisition's token is larger than every earlier", tokens
        )

    @_PROPERTY
    @given(
        ops=st.lists(
            st.tuples(st.sampled_from(["acquire", "release"]), st.sampled_from("abc")),
            min_size=1,
            max_size=20,
        )
    )
    async def test_acquire_release_model_property(
        self, leases: LeaseStore, ops: list[tuple[str, str]]
    ) -> None:
        """Property: acquire/release sequences agree with a model of one lease.

        When this fails, replay the falsifying operations by hand: which step
        granted a held lease, refused a free one, or reused a token?
        """
        key = f"model-{uuid.uuid4().hex}"
        holder: str | None = None
        token = 0
        for op, owner in ops:
            if op == "acquire":
                got = await leases.acquire("m", key, owner, LONG)
                if holder is None:
                    rule = f"free key: {owner} gets a token > {token}"
                    assert got is not None, clause("LS-FENCE-2", rule, got)
                    assert got.token > token, clause("LS-FENCE-2", rule, _brief(got))
                    holder, token = owner, got.token
                elif holder == owner:
                    rule = f"holder {owner} re-acquires with token {token}"
                    assert got is not None, clause("LS-FENCE-2", rule, got)
                    assert got.token == token, clause(
                        "LS-FENCE-2", rule, got.token, want=token, detail=_brief(got)
                    )
                else:
                    assert got is None, clause(
                        "LS-FENCE-2",
                        f"{owner} cannot take {holder}'s lease",
                        got,
                        want=None,
                        detail=_brief(got),
                    )
            else:
                released = await leases.release("m", key, owner)
                assert released == (holder == owner), clause(
                    "LS-FENCE-2",
                    f"release by {owner} with holder {holder}",
                    released,
                    want=holder == owner,
                )
                if released:
                    holder = None

    # -- scan ------------------------------------------------------------------

    async def test_scan_prefix_ordered_with_payloads(self, leases: LeaseStore) -> None:
        """scan(prefix) lists the matching leases ordered by key, with payloads.

        When this fails, check the prefix match (starts-with on the key only, not
        on the scope) and the sort (code-point order, e.g. COLLATE "C").
        """
        # "A" and "B" sort before every lowercase key by code point; a
        # case-insensitive collation would put "B" between "ab" and "b"
        keys = ["b", "a/2", "A", "a/1", "B", "a", "ab", "c", "a%", "é"]
        for k in keys:
            await self._must_acquire("LS-SCAN-1", leases, "s", k, "o", payload=k.encode() + b"\xff")
        got = [(x.key, x.payload) for x in await leases.scan("s", "a")]
        want = [(k, k.encode() + b"\xff") for k in sorted(k for k in keys if k.startswith("a"))]
        assert got == want, clause(
            "LS-SCAN-1", "scan('a') is ordered by key, with payloads", got, want=want
        )
        every = [x.key for x in await leases.scan("s")]
        assert every == sorted(keys), clause(
            "LS-SCAN-1",
            "scan with the default prefix lists every key in order",
            every,
            want=sorted(keys),
        )
        none = await leases.scan("s", "zz")
        assert none == [], clause("LS-SCAN-1", "a prefix matching nothing gives []", none, want=[])

    async def test_scan_hides_expired_without_prior_read(self, leases: LeaseStore) -> None:
        """When this fails, expiry is lazy: an expired lease is only dropped when
        `get`/`acquire` touches it, and `scan` lists what is stored. Filter on
        expires_at in scan itself (or let the backend expire the key)."""
        await self._must_acquire("LS-SCAN-3", leases, "s", "p/short", "a", ttl=self._short())
        await self._must_acquire("LS-SCAN-3", leases, "s", "p/long", "a")
        await self._outlive_short()
        listed = [x.key for x in await leases.scan("s", "p/")]
        assert listed == ["p/long"], clause(
            "LS-SCAN-3",
            "scan lists no expired lease (nothing read it first)",
            listed,
            want=["p/long"],
        )
        everything = [x.key for x in await leases.scan("s")]
        assert everything == ["p/long"], clause(
            "LS-SCAN-3",
            "scan with the default prefix lists no expired lease",
            everything,
            want=["p/long"],
        )

    @pytest.mark.parametrize("char", _LITERAL)
    async def test_scan_prefix_is_literal(self, leases: LeaseStore, char: str) -> None:
        """Pattern characters in the prefix match only themselves.

        When this fails, escape the prefix for the backend's pattern language
        (Redis MATCH glob, SQL LIKE ... ESCAPE) or compare prefixes directly.
        """
        keys = [f"k{char}1", f"k{char}", f"k{char}{char}", "kx1", "k1", "k", "kk", "x"]
        for k in keys:
            await self._must_acquire("LS-SCAN-2", leases, "s", k, "o")
        got = [x.key for x in await leases.scan("s", f"k{char}")]
        want = sorted(k for k in keys if k.startswith(f"k{char}"))
        assert got == want, clause(
            "LS-SCAN-2", f"prefix 'k{char}' is matched literally", got, want=want
        )

    # -- isolation -------------------------------------------------------------

    @pytest.mark.parametrize(
        ("first", "second"), ADVERSARIAL_SCOPE_PAIRS, ids=[repr(p) for p in ADVERSARIAL_SCOPE_PAIRS]
    )
    async def test_scopes_isolated(self, leases: LeaseStore, first: str, second: str) -> None:
        """The same key in two scopes is two leases, however the scopes are spelled.

        When this fails, check how the scope is put into keys or queries: escape
        or hash it; no glob/LIKE/regex; no case or Unicode folding.
        """
        one = await self._must_acquire("LS-ISO-1", leases, first, "job", "a", payload=b"1")
        two = await self._must_acquire("LS-ISO-1", leases, second, "job", "b", payload=b"2")
        for scope, lease in ((first, one), (second, two)):
            got = [_brief(x) for x in await leases.scan(scope)]
            assert got == [_brief(lease)], clause(
                "LS-ISO-1", f"scope {scope!r} scans only its own lease", got, want=[_brief(lease)]
            )
        assert await leases.release(first, "job", "a"), clause(
            "LS-ISO-1", "the first scope's owner releases its lease"
        )
        got2 = await leases.get(second, "job")
        assert _brief(got2) == _brief(two), clause(
            "LS-ISO-1", "releasing in one scope leaves the other", _brief(got2), want=_brief(two)
        )

    @pytest.mark.parametrize("sep", _SEPARATORS)
    async def test_scope_key_join_collision(self, leases: LeaseStore, sep: str) -> None:
        """(scope 'a{sep}b', key 'c') and (scope 'a', key 'b{sep}c') are distinct.

        When this fails, the storage key is scope + separator + key without
        escaping: escape or length-prefix the parts.
        """
        one = await self._must_acquire("LS-ISO-2", leases, f"a{sep}b", "c", "x")
        two = await leases.acquire("a", f"b{sep}c", "y", LONG)
        assert two is not None, clause(
            "LS-ISO-2", "a different (scope, key) pair is free", _brief(two)
        )
        inner = [x.key for x in await leases.scan("a")]
        assert inner == [f"b{sep}c"], clause(
            "LS-ISO-2", "scope 'a' holds one key", inner, want=[f"b{sep}c"]
        )
        outer = [_brief(x) for x in await leases.scan(f"a{sep}b")]
        assert outer == [_brief(one)], clause(
            "LS-ISO-2", f"scope 'a{sep}b' holds one", outer, want=[_brief(one)]
        )

    @pytest.mark.parametrize(("first", "second"), _LOOKALIKES, ids=repr)
    async def test_lookalike_owners_and_keys_stay_distinct(
        self, leases: LeaseStore, first: str, second: str
    ) -> None:
        """When this fails, the store trims, case-folds or Unicode-normalises
        owners or keys (a case-insensitive or non-deterministic collation, NFC
        on the way in, `.strip()`): they are opaque and compared exactly, so a
        lookalike owner is another owner and a lookalike key another lease."""
        held = await self._must_acquire("LS-ISO-3", leases, "s", "job", first, payload=b"1")
        taken = await leases.acquire("s", "job", second, LONG, b"2")
        assert taken is None, clause(
            "LS-ISO-3",
            f"owner {second!r} cannot acquire {first!r}'s lease",
            _brief(taken),
            want=None,
        )
        renewed = await _error_of(leases.renew("s", "job", second, LONG, b"2"))
        assert isinstance(renewed, LeaseNotHeld), clause(
            "LS-ISO-3",
            f"owner {second!r} cannot renew {first!r}'s lease (LeaseNotHeld)",
            outcome(renewed),
            want=Shown("LeaseNotHeld"),
        )
        released = await leases.release("s", "job", second)
        assert released is False, clause(
            "LS-ISO-3",
            f"owner {second!r} cannot release {first!r}'s lease",
            released,
            want=False,
        )
        got = await leases.get("s", "job")
        assert _brief(got) == _brief(held), clause(
            "LS-ISO-3", "the holder's lease is unchanged", _brief(got), want=_brief(held)
        )
        one = await self._must_acquire("LS-ISO-3", leases, "s", f"k-{first}", "o1", payload=b"1")
        two = await leases.acquire("s", f"k-{second}", "o2", LONG, b"2")
        assert two is not None, clause(
            "LS-ISO-3",
            f"key {'k-' + second!r} is free while {'k-' + first!r} is held",
            _brief(two),
            want=Shown("a Lease"),
        )
        want = sorted([(one.key, "o1"), (two.key, "o2")])
        listed = [(x.key, x.owner) for x in await leases.scan("s", "k-")]
        assert listed == want, clause(
            "LS-ISO-3", "lookalike keys are two leases", listed, want=want
        )
        assert await leases.release("s", f"k-{first}", "o1"), clause(
            "LS-ISO-3", "the first key's owner releases it"
        )
        left = _brief(await leases.get("s", f"k-{second}"))
        assert left == _brief(two), clause(
            "LS-ISO-3", "releasing one key leaves its lookalike", left, want=_brief(two)
        )

    @_PROPERTY
    @given(key=cache_keys(), payload=lease_payloads())
    async def test_payload_round_trip_property(
        self, leases: LeaseStore, key: str, payload: bytes
    ) -> None:
        """Property: adversarial keys and any payload bytes round-trip.

        When this fails, check the codec (bytes, not text; b"" stays b"") and key
        escaping.
        """
        scope = f"pay-{uuid.uuid4().hex}"
        lease = await leases.acquire(scope, key, "o", LONG, payload)
        assert _brief(lease) == ("o", getattr(lease, "token", 0), payload), clause(
            "LS-PAY-1",
            "acquire returns the payload",
            _brief(lease),
            want=("o", getattr(lease, "token", 0), payload),
        )
        got = await leases.get(scope, key)
        assert (None if got is None else (got.key, got.payload)) == (key, payload), clause(
            "LS-PAY-1",
            "get returns key and payload unchanged",
            None if got is None else (got.key, got.payload),
            want=(key, payload),
            detail=_brief(got),
        )
        scanned = [(x.key, x.payload) for x in await leases.scan(scope, key)]
        assert scanned == [(key, payload)], clause(
            "LS-PAY-1", "scan(key) finds exactly that lease", scanned, want=[(key, payload)]
        )

    # -- bad input -------------------------------------------------------------

    @pytest.mark.parametrize("op", ["acquire", "renew", "release", "get", "scan"])
    async def test_blank_scope(self, leases: LeaseStore, op: str) -> None:
        """An empty or whitespace-only scope raises `ScopeRequired`.

        When this fails, check that the operation validates its scope first
        (`domain.validation.require_scope`).
        """
        calls: dict[str, Callable[[str], Awaitable[object]]] = {
            "acquire": lambda scope: leases.acquire(scope, "k", "o", LONG),
            "renew": lambda scope: leases.renew(scope, "k", "o", LONG),
            "release": lambda scope: leases.release(scope, "k", "o"),
            "get": lambda scope: leases.get(scope, "k"),
            "scan": lambda scope: leases.scan(scope, ""),
        }
        for blank in ("", " ", "\t\n"):
            await expect_raises(
                "LS-SCOPE-1",
                f"{op} with scope {blank!r} raises ScopeRequired",
                ScopeRequired,
                calls[op](blank),
            )

    @pytest.mark.parametrize(
        "case", ["blank-key", "blank-owner", "ttl-zero", "ttl-negative", "ttl-not-timedelta"]
    )
    async def test_invalid_input(self, leases: LeaseStore, case: str) -> None:
        """Blank keys/owners and non-positive or non-timedelta ttls raise `InvalidInput`.

        When this fails, check the argument validation at the top of each operation
        (before any owner check: bad input is not `LeaseNotHeld`).
        """
        key, owner, ttl = "k", "o", LONG
        bad: Any
        if case == "blank-key":
            key = " "
        elif case == "blank-owner":
            owner = ""
        elif case == "ttl-zero":
            ttl = timedelta(0)
        elif case == "ttl-negative":
            ttl = timedelta(seconds=-1)
        else:
            bad = 5
            ttl = bad
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("acquire", lambda: leases.acquire("s", key, owner, ttl)),
            ("renew", lambda: leases.renew("s", key, owner, ttl)),
        ]
        if case in ("blank-key", "blank-owner"):
            calls.append(("release", lambda: leases.release("s", key, owner)))
        if case == "blank-key":
            calls.append(("get", lambda: leases.get("s", key)))
        for name, call in calls:
            await expect_raises(
                "LS-INPUT-1", f"{name} with {case} raises InvalidInput", InvalidInput, call()
            )
        got = await leases.scan("s")
        assert got == [], clause("LS-INPUT-1", "rejected calls store nothing", got, want=[])

    async def test_ttl_above_the_maximum_is_invalid(self, leases: LeaseStore) -> None:
        """When this fails, `now + ttl` overflows (or the engine refuses the expiry):
        check the ttl against MAX_TTL before any arithmetic."""
        for ttl in (MAX_TTL + timedelta(microseconds=1), timedelta(days=999_999_999)):
            for name, call in (("acquire", leases.acquire), ("renew", leases.renew)):
                exc = await _error_of(call("s", "k", "o", ttl))
                rule = f"{name}(ttl={ttl}) raises InvalidInput"
                assert isinstance(exc, InvalidInput), clause(
                    "LS-INPUT-2", rule, outcome(exc), want=Shown("InvalidInput")
                )
                assert "ttl" in str(exc), clause(
                    "LS-INPUT-2",
                    "the message names `ttl`",
                    str(exc),
                    want=Shown("a message containing 'ttl'"),
                )
        lease = await leases.acquire("s", "k", "o", MAX_TTL)
        assert lease is not None, clause("LS-INPUT-2", "a MAX_TTL lease is acquired", lease)

    async def test_ids_at_and_over_the_maximum(self, leases: LeaseStore) -> None:
        """When this fails at the maximum, the backend cannot hold MAX_ID_BYTES in
        scope, key and owner at once (a key or index entry over the engine's
        limit); over it, the size is not checked before I/O (`check_lease_args`)."""
        scope, key, owner = (max_id(f"ls-{f}") for f in ("scope", "key", "owner"))
        ttl = timedelta(minutes=5)
        lease = await leases.acquire(scope, key, owner, ttl, payload=b"p")
        assert lease is not None, clause("LS-INPUT-3", "a lease of maximal ids is acquired")
        got_ids = (lease.scope, lease.key, lease.owner)
        assert got_ids == (scope, key, owner), clause(
            "LS-INPUT-3", "its ids read back", got_ids, want=(scope, key, owner)
        )
        renewed = await leases.renew(scope, key, owner, ttl)
        assert renewed.token == lease.token, clause(
            "LS-INPUT-3", "renew keeps it", renewed.token, want=lease.token, detail=renewed
        )
        got = await leases.get(scope, key)
        assert got is not None, clause("LS-INPUT-3", "get finds it")
        assert got.owner == owner, clause(
            "LS-INPUT-3", "get reads its owner back", got.owner, want=owner
        )
        listed = [x.key for x in await leases.scan(scope, key[:10])]
        assert listed == [key], clause("LS-INPUT-3", "scan finds it", listed, want=[key])
        assert await leases.release(scope, key, owner), clause("LS-INPUT-3", "release frees it")
        long = max_id("ls-over") + "x"
        calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("scope", lambda: leases.acquire(long, "k", "o", ttl)),
            ("key", lambda: leases.acquire("s", long, "o", ttl)),
            ("owner", lambda: leases.acquire("s", "k", long, ttl)),
            ("scope", lambda: leases.renew(long, "k", "o", ttl)),
            ("key", lambda: leases.renew("s", long, "o", ttl)),
            ("owner", lambda: leases.renew("s", "k", long, ttl)),
            ("scope", lambda: leases.release(long, "k", "o")),
            ("key", lambda: leases.release("s", long, "o")),
            ("owner", lambda: leases.release("s", "k", long)),
            ("scope", lambda: leases.get(long, "k")),
            ("key", lambda: leases.get("s", long)),
            ("scope", lambda: leases.scan(long)),
        ]
        for field, call in calls:
            await expect_too_long("LS-INPUT-3", field, call())
        got_all = await leases.scan("s")
        assert got_all == [], clause("LS-INPUT-3", "rejected calls store nothing", got_all, want=[])

    # -- lifecycle ---------------------------------------------------------------

    async def test_operations_after_close(self, leases: LeaseStore) -> None:
        """After close (twice), every operation raises `StoreClosed`.

        When this fails, check that every method goes through the lifecycle guard
        and that a second close is a no-op.
        """
        await self._must_acquire("LS-CLOSE-1", leases, "s", "k", "o")
        await leases.close()
        try:
            await leases.close()
        except Exception as exc:
            pytest.fail(clause("LS-CLOSE-1", "a second close does not raise", repr(exc)))
        await expect_closed(
            "LS-CLOSE-1",
            {
                "acquire": lambda: leases.acquire("s", "k2", "o", LONG),
                "renew": lambda: leases.renew("s", "k", "o", LONG),
                "release": lambda: leases.release("s", "k", "o"),
                "get": lambda: leases.get("s", "k"),
                "scan": lambda: leases.scan("s"),
                "ping": lambda: leases.ping(),
            },
        )

    async def test_acquire_racing_close(
        self, leases: LeaseStore, reopen: ReopenLeaseStore | None
    ) -> None:
        """Acquires racing close: completed before close returned, or rejected.

        When this fails, check that close waits for in-flight operations before
        releasing resources and that no write is queued to run after close.
        """
        opener = require_reopen(self.capabilities, "LS-CLOSE-2", reopen)
        keys = [f"race-{i:02d}" for i in range(20)]
        acquires = [(k, partial(leases.acquire, "s", k, "o", LONG)) for k in keys]
        results = await race_close("LS-CLOSE-2", "acquire", acquires, leases.close)
        done = sorted(k for k, r in zip(keys, results, strict=True) if isinstance(r, Lease))
        other = await opener()
        try:
            for _ in range(2):
                held = [x.key for x in await other.scan("s", "race-")]
                assert held == done, clause(
                    "LS-CLOSE-2",
                    "exactly the acquires that completed before close are held",
                    held,
                    want=done,
                )
                await asyncio.sleep(self._res().total_seconds() * 2)
        finally:
            await other.close()

    # -- canary (last) ---------------------------------------------------------

    async def test_canary_fixture_is_empty(self, leases: LeaseStore) -> None:
        """The fixture must yield an EMPTY store: the first test's canary is gone.

        When this fails, your `leases` fixture leaks data between tests: use a
        fresh key prefix/schema per test, or delete everything after the yield.
        """
        got = _brief(await leases.get(CANARY_SCOPE, "canary"))
        assert got is None, clause("LS-CANARY-1", "a fresh fixture holds no leases", got, want=None)
        listed = [x.key for x in await leases.scan(CANARY_SCOPE)]
        assert listed == [], clause("LS-CANARY-1", "a fresh fixture scans empty", listed, want=[])

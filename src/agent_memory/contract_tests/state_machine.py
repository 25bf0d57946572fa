"""A hypothesis state machine that runs random add/get/update/delete/search/
list/delete_scope sequences (and update_if_older/delete_if_unchanged on a store
with `VersionedWrites`) against the store under test and the in-memory
oracle (`InMemoryMemoryStore`) and asserts they agree (clause MS-SM-1).

The store lives on pytest-asyncio's event loop; hypothesis drives the machine
from a worker thread and each rule submits its coroutines to that loop. Every
example uses fresh random owners, so examples never see each other's data even
though they share one store.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Coroutine, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

import attrs
import numpy as np
import numpy.typing as npt
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.contract_tests._support import (
    BASE_TIME,
    PORT_TIMING,
    Shown,
    assert_same_record,
    clause,
    outcome,
    shrink_budget,
)
from agent_memory.contract_tests.capabilities import Capabilities
from agent_memory.domain.errors import AgentMemoryError, DuplicateRecord
from agent_memory.domain.records import MemoryRecord, ScoredRecord
from agent_memory.domain.validation import require_int_at_least
from agent_memory.ports.storage import MemoryStore, VersionedWrites

__all__ = ["STEP_COUNT", "run_against_oracle"]

#: Steps per example; the example count comes from the active hypothesis profile.
STEP_COUNT = 12
SCORE_TOL = 1e-4
_T = TypeVar("_T")

# Lookalikes on purpose: a store that trims, case-folds, NFKC-normalises or
# splits on `.` merges two of these owners and disagrees with the oracle.
_OWNER_SUFFIXES = ("a:*", "b ü{x}", "a:* ", "A:*", "\ufb01.x", "fi.x")
_IDS = ("i0", "i1", "i2", "I0", "i:*", "i 1", "ü")
_NAMESPACES = ("n1", "n|2")
_KINDS = ("k1", "k2", "k*")
_WORDS = ("alpha", "beta", "gamma", "", "ünï")

_owner_idx = st.integers(0, len(_OWNER_SUFFIXES) - 1)
_ids = st.sampled_from(_IDS)
_vec4 = st.lists(st.integers(-2, 2), min_size=4, max_size=4)
_namespace_filter = st.none() | st.sampled_from(_NAMESPACES)
_kinds_filter = st.none() | st.lists(st.sampled_from(_KINDS), min_size=1, max_size=2, unique=True)
_record_spec = st.tuples(
    _owner_idx,
    _ids,
    st.sampled_from(_NAMESPACES),
    st.sampled_from(_KINDS),
    _vec4,
    st.integers(0, 4),
    st.sampled_from(_WORDS),
    st.sampled_from((0.0, 0.5, 1.0)),
)
RecordSpec = tuple[int, str, str, str, list[int], int, str, float]


# Conditional writes: a version as late (0), older (-1) or later (1) than the
# stored one, mostly aimed at a stored record (`pick`), sometimes at any id.
_shifts = st.sampled_from((-1, 0, 0, 1))
_picks = st.none() | st.integers(0, 1_000) | st.integers(0, 1_000)


def _key(spec: RecordSpec) -> tuple[int, str]:
    return spec[0], spec[1]


# Mostly batches of distinct ids (so adds land); sometimes a repeated id.
_batches = st.lists(_record_spec, min_size=1, max_size=3, unique_by=_key) | st.lists(
    _record_spec, min_size=2, max_size=3
)


class _Failed:
    """An operation's error outcome, compared by type."""

    def __init__(self, exc: BaseException) -> None:
        self.type = type(exc)
        self.exc = exc

    def __repr__(self) -> str:
        return f"raised {self.type.__name__}: {self.exc}"


class _StoreVsOracle(RuleBasedStateMachine):
    def __init__(
        self, store: MemoryStore, loop: asyncio.AbstractEventLoop, caps: Capabilities
    ) -> None:
        super().__init__()
        self.store = store
        self.loop = loop
        self.caps = caps
        self.dim = store.space.dimension
        self.oracle = InMemoryMemoryStore(store.space)
        prefix = f"sm-{uuid.uuid4().hex[:10]}"
        self.owners = [f"{prefix}-{s}" for s in _OWNER_SUFFIXES]
        self.counter = 0
        self.checks = 0

    # ----------------------------------------------------------- plumbing

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def _both(
        self, store_coro: Coroutine[Any, Any, _T], oracle_coro: Coroutine[Any, Any, _T]
    ) -> tuple[_T | _Failed, _T | _Failed]:
        out: list[Any] = []
        for coro in (oracle_coro, store_coro):
            try:
                out.append(self._run(coro))
            except AgentMemoryError as exc:
                out.append(_Failed(exc))
        return out[1], out[0]

    def _same_outcome(self, op: str, got: object, want: object) -> None:
        if isinstance(want, _Failed) or isinstance(got, _Failed):
            same = isinstance(want, _Failed) and isinstance(got, _Failed) and got.type is want.type
            assert same, clause(
                "MS-SM-1", f"{op}: the store agrees with the oracle", got, want=want
            )

    def _vector(self, comps: Sequence[int]) -> npt.NDArray[np.float32]:
        v = np.zeros(self.dim, dtype=np.float32)
        n = min(self.dim, len(comps))
        v[:n] = comps[:n]
        if not v.any():
            v[0] = 1.0
        return v

    def _record(self, spec: RecordSpec) -> MemoryRecord:
        owner_i, rid, ns, kind, comps, created, word, importance = spec
        self.counter += 1
        created_at = BASE_TIME + timedelta(seconds=created)
        return MemoryRecord(
            id=rid,
            owner=self.owners[owner_i],
            namespace=ns,
            kind=kind,
            content=f"{word} #{self.counter}",
            vector=self._vector(comps),
            created_at=created_at,
            updated_at=created_at + timedelta(milliseconds=self.counter),
            importance=importance,
            attributes={"n": self.counter, "w": [word]},
            context=word,
        )

    # -------------------------------------------------------------- rules

    @initialize(specs=st.lists(_record_spec, min_size=1, max_size=6, unique_by=_key))
    def seed(self, specs: list[RecordSpec]) -> None:
        """Every example starts with data, so short runs still exercise it."""
        self.add(specs)

    @rule(specs=_batches)
    def add(self, specs: list[RecordSpec]) -> None:
        batch = [self._record(s) for s in specs]
        got, want = self._both(self.store.add(batch), self.oracle.add(batch))
        self._same_outcome("add", got, want)
        if (
            isinstance(got, _Failed)
            and got.type is DuplicateRecord
            and not self.caps.atomic_batches
        ):
            # A partial batch is allowed: mirror what the store kept.
            for rec in batch:
                stored = self._run(self.store.get(rec.owner, rec.id))
                known = self._run(self.oracle.get(rec.owner, rec.id))
                if stored is not None and known is None:
                    self._run(self.oracle.add([stored]))

    @rule(owner_i=_owner_idx, rid=_ids)
    def get(self, owner_i: int, rid: str) -> None:
        owner = self.owners[owner_i]
        got = self._run(self.store.get(owner, rid))
        want = self._run(self.oracle.get(owner, rid))
        if want is None:
            assert got is None, clause(
                "MS-SM-1", f"get({rid!r}): the oracle has none", got, want=None
            )
        else:
            assert_same_record("MS-SM-1", got, want)

    @rule(spec=_record_spec)
    def update(self, spec: RecordSpec) -> None:
        rec = self._record(spec)
        got, want = self._both(self.store.update(rec), self.oracle.update(rec))
        self._same_outcome("update", got, want)

    def _target(self, owner_i: int, rid: str, pick: int | None) -> tuple[int, str]:
        """With `pick`, one of the records the oracle holds (most conditional
        writes should meet a stored version); else the drawn owner and id."""
        if pick is None:
            return owner_i, rid
        held = [
            (i, r.id)
            for i, owner in enumerate(self.owners)
            for r in self._run(self.oracle.list(owner, limit=100)).records
        ]
        return held[pick % len(held)] if held else (owner_i, rid)

    def _stored_version(self, owner: str, rid: str, shift: int) -> datetime:
        """The oracle's version of the record moved by `shift` milliseconds (a
        version as late, older or later), or a fresh one when it has none."""
        held = self._run(self.oracle.get(owner, rid))
        base = held.updated_at if held is not None else BASE_TIME
        return base + timedelta(milliseconds=shift)

    @precondition(lambda self: isinstance(self.store, VersionedWrites))
    @rule(spec=_record_spec, shift=_shifts, pick=_picks)
    def update_if_older(self, spec: RecordSpec, shift: int, pick: int | None) -> None:
        """Conditional writes agree with the oracle (stores with `VersionedWrites`)."""
        owner_i, rid = self._target(spec[0], spec[1], pick)
        rec = self._record((owner_i, rid, *spec[2:]))
        rec = attrs.evolve(rec, updated_at=self._stored_version(rec.owner, rec.id, shift))
        store = cast(VersionedWrites, self.store)
        got, want = self._both(store.update_if_older(rec), self.oracle.update_if_older(rec))
        assert got == want, clause(
            "MS-SM-1", f"update_if_older({rec.id!r}, shift {shift} ms) returns the oracle's flag",
            got, want=want,
        )  # fmt: skip

    @precondition(lambda self: isinstance(self.store, VersionedWrites))
    @rule(owner_i=_owner_idx, rid=_ids, shift=_shifts, pick=_picks)
    def delete_if_unchanged(self, owner_i: int, rid: str, shift: int, pick: int | None) -> None:
        owner_i, rid = self._target(owner_i, rid, pick)
        owner = self.owners[owner_i]
        version = self._stored_version(owner, rid, shift)
        store = cast(VersionedWrites, self.store)
        got, want = self._both(
            store.delete_if_unchanged(owner, rid, version),
            self.oracle.delete_if_unchanged(owner, rid, version),
        )
        assert got == want, clause(
            "MS-SM-1", f"delete_if_unchanged({rid!r}, shift {shift} ms) returns the oracle's flag",
            got, want=want,
        )  # fmt: skip

    @rule(owner_i=_owner_idx, rid=_ids)
    def delete(self, owner_i: int, rid: str) -> None:
        owner = self.owners[owner_i]
        got, want = self._both(self.store.delete(owner, rid), self.oracle.delete(owner, rid))
        assert got == want, clause(
            "MS-SM-1", f"delete({rid!r}) returns the oracle's flag", got, want=want
        )

    @rule(
        owner_i=_owner_idx,
        comps=_vec4,
        limit=st.integers(1, 6),
        namespace=_namespace_filter,
        kinds=_kinds_filter,
        min_score=st.none() | st.sampled_from((-0.5, 0.123, 0.6)),
    )
    def search(
        self,
        owner_i: int,
        comps: list[int],
        limit: int,
        namespace: str | None,
        kinds: list[str] | None,
        min_score: float | None,
    ) -> None:
        owner = self.owners[owner_i]
        q = self._vector(comps)
        got = self._run(
            self.store.search(
                owner, q, limit=limit, namespace=namespace, kinds=kinds, min_score=min_score
            )
        )
        full = self._run(
            self.oracle.search(owner, q, limit=10_000, namespace=namespace, kinds=kinds)
        )
        _check_search(got, full, limit, min_score)

    @rule(
        owner_i=_owner_idx,
        namespace=_namespace_filter,
        kinds=_kinds_filter,
        page=st.integers(1, 5),
    )
    def list_all(
        self, owner_i: int, namespace: str | None, kinds: list[str] | None, page: int
    ) -> None:
        owner = self.owners[owner_i]
        got = self._walk(self.store, owner, namespace, kinds, page)
        want = self._walk(self.oracle, owner, namespace, kinds, 1000)
        assert [(r.id, r.content) for r in got] == [(r.id, r.content) for r in want], clause(
            "MS-SM-1",
            f"list (pages of {page}) agrees with the oracle",
            [r.id for r in got],
            want=[r.id for r in want],
        )

    @rule(owner_i=_owner_idx, namespace=_namespace_filter, kinds=_kinds_filter)
    def delete_scope(self, owner_i: int, namespace: str | None, kinds: list[str] | None) -> None:
        owner = self.owners[owner_i]
        got, want = self._both(
            self.store.delete_scope(owner, namespace=namespace, kinds=kinds),
            self.oracle.delete_scope(owner, namespace=namespace, kinds=kinds),
        )
        assert got == want, clause(
            "MS-SM-1", "delete_scope deletes as many records as the oracle", got, want=want
        )
        q = self._vector([1, -1, 1, -1])
        hits = self._run(self.store.search(owner, q, limit=50))
        _check_search(hits, self._run(self.oracle.search(owner, q, limit=10_000)), 50, None)

    @invariant()
    def search_everything_agrees(self) -> None:
        """After every step, a broad search agrees with the oracle (the owners
        take turns, to keep the round trips per step low)."""
        self.checks += 1
        owner = self.owners[self.checks % len(self.owners)]
        q = self._vector([1, 1, 1, 1])
        got = self._run(self.store.search(owner, q, limit=50))
        full = self._run(self.oracle.search(owner, q, limit=10_000))
        _check_search(got, full, 50, None)

    def _walk(
        self,
        store: MemoryStore,
        owner: str,
        namespace: str | None,
        kinds: list[str] | None,
        page: int,
    ) -> list[MemoryRecord]:
        out: list[MemoryRecord] = []
        cursor: str | None = None
        for _ in range(1000):
            p = self._run(
                store.list(owner, namespace=namespace, kinds=kinds, limit=page, cursor=cursor)
            )
            out.extend(p.records)
            if p.next_cursor is None:
                return out
            cursor = p.next_cursor
        raise AssertionError(clause("MS-SM-1", "list pagination terminates", len(out)))

    def teardown(self) -> None:
        for owner in self.owners:
            self._run(self.store.delete_scope(owner))


def _check_search(
    got: list[ScoredRecord], full: list[ScoredRecord], limit: int, min_score: float | None
) -> None:
    """Agreement up to float noise: same records (near-ties at the cut may swap),
    same scores within SCORE_TOL, the store's own order score desc then id asc."""
    want = {h.record.id: h.score for h in full}
    ids = [h.record.id for h in got]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    assert not twice, clause(
        "MS-SM-1", "search returns each record once", twice, want=[], detail=ids
    )
    assert len(got) <= limit, clause(
        "MS-SM-1", f"search returns at most limit={limit}", ids, want=Shown(f"<= {limit} ids")
    )
    for h in got:
        rid = h.record.id
        assert rid in want, clause(
            "MS-SM-1",
            "search returns only records the oracle would (owner, filters)",
            rid,
            want=Shown(f"one of {sorted(want)!r}"),
        )
        assert abs(h.score - want[rid]) <= SCORE_TOL, clause(
            "MS-SM-1", f"the score of {rid!r} agrees with the oracle", h.score, want=want[rid]
        )
        assert min_score is None or want[rid] >= min_score - SCORE_TOL, clause(
            "MS-SM-1", f"min_score={min_score} excludes {rid!r}", want[rid]
        )
    for a, b in itertools.pairwise(got):
        assert a.score >= b.score - SCORE_TOL, clause(
            "MS-SM-1",
            "search orders by score descending",
            [a.score, b.score],
            want=[b.score, a.score],
        )
        if a.score == b.score and want[a.record.id] == want[b.record.id]:
            assert a.record.id < b.record.id, clause(
                "MS-SM-1",
                "equal scores are ordered by id ascending",
                [a.record.id, b.record.id],
                want=[b.record.id, a.record.id],
            )
    certain = {r for r, s in want.items() if min_score is None or s >= min_score + SCORE_TOL}
    missed = certain - set(ids)
    if len(got) < limit:
        assert not missed, clause(
            "MS-SM-1",
            "search with room left returns every matching record",
            sorted(missed),
            want=Shown("nothing"),
        )
    elif got:
        worst = min(h.score for h in got)
        better = sorted(r for r in missed if want[r] > worst + SCORE_TOL)
        assert not better, clause(
            "MS-SM-1", "search skipped better records", better, want=Shown("nothing")
        )


async def run_against_oracle(
    store: MemoryStore,
    capabilities: Capabilities,
    *,
    step_count: int = STEP_COUNT,
    max_examples: int | None = None,
) -> None:
    """Run the state machine against `store` (which must be open, on this loop):
    as many examples as the active hypothesis profile, or at most `max_examples`."""
    if max_examples is not None:
        require_int_at_least(max_examples, "max_examples", 1)
    loop = asyncio.get_running_loop()
    base = settings.default
    inherited = list(base.suppress_health_check) if base is not None else []
    suppressed = [*inherited, HealthCheck.too_slow]
    examples = base.max_examples if base is not None else 100
    if max_examples is not None:
        examples = min(examples, max_examples)
    config = settings(
        deadline=PORT_TIMING["store"][0],
        stateful_step_count=step_count,
        suppress_health_check=suppressed,
        max_examples=examples,
        # One failure, shrunk, under MS-SM-1: not an ExceptionGroup of several.
        report_multiple_bugs=False,
    )

    def factory() -> _StoreVsOracle:
        return _StoreVsOracle(store, loop, capabilities)

    machine = cast(type[RuleBasedStateMachine], factory)  # any zero-arg factory works
    with shrink_budget():
        try:
            await asyncio.to_thread(run_state_machine_as_test, machine, settings=config)
        except Exception as exc:
            raise AssertionError(_report(exc)) from exc


#: MS-SM-1's rule, as a failure that names no assertion of its own shows it.
SM_RULE = "random operation sequences agree with the in-memory oracle"


def _report(exc: BaseException) -> str:
    """The state machine's failure as one message: the MS-SM-1 assertion (or the
    exception the adapter raised, under MS-SM-1's rule), then the shrunk step
    sequence hypothesis attached to it."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(exc, AssertionError) and first.startswith("[MS-SM-1]"):
        head = text
    else:
        head = clause("MS-SM-1", SM_RULE, outcome(exc), want=Shown("no error"))
    notes = [str(n) for n in getattr(exc, "__notes__", ())]
    steps = "\n".join(notes).strip()
    if not steps:
        return head
    return f"{head}\nshrunk steps (store vs oracle):\n{steps}"

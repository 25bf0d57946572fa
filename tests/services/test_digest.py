"""Digest fingerprints, the cache decision, and the compactor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import InMemoryCache, InMemoryEventLog
from agent_memory.domain.digest import (
    CacheEntry,
    DecisionPath,
    DigestPolicy,
    decide,
    event_fingerprint,
    event_key,
    window_fingerprint,
)
from agent_memory.domain.records import Entity, Event
from agent_memory.services.compaction import CACHE_KEY, Compactor, CompactorOptions

from .scripted import ScriptedModel

NOW = datetime(2026, 11, 1, 12, tzinfo=UTC)
POLICY = DigestPolicy(domain="k8s")
FP = window_fingerprint(POLICY, "model-a")


def event(i: int, minutes_ago: int, summary: str = "s") -> Event:
    at = NOW - timedelta(minutes=minutes_ago)
    return Event(
        id=f"e{i}",
        domain="k8s",
        agent="a",
        action="act",
        outcome="ok",
        summary=f"{summary}{i}",
        occurred_at=at,
        recorded_at=at,
        entities=(Entity("pod", f"p{i % 3}"),),
    )


def entry_for(events: list[Event], fp: str = FP) -> CacheEntry:
    return CacheEntry(
        window_fp=fp,
        digest="digest",
        represented={
            event_key(e): (event_fingerprint(e), e.occurred_at.isoformat()) for e in events
        },
        created_at=NOW.isoformat(),
        model_fingerprint="model-a",
    )


@st.composite
def windows(draw: st.DrawFn, min_size: int = 1) -> list[Event]:
    minutes = draw(st.lists(st.integers(0, 600), min_size=min_size, max_size=40))
    events = [event(i, m) for i, m in enumerate(minutes)]
    return sorted(events, key=lambda e: (e.occurred_at, e.id), reverse=True)


@settings(max_examples=200)
@given(window=windows(), limited=st.booleans())
def test_no_entry_is_full(window: list[Event], limited: bool) -> None:
    d = decide(None, window_fp=FP, window=window, limited=limited, threshold=20)
    assert (d.path, d.cache_hit) == (DecisionPath.FULL, False)


@settings(max_examples=200)
@given(window=windows(), limited=st.booleans())
def test_same_window_same_policy_is_cached(window: list[Event], limited: bool) -> None:
    d = decide(entry_for(window), window_fp=FP, window=window, limited=limited, threshold=20)
    assert (d.path, d.cache_hit) == (DecisionPath.CACHED, True)


@settings(max_examples=200)
@given(window=windows(), model=st.sampled_from(["model-b", "model-a "]), raw=st.integers(1, 500))
def test_policy_or_model_change_recompacts(window: list[Event], model: str, raw: int) -> None:
    other_policy = attrs.evolve(POLICY, raw_limit=raw) if raw != POLICY.raw_limit else POLICY
    for fp in (window_fingerprint(POLICY, model), window_fingerprint(other_policy, "model-a")):
        if fp == FP:
            continue
        d = decide(entry_for(window, FP), window_fp=fp, window=window, limited=False, threshold=20)
        assert (d.path, d.cache_hit) == (DecisionPath.FULL_RECOMPACT, False)


@settings(max_examples=300)
@given(window=windows(min_size=2), data=st.data(), threshold=st.integers(1, 25))
def test_additions_are_incremental_within_threshold(
    window: list[Event], data: st.DataObject, threshold: int
) -> None:
    # any subset may be new — late events with older or equal timestamps included
    new = data.draw(st.sets(st.sampled_from([e.id for e in window]), min_size=1))
    represented = [e for e in window if e.id not in new]
    d = decide(
        entry_for(represented), window_fp=FP, window=window, limited=False, threshold=threshold
    )
    expected = DecisionPath.INCREMENTAL if len(new) <= threshold else DecisionPath.FULL_RECOMPACT
    assert d.path is expected
    assert d.cache_hit
    assert set(d.added) == {event_key(e) for e in window if e.id in new}


@settings(max_examples=300)
@given(window=windows(min_size=2), data=st.data(), limited=st.booleans())
def test_changed_represented_event_recompacts(
    window: list[Event], data: st.DataObject, limited: bool
) -> None:
    victim = data.draw(st.sampled_from(window))
    edited = [
        attrs.evolve(e, summary=e.summary + " (edited)") if e is victim else e for e in window
    ]
    d = decide(entry_for(window), window_fp=FP, window=edited, limited=limited, threshold=20)
    assert (d.path, d.cache_hit) == (DecisionPath.FULL_RECOMPACT, True)


@settings(max_examples=300)
@given(window=windows(min_size=2), data=st.data())
def test_vanished_event_recompacts_unless_it_fell_off_a_full_window(
    window: list[Event], data: st.DataObject
) -> None:
    victim = data.draw(st.sampled_from(window))
    remaining = [e for e in window if e is not victim]
    entry = entry_for(window)
    gone = decide(entry, window_fp=FP, window=remaining, limited=False, threshold=20)
    assert gone.path is DecisionPath.FULL_RECOMPACT
    oldest_left = min(e.occurred_at for e in remaining)
    omitted = decide(entry, window_fp=FP, window=remaining, limited=True, threshold=20)
    if victim.occurred_at <= oldest_left:
        assert omitted.path is DecisionPath.CACHED, "older history omitted by a full window"
    else:
        assert omitted.path is DecisionPath.FULL_RECOMPACT


@settings(max_examples=300)
@given(window=windows(min_size=2), data=st.data(), limited=st.booleans())
def test_a_represented_event_older_than_the_lookback_always_recompacts(
    window: list[Event], data: st.DataObject, limited: bool
) -> None:
    """Property: whatever the window, full or not, an event the entry represents
    that is missing from it and older than `since` rebuilds the digest; one
    missing and not older decides as before."""
    victim = data.draw(st.sampled_from(window))
    remaining = [e for e in window if e is not victim]
    entry = entry_for(window)
    since = victim.occurred_at + timedelta(microseconds=data.draw(st.integers(-1, 1)))
    d = decide(entry, window_fp=FP, window=remaining, limited=limited, threshold=20, since=since)
    before = decide(entry, window_fp=FP, window=remaining, limited=limited, threshold=20)
    if victim.occurred_at < since:
        assert d.path is DecisionPath.FULL_RECOMPACT
        assert "older than the lookback" in d.reason
    else:
        assert d == before


@settings(max_examples=200)
@given(window=windows(min_size=2), cap=st.integers(1, 45))
def test_an_entry_representing_too_many_events_recompacts(window: list[Event], cap: int) -> None:
    """Property: an addition that would make the entry represent more than
    `max_represented` events rebuilds instead of updating incrementally."""
    entry = entry_for(window[1:])
    d = decide(entry, window_fp=FP, window=window, limited=False, threshold=20, max_represented=cap)
    if len(window) > cap:
        assert d.path is DecisionPath.FULL_RECOMPACT
    else:
        assert d.path is DecisionPath.INCREMENTAL


# -- the compactor with a scripted model -------------------------------------------


def compactor(model: ScriptedModel | None) -> tuple[Compactor, InMemoryEventLog, InMemoryCache]:
    log, cache = InMemoryEventLog(), InMemoryCache()
    return Compactor(events=log, cache=cache, clock=SystemClock(), llm=model), log, cache


def live_event(i: int) -> Event:
    at = datetime.now(UTC) - timedelta(minutes=60 - i)
    return attrs.evolve(event(i, 0), occurred_at=at, recorded_at=at)


async def test_cached_reuse_makes_no_model_call() -> None:
    model = ScriptedModel(["digest one"])
    comp, log, _ = compactor(model)
    await log.append([live_event(i) for i in range(5)])
    first = await comp.digest("k8s")
    second = await comp.digest("k8s")
    assert (first.path, first.digest, first.model_called) == ("full", "digest one", True)
    assert (second.path, second.digest, second.model_called) == ("cached", "digest one", False)
    assert second.cache_hit
    assert len(model.prompts) == 1


async def test_incremental_sends_only_the_new_events() -> None:
    model = ScriptedModel(["digest one", "digest two"])
    comp, log, _ = compactor(model)
    await log.append([live_event(i) for i in range(5)])
    await comp.digest("k8s")
    await log.append([live_event(10), live_event(11)])
    result = await comp.digest("k8s")
    assert result.path == "incremental"
    prompt = model.prompts[1]
    assert "Previous digest:\ndigest one" in prompt
    assert '"id": "e10"' in prompt
    assert '"id": "e11"' in prompt
    assert '"id": "e0"' not in prompt
    assert result.report.details["sent_events"] == 2


async def test_failed_compaction_shows_raw_events_and_keeps_the_old_entry() -> None:
    model = ScriptedModel(["digest one", RuntimeError("model down"), "   "])
    comp, log, cache = compactor(model)
    await log.append([live_event(i) for i in range(3)])
    await comp.digest("k8s")
    before = await cache.get("k8s", CACHE_KEY)
    for _ in range(2):  # an error, then an empty digest
        await log.append([live_event(20 + _)])
        result = await comp.digest("k8s")
        assert result.path == "raw_fallback"
        assert result.digest is None
        assert result.raw_events, "bounded raw events are shown instead"
        assert await cache.get("k8s", CACHE_KEY) == before


async def test_unstable_fingerprint_neither_reads_nor_writes_the_cache() -> None:
    model = ScriptedModel(["d1", "d2"], stable=False)
    comp, log, cache = compactor(model)
    await log.append([live_event(i) for i in range(3)])
    sentinel = entry_for([], fp="whatever").to_bytes()
    await cache.put("k8s", CACHE_KEY, sentinel)
    first = await comp.digest("k8s")
    second = await comp.digest("k8s")
    assert (first.path, second.path) == ("full", "full")
    assert not first.cache_hit
    assert len(model.prompts) == 2
    assert await cache.get("k8s", CACHE_KEY) == sentinel


async def test_offline_extractive_digest_is_cached_too() -> None:
    comp, log, _ = compactor(None)
    await log.append([live_event(i) for i in range(4)])
    first = await comp.digest("k8s")
    second = await comp.digest("k8s")
    assert first.path == "full"
    assert first.digest is not None
    assert "4 events" in first.digest
    assert second.path == "cached"


async def test_cache_read_failure_never_claims_nothing_new() -> None:
    comp, log, cache = compactor(ScriptedModel(["d1"]))
    await log.append([live_event(1)])
    await cache.close()
    result = await comp.digest("k8s")
    assert result.path == "full"
    assert not result.cache_hit
    assert [f.operation for f in result.report.failures] == ["cache-read"]


def test_policy_is_validated_at_construction() -> None:
    import pytest

    from agent_memory.domain.errors import InvalidInput

    with pytest.raises(InvalidInput, match="target_tokens"):
        Compactor(
            events=InMemoryEventLog(),
            cache=InMemoryCache(),
            clock=SystemClock(),
            options=CompactorOptions(target_tokens=0),
        )


class _Clock:
    def __init__(self, now: datetime) -> None:
        self.at = now

    def now(self) -> datetime:
        return self.at


class _EchoModel(ScriptedModel):
    """A model whose digest quotes every event line it was given, and the
    previous digest it was asked to update: what a faithful summariser keeps."""

    async def complete(
        self, prompt: str, *, max_tokens: int, timeout: float, system: str | None = None
    ) -> str:
        self.prompts.append(prompt)
        kept = [line for line in prompt.splitlines() if '"summary"' in line or "quoted:" in line]
        return "\n".join(line if line.startswith("quoted:") else f"quoted: {line}" for line in kept)


async def test_a_busy_window_never_carries_an_event_past_the_lookback() -> None:
    """In a busy domain the window is full (`raw_limit` newest events) and each
    request adds a few events: the digest is updated incrementally, from the
    previous digest and the new events. An event that fell off the full window
    had its text kept in the digest but left the entry's represented events, so
    no later decision saw it again: the digest carried it past the lookback, and
    past the event log's retention, for as long as the domain stayed busy. Now
    the entry keeps representing it, and once it is older than the lookback the
    digest is rebuilt from the window alone."""
    start = datetime(2026, 11, 1, 12, tzinfo=UTC)
    clock = _Clock(start)
    log, cache = InMemoryEventLog(), InMemoryCache()
    model = _EchoModel([])
    comp = Compactor(
        events=log,
        cache=cache,
        clock=clock,
        llm=model,
        options=CompactorOptions(
            lookback=timedelta(hours=1), raw_limit=3, cache_ttl=timedelta(hours=1)
        ),
    )

    def at(i: int, when: datetime, summary: str = "new-") -> Event:
        return attrs.evolve(event(i, 0, summary=summary), occurred_at=when, recorded_at=when)

    await log.append([at(i, start - timedelta(minutes=50 - 10 * i), "old-") for i in range(4)])
    first = await comp.digest("k8s")
    assert first.path == "full"
    assert '"old-1"' in (first.digest or "")  # e1..e3: the newest three
    for step in range(1, 12):  # a new event every 10 minutes for almost two hours
        clock.at = start + timedelta(minutes=10 * step)
        await log.append([at(100 + step, clock.at - timedelta(seconds=1))])
        result = await comp.digest("k8s")
        assert result.digest is not None
        cutoff = clock.at - timedelta(hours=1)
        for i in range(4):
            if start - timedelta(minutes=50 - 10 * i) < cutoff:
                assert f'"old-{i}"' not in result.digest, (step, result.path, i)

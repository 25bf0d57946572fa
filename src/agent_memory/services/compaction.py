"""Activity compaction: a domain's event window becomes a digest of about 500
tokens, cached per domain (shared by every agent of it) and reused while nothing
changed, updated incrementally when little did. See `domain.digest` for the
decision rules. Fail-open: a failure yields `raw_fallback` (bounded raw events
are shown instead) and leaves the previous cache entry untouched.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from attrs import define, field

from agent_memory.domain.digest import (
    EXTRACTIVE_FINGERPRINT,
    CacheEntry,
    Coverage,
    DecisionPath,
    DigestDecision,
    DigestPolicy,
    decide,
    event_fingerprint,
    event_key,
    extractive_digest,
    window_fingerprint,
)
from agent_memory.domain.records import Event
from agent_memory.ports.models import Clock, LanguageModel
from agent_memory.ports.storage import Cache, EventLog
from agent_memory.services.event_scopes import scoped_events
from agent_memory.services.reports import StageReport

__all__ = ["CACHE_KEY", "Compactor", "CompactorOptions", "DigestResult", "invalidate_digest"]

CACHE_KEY = "digest"
COMPACT_SYSTEM_PROMPT = (
    "You condense an operations team's recent activity into a digest for the next agent: "
    "what was investigated, what was found, what changed, what is still open. Plain text, "
    "at most {target} tokens. Events are JSON lines, newest first."
)


async def invalidate_digest(cache: Cache, domain: str) -> bool:
    """Drop the domain's cached digest (forgetting a user whose events it may
    quote); the next request rebuilds it from the remaining events. True when
    there was one."""
    return await cache.delete(domain, CACHE_KEY)


#: An entry represents at most this many windows' worth of events (`raw_limit`
#: each): incremental updates of a busy domain's digest add to them, and past
#: it the digest is rebuilt from the window, which keeps the entry well under
#: the cache's value bound.
_MAX_REPRESENTED_WINDOWS = 4


@define
class CompactorOptions:
    lookback: timedelta = timedelta(hours=24)
    raw_limit: int = 200
    target_tokens: int = 500
    incremental_threshold: int = 20
    cache_ttl: timedelta = timedelta(minutes=5)
    model_timeout: float = 120.0
    raw_fallback_events: int = 20


@define
class DigestResult:
    """The digest (None on raw fallback), the raw events to show instead, and
    the decision path, coverage and cache hit, plus the stage report."""

    digest: str | None
    raw_events: list[Event]
    path: DecisionPath
    coverage: Coverage
    cache_hit: bool
    model_called: bool
    report: StageReport = field(factory=lambda: StageReport("digest"))


def _event_line(event: Event) -> str:
    return json.dumps(
        {
            "id": event.id,
            "at": event.occurred_at.isoformat(),
            "agent": event.agent,
            "action": event.action,
            "outcome": event.outcome,
            "summary": event.summary,
            "entities": [[e.type, e.id] for e in event.entities],
        },
        ensure_ascii=False,
    )


class Compactor:
    """Builds and caches domain digests."""

    def __init__(
        self,
        *,
        events: EventLog,
        cache: Cache,
        clock: Clock,
        llm: LanguageModel | None = None,
        options: CompactorOptions | None = None,
    ) -> None:
        # windows show the global events of the domain's family only
        self.events = scoped_events(events)
        self.cache = cache
        self.clock = clock
        self.llm = llm
        self.options = options or CompactorOptions()
        # Validated at construction: a bad policy fails here, not per request.
        DigestPolicy(
            domain="validation",
            lookback=self.options.lookback,
            raw_limit=self.options.raw_limit,
            target_tokens=self.options.target_tokens,
            incremental_threshold=self.options.incremental_threshold,
        )

    def _policy(self, domain: str) -> DigestPolicy:
        o = self.options
        return DigestPolicy(
            domain=domain,
            lookback=o.lookback,
            raw_limit=o.raw_limit,
            target_tokens=o.target_tokens,
            incremental_threshold=o.incremental_threshold,
        )

    @property
    def model_fingerprint(self) -> tuple[str, bool]:
        """(effective fingerprint, stable?) — the extractive digest is stable."""
        if self.llm is None:
            return EXTRACTIVE_FINGERPRINT, True
        return self.llm.fingerprint, self.llm.stable

    async def digest(self, domain: str) -> DigestResult:
        """The domain's digest for this request, with its decision path."""
        report = StageReport("digest")
        policy = self._policy(domain)
        fingerprint, stable = self.model_fingerprint
        window_fp = window_fingerprint(policy, fingerprint)
        now = self.clock.now()
        try:
            window = await self.events.window(
                domain, since=now - policy.lookback, limit=policy.raw_limit
            )
        except Exception as exc:
            report.fail("event-window", exc)
            return DigestResult(
                None, [], DecisionPath.RAW_FALLBACK, Coverage.UNKNOWN, False, False, report
            )
        events = list(window.events)
        coverage = Coverage.LIMITED_WINDOW if window.limited else Coverage.RETURNED_WINDOW
        entry: CacheEntry | None = None
        read_ok = True
        if stable:
            try:
                raw = await self.cache.get(domain, CACHE_KEY)
                entry = CacheEntry.from_bytes(raw) if raw is not None else None
            except Exception as exc:
                report.fail("cache-read", exc)
                read_ok = False
        else:
            report.details["cache"] = "bypassed: unstable model fingerprint"
        decision = decide(
            entry,
            window_fp=window_fp,
            window=events,
            limited=window.limited,
            threshold=policy.incremental_threshold,
            since=now - policy.lookback,
            max_represented=_MAX_REPRESENTED_WINDOWS * policy.raw_limit,
        )
        report.details.update(
            {"path": str(decision.path), "reason": decision.reason, "events": len(events)}
        )
        if decision.path is DecisionPath.CACHED and entry is not None:
            return DigestResult(entry.digest, [], decision.path, coverage, True, False, report)
        if not events:
            return DigestResult(
                None, [], decision.path, coverage, decision.cache_hit, False, report
            )
        text, model_called = await self._compact(policy, events, entry, decision, report)
        if not text:
            report.details["path"] = str(DecisionPath.RAW_FALLBACK)
            return DigestResult(
                None,
                events[: self.options.raw_fallback_events],
                DecisionPath.RAW_FALLBACK,
                coverage,
                decision.cache_hit,
                model_called,
                report,
            )
        if stable and read_ok:
            represented = {
                event_key(e): (event_fingerprint(e), e.occurred_at.isoformat()) for e in events
            }
            if model_called and decision.path is DecisionPath.INCREMENTAL and entry is not None:
                # the previous digest's text is kept: so are the events it
                # represents (those that fell off a full window included), so
                # that a later decision still sees them age out or change
                represented = {**entry.represented, **represented}
            await self._write(domain, window_fp, fingerprint, text, represented, report)
            if report.details.get("cache_written"):
                await self._withdraw_if_gone(
                    domain, now - policy.lookback, policy.raw_limit, events, report
                )
        return DigestResult(
            text, [], decision.path, coverage, decision.cache_hit, model_called, report
        )

    async def _compact(
        self,
        policy: DigestPolicy,
        events: list[Event],
        entry: CacheEntry | None,
        decision: DigestDecision,
        report: StageReport,
    ) -> tuple[str, bool]:
        if self.llm is None:
            return extractive_digest(events, policy.target_tokens), False
        incremental = decision.path is DecisionPath.INCREMENTAL and entry is not None
        if incremental:
            assert entry is not None
            added = set(decision.added)
            new = [e for e in events if event_key(e) in added]
            prompt = (
                "Previous digest:\n"
                + entry.digest
                + "\n\nNew events since then:\n"
                + "\n".join(_event_line(e) for e in new)
                + "\n\nUpdate the digest."
            )
            report.details["sent_events"] = len(new)
        else:
            prompt = "Events:\n" + "\n".join(_event_line(e) for e in events)
            report.details["sent_events"] = len(events)
        try:
            text = await self.llm.complete(
                prompt,
                max_tokens=policy.max_tokens,
                timeout=self.options.model_timeout,
                system=COMPACT_SYSTEM_PROMPT.format(target=policy.target_tokens),
            )
        except Exception as exc:
            report.fail("compact", exc)
            return "", True
        return text.strip(), True

    async def _write(
        self,
        domain: str,
        window_fp: str,
        fingerprint: str,
        text: str,
        represented: dict[str, tuple[str, str]],
        report: StageReport,
    ) -> None:
        entry = CacheEntry(
            window_fp=window_fp,
            digest=text,
            represented=represented,
            created_at=self.clock.now().isoformat(),
            model_fingerprint=fingerprint,
        )
        try:
            await self.cache.put(domain, CACHE_KEY, entry.to_bytes(), ttl=self.options.cache_ttl)
            report.details["cache_written"] = True
        except Exception as exc:
            report.fail("cache-write", exc)

    async def _withdraw_if_gone(
        self,
        domain: str,
        since: datetime,
        limit: int,
        events: list[Event],
        report: StageReport,
    ) -> None:
        """Delete the entry just written when an event it represents is gone.

        A forget erases the user's events and then invalidates the digests they
        fed; one that ran while this digest was being built (after the window
        read, before the write) left it quoting erased events, and no later
        forget would find it (the events linking it to the user are gone). So,
        after the write, the slice the digest covers is read again: either the
        forget's erase came before this read (an event is missing: withdraw the
        entry here) or after it, and then the forget's invalidation comes after
        the write too. A slice that cannot be read back withdraws the entry."""
        if not events:
            return
        until = max(e.occurred_at for e in events) + timedelta(microseconds=1)
        try:
            try:
                again = await self.events.window(domain, since=since, limit=limit, until=until)
            except TypeError:  # a third-party log without `until`
                again = await self.events.window(domain, since=since, limit=limit)
            present = {(e.domain, e.id) for e in again.events}  # events' identity
            gone = [e.id for e in events if (e.domain, e.id) not in present]
            reason = f"{len(gone)} event(s) gone meanwhile, e.g. {gone[0]!r}" if gone else ""
        except Exception as exc:
            report.fail("cache-verify", exc)
            reason = "could not re-read the window"
        if not reason:
            return
        try:
            await invalidate_digest(self.cache, domain)
        except Exception as exc:
            report.fail("cache-withdraw", exc)
            return
        report.details["cache_written"] = False
        report.details["cache_withdrawn"] = reason

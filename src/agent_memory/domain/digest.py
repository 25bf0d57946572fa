"""Digest fingerprints and the cache decision (pure).

A digest condenses a domain's event window. It is cached per domain, shared
by every agent of the domain, under a *window fingerprint* (the policy —
domain, lookback, raw limit, digest target — plus the effective model
fingerprint) and with a fingerprint per represented event (id + content).
Represented events are keyed by `event_key` — their domain and id, an event's
identity in the log: a global event of another domain may reuse the id of one
of the domain's own events, and is another event.

Each request's decision is exactly one of:
- `full`: no compatible entry (none, or unreadable);
- `cached`: same window under the same policy — reuse, no model call; also
  when the window is full and older history fell off its end;
- `incremental`: every represented event unchanged, and the additions (late
  events with equal or older timestamps included) are within the threshold;
- `full_recompact`: represented events changed, disappeared or expired, the
  policy changed, or the additions exceed the threshold;
- `raw_fallback`: compaction failed or returned nothing (decided by the
  service after the fact: bounded raw events are shown and the previous entry
  is left untouched).
`cache_hit` means a compatible entry was found, whether or not it was reused.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from attrs import field, frozen

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import Event
from agent_memory.domain.validation import require_positive, require_scope
from agent_memory.domain.views import estimate_tokens, shorten_text

__all__ = [
    "EXTRACTIVE_FINGERPRINT",
    "CacheEntry",
    "Coverage",
    "DecisionPath",
    "DigestDecision",
    "DigestPolicy",
    "decide",
    "event_fingerprint",
    "event_key",
    "extractive_digest",
    "window_fingerprint",
]


class DecisionPath(enum.StrEnum):
    FULL = "full"
    CACHED = "cached"
    INCREMENTAL = "incremental"
    FULL_RECOMPACT = "full_recompact"
    RAW_FALLBACK = "raw_fallback"


class Coverage(enum.StrEnum):
    RETURNED_WINDOW = "returned_window"
    LIMITED_WINDOW = "limited_window"
    UNKNOWN = "unknown"


def _lookback(value: object) -> timedelta:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise InvalidInput("lookback", f"a positive timedelta is required, got {value!r}")
    return value


@frozen
class DigestPolicy:
    """What a digest covers and how big it may be."""

    domain: str = field(validator=lambda _i, _a, v: require_scope(v, "domain"))
    lookback: timedelta = field(default=timedelta(hours=24), converter=_lookback)
    raw_limit: int = field(
        default=200, validator=lambda _i, _a, v: require_positive(v, "raw_limit")
    )
    target_tokens: int = field(
        default=500, validator=lambda _i, _a, v: require_positive(v, "target_tokens")
    )
    incremental_threshold: int = field(
        default=20, validator=lambda _i, _a, v: require_positive(v, "incremental_threshold")
    )

    @property
    def max_tokens(self) -> int:
        """The model's generation allowance: 5x the digest target."""
        return 5 * self.target_tokens


def _digest(payload: Any) -> str:
    raw = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def window_fingerprint(policy: DigestPolicy, model_fingerprint: str) -> str:
    """Identifies a compatible cache entry: policy + effective model.

    The incremental threshold is deliberately left out: it decides how an
    entry is updated, not what a digest means."""
    return _digest(
        {
            # v2: represented events keyed by `event_key` (v1 entries, keyed by
            # id alone, are incompatible and get recompacted)
            "v": 2,
            "domain": policy.domain,
            "lookback_s": policy.lookback.total_seconds(),
            "raw_limit": policy.raw_limit,
            "target_tokens": policy.target_tokens,
            "model": model_fingerprint,
        }
    )


def event_key(event: Event) -> str:
    """An event's key among the represented ones: its identity, (domain, id)."""
    return json.dumps([event.domain, event.id], ensure_ascii=False)


def event_fingerprint(event: Event) -> str:
    """Id + everything a digest could say about the event."""
    return _digest(
        {
            "id": event.id,
            "domain": event.domain,
            "agent": event.agent,
            "action": event.action,
            "outcome": event.outcome,
            "summary": event.summary,
            "occurred_at": event.occurred_at.isoformat(),
            "entities": [[e.type, e.id] for e in event.entities],
            "origin": event.origin_request_id,
        }
    )


def _aware_time(value: object) -> str:
    """A represented event's time as stored: an aware ISO timestamp, else
    ValueError/TypeError (the entry is unreadable)."""
    if not isinstance(value, str):
        raise TypeError(f"an event time must be a string, got {type(value).__name__}")
    if datetime.fromisoformat(value).utcoffset() is None:
        raise ValueError(f"an event time must be timezone-aware, got {value!r}")
    return value


@frozen
class CacheEntry:
    """A cached digest: its window fingerprint, text, and the events it represents
    (`event_key` -> (fingerprint, occurred_at ISO))."""

    window_fp: str
    digest: str
    represented: Mapping[str, tuple[str, str]]
    created_at: str
    model_fingerprint: str

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "v": 2,
                "window_fp": self.window_fp,
                "digest": self.digest,
                "represented": {k: list(v) for k, v in self.represented.items()},
                "created_at": self.created_at,
                "model_fingerprint": self.model_fingerprint,
            },
            ensure_ascii=False,
        ).encode("utf-8")

    @classmethod
    def from_bytes(cls, raw: bytes) -> CacheEntry:
        """Parse an entry; `InvalidInput` when it is not one of ours (an event
        time that is not an aware ISO timestamp included: the decision compares
        them with the window's)."""
        try:
            data = json.loads(raw.decode("utf-8"))
            represented = {
                str(k): (str(v[0]), _aware_time(v[1])) for k, v in data["represented"].items()
            }
            return cls(
                window_fp=str(data["window_fp"]),
                digest=str(data["digest"]),
                represented=represented,
                created_at=str(data["created_at"]),
                model_fingerprint=str(data["model_fingerprint"]),
            )
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise InvalidInput("digest cache entry", f"unreadable: {exc}") from None


@frozen
class DigestDecision:
    path: DecisionPath
    cache_hit: bool
    added: tuple[str, ...] = ()
    reason: str = ""


def decide(
    entry: CacheEntry | None,
    *,
    window_fp: str,
    window: Sequence[Event],
    limited: bool,
    threshold: int,
    since: datetime | None = None,
    max_represented: int | None = None,
) -> DigestDecision:
    """The cache decision for the current window (newest first) — see module doc.

    `since` is the window's lower bound (now - lookback): an event the entry
    represents that is older has aged out of what a digest covers, and is
    rebuilt away even when a full window would keep older history (an
    incremental update keeps the previous digest's text, so without this a busy
    domain's digest carried it for as long as the domain stayed busy, past the
    event log's retention). `max_represented` bounds how many events one entry
    represents (incremental updates add to them): past it, rebuild."""
    if entry is None:
        return DigestDecision(DecisionPath.FULL, cache_hit=False, reason="no entry")
    if entry.window_fp != window_fp:
        return DigestDecision(
            DecisionPath.FULL_RECOMPACT, cache_hit=False, reason="policy or model changed"
        )
    current = {event_key(e): e for e in window}
    oldest = min((e.occurred_at for e in window), default=None)
    for event_id, (fp, occurred_raw) in entry.represented.items():
        event = current.get(event_id)
        if event is None:
            occurred = datetime.fromisoformat(occurred_raw)
            if since is not None and occurred < since:
                return DigestDecision(
                    DecisionPath.FULL_RECOMPACT,
                    cache_hit=True,
                    reason=f"event {event_id!r} older than the lookback",
                )
            if limited and oldest is not None and occurred <= oldest:
                continue  # older history fell off a full window: omitted, not gone
            return DigestDecision(
                DecisionPath.FULL_RECOMPACT, cache_hit=True, reason=f"event {event_id!r} gone"
            )
        if event_fingerprint(event) != fp:
            return DigestDecision(
                DecisionPath.FULL_RECOMPACT, cache_hit=True, reason=f"event {event_id!r} changed"
            )
    added = tuple(key for key in current if key not in entry.represented)
    if not added:
        return DigestDecision(DecisionPath.CACHED, cache_hit=True, reason="unchanged window")
    if max_represented is not None and len(entry.represented) + len(added) > max_represented:
        return DigestDecision(
            DecisionPath.FULL_RECOMPACT,
            cache_hit=True,
            added=added,
            reason=f"would represent more than {max_represented} events",
        )
    if len(added) <= threshold:
        return DigestDecision(
            DecisionPath.INCREMENTAL, cache_hit=True, added=added, reason=f"{len(added)} new"
        )
    return DigestDecision(
        DecisionPath.FULL_RECOMPACT,
        cache_hit=True,
        added=added,
        reason=f"{len(added)} new exceed threshold {threshold}",
    )


EXTRACTIVE_FINGERPRINT = "agent-memory/extractive-digest-v1"
_NOTABLE_OUTCOMES = ("fail", "error", "timeout", "oom", "crash", "denied")


def _is_notable(event: Event) -> bool:
    outcome = event.outcome.lower()
    return any(word in outcome for word in _NOTABLE_OUTCOMES) or event.importance >= 0.8


#: The longest name (entity, action, outcome, agent) and summary, in UTF-8
#: bytes, that an extractive digest quotes whole; longer ones are shortened, so
#: one long name cannot take a digest's whole budget.
_NAME_BYTES = 120
_SUMMARY_BYTES = 600


def extractive_digest(events: Sequence[Event], target_tokens: int) -> str:
    """A deterministic offline digest: counts by entity, action and outcome, then
    the latest notable events, within `target_tokens` (estimated) as a whole.

    Lines come in that order, each only when it fits: a count line keeps as
    many of its top five names as fit, and a notable event that does not fit
    is skipped for the next, shorter one. Long names and summaries are
    shortened. Empty when not even the first line (the span) fits."""
    if not events:
        return ""
    entities: Counter[str] = Counter()
    actions: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    for e in events:
        entities.update(f"{x.type}/{x.id}" for x in e.entities)
        actions[e.action] += 1
        outcomes[e.outcome] += 1
    lines: list[str] = []
    used = 0

    def add(line: str) -> bool:
        # lines are joined by newlines, across which no word unit runs: the
        # estimates of the lines add up to at least the estimate of the whole
        nonlocal used
        cost = estimate_tokens(line)
        if used + cost > target_tokens:
            return False
        lines.append(line)
        used += cost
        return True

    newest = max(e.occurred_at for e in events).isoformat()
    oldest = min(e.occurred_at for e in events).isoformat()
    if not add(f"{len(events)} events from {oldest} to {newest}."):
        return ""
    for label, counter in (("Entities", entities), ("Actions", actions), ("Outcomes", outcomes)):
        items = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        shown = [f"{shorten_text(k, _NAME_BYTES)} x{v}" for k, v in items]
        while shown and not add(f"{label}: {', '.join(shown)}."):
            shown.pop()  # the most of the top names that fit
        if not items:
            add(f"{label}: none.")
    if not add("Latest notable:"):
        return "\n".join(lines)
    ordered = sorted(events, key=lambda e: (e.occurred_at, e.id), reverse=True)
    notable = [e for e in ordered if _is_notable(e)] + [e for e in ordered if not _is_notable(e)]
    for e in notable:
        agent = shorten_text(e.agent, _NAME_BYTES)
        add(f"- {e.occurred_at.isoformat()} {agent}: {shorten_text(e.summary, _SUMMARY_BYTES)}")
    return "\n".join(lines)

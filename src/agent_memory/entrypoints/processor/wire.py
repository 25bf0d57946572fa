"""The processor's wire format: the events it reads and the payloads it publishes.

Inputs are read with cattrs and accepted as the design shows them (extra fields
a producer adds are ignored). Every input may carry our optional fields `id`
(idempotency key), `owner` (default: the configuration's) and, on hydrate
requests, `reply_to`. Outputs carry exactly the design's fields; what we add
sits in one optional object, `agent_memory`, whose `version` says its shape.

- `agent.context.compaction.>`: `type`, `loop_id`, `iteration`, `utilization`,
  `tokens_saved`, `summary` (ours: `content`, the context to extract from);
- `memory.hydrate.request.*`: `loop_id`, `type` (`pre_task`, `post_compaction`),
  `task_description`;
- `agent.complete.*` (ours): `loop_id`, optional `summary` and `iteration`; the
  loop ended, so its final checkpoint is taken.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from typing import Any, TypeVar

import cattrs
from attrs import field, frozen

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.triples import Checkpoint, ExtractionOutcome, Hydration
from agent_memory.domain.validation import require_scope, require_text, require_unit_interval
from agent_memory.entrypoints.processor.config import strict_converter, structure_or_raise

__all__ = [
    "EXTENSION_VERSION",
    "OP_ADD_TRIPLES",
    "CompactionEvent",
    "HydrateRequest",
    "InvalidEvent",
    "LoopEnded",
    "checkpoint_payload",
    "idempotency_key",
    "injected_payload",
    "mutation_payload",
    "read_event",
]

#: The version of the `agent_memory` object in our outputs.
EXTENSION_VERSION = 1
OP_ADD_TRIPLES = "add_triples"


class InvalidEvent(ValueError):
    """A payload that cannot be processed as it is (counted, acknowledged)."""


def _scope(_inst: object, attr: Any, value: Any) -> None:
    require_scope(value, attr.name)


def _optional_scope(_inst: object, attr: Any, value: Any) -> None:
    if value is not None:
        require_scope(value, attr.name)


def _text(_inst: object, attr: Any, value: Any) -> None:
    require_text(value, attr.name)


def _iteration(_inst: object, attr: Any, value: object) -> None:
    if value is not None and (not isinstance(value, int) or value < 0):
        raise InvalidInput(attr.name, f"a non-negative integer is required, got {value!r}")


def _fraction(_inst: object, attr: Any, value: object) -> None:
    if value is not None:
        require_unit_interval(value, attr.name)


@frozen
class CompactionEvent:
    """A context event of the agent loop (`compaction_starting`, `compaction_complete`,
    `gc_complete`); `type` may be left out when the subject's 4th token names it."""

    loop_id: str = field(validator=_scope)
    type: str | None = None
    iteration: int | None = field(default=None, validator=_iteration)
    utilization: float | None = field(default=None, validator=_fraction)
    tokens_saved: int | None = None
    summary: str = field(default="", validator=_text)
    content: str = field(default="", validator=_text)
    id: str | None = field(default=None, validator=_optional_scope)
    owner: str | None = field(default=None, validator=_optional_scope)


@frozen
class HydrateRequest:
    """An explicit hydration request. `task` is accepted for `task_description`."""

    loop_id: str = field(validator=_scope)
    type: str = field(validator=_scope)
    task_description: str | None = None
    task: str | None = None
    id: str | None = field(default=None, validator=_optional_scope)
    owner: str | None = field(default=None, validator=_optional_scope)
    reply_to: str | None = field(default=None, validator=_optional_scope)

    @property
    def task_text(self) -> str | None:
        return self.task_description if self.task_description is not None else self.task


@frozen
class LoopEnded:
    """The loop finished (`agent.complete.<loop>`): take the final checkpoint."""

    loop_id: str = field(validator=_scope)
    summary: str = field(default="", validator=_text)
    iteration: int | None = field(default=None, validator=_iteration)
    id: str | None = field(default=None, validator=_optional_scope)
    owner: str | None = field(default=None, validator=_optional_scope)


E = TypeVar("E")


@functools.cache
def _converter() -> cattrs.Converter:
    return strict_converter(forbid_extra_keys=False)


def read_event(payload: object, kind: type[E]) -> E:
    """The decoded JSON `payload` as `kind`, or `InvalidEvent` naming each bad field."""
    return structure_or_raise(payload, kind, _converter(), error=InvalidEvent)


def idempotency_key(
    payload: Mapping[str, Any], headers: Mapping[str, str], stream: str, sequence: int, data: bytes
) -> str:
    """What makes a redelivery recognisable: the event's `id`, else its
    `Nats-Msg-Id` header, else its stream position plus a digest of its bytes
    (stable across redeliveries; a recreated stream reusing the position with
    other content is a different event)."""
    event_id = payload.get("id")
    if isinstance(event_id, str) and event_id.strip():
        return f"id:{event_id}"
    msg_id = headers.get("Nats-Msg-Id")
    if msg_id:
        return f"msg:{msg_id}"
    digest = hashlib.sha256(data).hexdigest()[:16]
    return f"seq:{stream}:{sequence}:{digest}"


def _extension(event_key: str, owner: str, **fields: Any) -> dict[str, Any]:
    return {"version": EXTENSION_VERSION, "event_key": event_key, "owner": owner, **fields}


def injected_payload(
    loop: str, source: str, hydration: Hydration, timestamp: int, event_key: str
) -> dict[str, Any]:
    """`agent.context.injected.<loop>`: `loop_id`, `context`, `token_count`,
    `source` (`pre_task`, `post_compaction`, ours: `entity_update`), `timestamp`."""
    return {
        "loop_id": loop,
        "context": hydration.text,
        "token_count": hydration.tokens,
        "source": source,
        "timestamp": timestamp,
        "agent_memory": _extension(
            event_key,
            hydration.owner,
            budget_tokens=hydration.budget_tokens,
            triples_used=hydration.triples_used,
            omitted=hydration.omitted,
            checkpoint_id=hydration.checkpoint_id,
            failures=list(hydration.failures),
        ),
    }


def mutation_payload(
    loop: str, owner: str, outcome: ExtractionOutcome, timestamp: int, event_key: str
) -> dict[str, Any]:
    """`graph.mutation.<loop>`: `operation` (`add_triples`), `loop_id`, `triples`
    (`subject`, `predicate`, `object`), `timestamp`."""
    return {
        "operation": OP_ADD_TRIPLES,
        "loop_id": loop,
        "triples": [
            {"subject": t.subject, "predicate": t.predicate, "object": t.object}
            for t in outcome.triples
        ],
        "timestamp": timestamp,
        "agent_memory": _extension(
            event_key,
            owner,
            added=outcome.added,
            bad_items=outcome.bad_items,
            error=outcome.error,
            failures=list(outcome.failures),
        ),
    }


def checkpoint_payload(
    checkpoint: Checkpoint, bucket: str, timestamp: int, event_key: str, *, final: bool
) -> dict[str, Any]:
    """`memory.checkpoint.created.<loop>`: `loop_id`, `checkpoint_id`, `bucket`
    (empty when checkpoints are on the cache port), `timestamp`."""
    return {
        "loop_id": checkpoint.loop,
        "checkpoint_id": checkpoint.id,
        "bucket": bucket,
        "timestamp": timestamp,
        "agent_memory": _extension(
            event_key,
            checkpoint.owner,
            final=final,
            iteration=checkpoint.iteration,
            summary=checkpoint.summary,
            decisions=list(checkpoint.decisions),
            files=list(checkpoint.files),
            triple_count=checkpoint.triple_count,
            created_at=checkpoint.created_at.isoformat(),
        ),
    }

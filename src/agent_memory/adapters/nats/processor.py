"""The graph memory processor on NATS JetStream.

Two durable pull consumers on the stream (default `AGENT`):

- `agent-memory-compaction<suffix>` on `agent.context.compaction.>`:
  `compaction_starting` -> extract triples, publish `graph.mutation.<loop>`,
  save a checkpoint and publish `memory.checkpoint.created.<loop>`;
  `compaction_complete` -> hydrate from the checkpoint plus the graph and
  publish `agent.context.injected.<loop>`; `gc_complete` -> logged.
- `agent-memory-hydrate<suffix>` on `memory.hydrate.request.*`: `pre_task`
  (needs `task`) or `post_compaction` -> publish `agent.context.injected.<loop>`
  (and to the request's `reply_to` subject, when it names one).

A message is acknowledged only after it was processed. Invalid payloads and
unknown event types are counted and acknowledged (never redelivered, never a
crash). A failure while processing is logged and counted; the message is
redelivered after `retry_delay_seconds` until `max_deliver`, then terminated.
Each processed event id is recorded in a JetStream key-value bucket before the
ack, so a redelivery (or the same event published twice) is never applied
twice; outputs carry `Nats-Msg-Id` headers, so a crash between publishing and
recording leaves no duplicate output in the stream either. `stop()` finishes
the messages already fetched (within `drain_timeout_seconds`).

`<loop>` is the event's `loop_id` as one subject token (`subject_token`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import attrs
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, StreamConfig
from nats.js.kv import KeyValue

from agent_memory.adapters.nats.config import ProcessorConfig, subject_token
from agent_memory.domain.errors import BackendUnavailable, InvalidInput
from agent_memory.domain.triples import Checkpoint, ExtractionOutcome, Hydration

__all__ = [
    "COMPACTION_SUBJECTS",
    "HYDRATE_SUBJECTS",
    "STREAM_SUBJECTS",
    "GraphHandler",
    "GraphProcessor",
    "ProcessorStats",
]

_log = logging.getLogger("agent_memory.processor")

COMPACTION_SUBJECTS = "agent.context.compaction.>"
HYDRATE_SUBJECTS = "memory.hydrate.request.*"
#: The subjects of a stream the processor creates: its inputs and its outputs.
STREAM_SUBJECTS = ["agent.context.>", "memory.>", "graph.mutation.>"]
_COMPACTION_TYPES = ("compaction_starting", "compaction_complete", "gc_complete")
_HYDRATE_TYPES = ("pre_task", "post_compaction")


class GraphHandler(Protocol):
    """What the processor calls (`agent_memory.services.graph_memory.GraphMemory` fits)."""

    async def extract(
        self,
        owner: str,
        loop: str,
        content: str,
        *,
        source: str = "",
        iteration: int | None = None,
        utilization: float | None = None,
    ) -> ExtractionOutcome: ...

    async def checkpoint(
        self,
        owner: str,
        loop: str,
        *,
        summary: str = "",
        iteration: int | None = None,
        source: str = "",
    ) -> tuple[Checkpoint | None, tuple[str, ...]]: ...

    async def hydrate_pre_task(self, owner: str, loop: str, task: str) -> Hydration: ...

    async def hydrate_post_compaction(self, owner: str, loop: str) -> Hydration: ...


@attrs.define
class ProcessorStats:
    """Counters since start (one processor instance)."""

    received: int = 0
    processed: int = 0
    invalid: int = 0
    unknown: int = 0
    duplicates: int = 0
    errors: int = 0
    dropped: int = 0
    bad_model_output: int = 0
    triples_added: int = 0
    published: int = 0
    gc_complete: int = 0
    in_flight: int = 0

    @property
    def settled(self) -> int:
        """Messages done with for good: processed, skipped (invalid, unknown,
        duplicate) or dropped after `max_deliver` tries."""
        return self.processed + self.invalid + self.unknown + self.duplicates + self.dropped

    def as_dict(self) -> dict[str, int]:
        return {**attrs.asdict(self), "settled": self.settled}


class _Invalid(Exception):
    """The payload cannot be processed as it is (counted, acknowledged)."""


class _Unknown(Exception):
    """The event type is not one this consumer handles (counted, acknowledged)."""


def _str_field(event: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = event.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _Invalid(f"{name}: a non-empty string is required, got {value!r}")
    return value


def _int_field(event: Mapping[str, Any], name: str) -> int | None:
    value = event.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"{name}: an integer is required, got {value!r}")
    return value


def _utilization(event: Mapping[str, Any]) -> float | None:
    for name in ("utilization", "context_utilization", "utilisation"):
        value = event.get(name)
        if value is None:
            continue
        ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1
        if not ok:
            raise _Invalid(f"{name}: a number in [0, 1] is required, got {value!r}")
        return float(value)
    return None


def _decode(msg: Msg) -> dict[str, Any]:
    try:
        event = json.loads(msg.data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _Invalid(f"not JSON: {exc}") from None
    if not isinstance(event, dict):
        raise _Invalid(f"a JSON object is required, got {type(event).__name__}")
    return event


def _event_type(event: Mapping[str, Any], subject: str, position: int | None) -> str:
    """The payload's `type`, else (when `position` is given) that subject token."""
    kind = event.get("type")
    if kind is None and position is not None:
        tokens = subject.split(".")
        kind = tokens[position] if len(tokens) > position else None
    if not isinstance(kind, str) or not kind:
        raise _Invalid(f"type: a string is required, got {kind!r}")
    return kind


class GraphProcessor:
    """Consumes agent-loop events from JetStream and answers them from graph memory."""

    def __init__(
        self,
        graph: GraphHandler,
        config: ProcessorConfig | None = None,
        *,
        client: Client | None = None,
    ) -> None:
        self._graph = graph
        self._config = config if config is not None else ProcessorConfig()
        self._nc = client
        self._owns_client = client is None
        self._js: JetStreamContext | None = None
        self._kv: KeyValue | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._stats = ProcessorStats()
        self._running = False

    @property
    def stats(self) -> ProcessorStats:
        return self._stats

    @property
    def config(self) -> ProcessorConfig:
        return self._config

    @property
    def running(self) -> bool:
        return self._running

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Connect, make sure the stream, consumers and dedup bucket exist, start consuming."""
        if self._running:
            return
        cfg = self._config
        try:
            if self._nc is None:
                self._nc = await nats.connect(
                    cfg.nats_url, name="agent-memory-processor", connect_timeout=5
                )
            js = self._nc.jetstream()
            await self._ensure_stream(js)
            self._kv = await self._dedup_bucket(js)
            compaction = await js.pull_subscribe(
                COMPACTION_SUBJECTS,
                durable=cfg.compaction_consumer,
                stream=cfg.stream_name,
                config=self._consumer_config(),
            )
            hydrate = await js.pull_subscribe(
                HYDRATE_SUBJECTS,
                durable=cfg.hydrate_consumer,
                stream=cfg.stream_name,
                config=self._consumer_config(),
            )
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            await self._close_client()
            raise BackendUnavailable("nats", f"{type(exc).__name__}: {exc}") from exc
        self._js = js
        self._stopping.clear()
        self._running = True
        self._tasks = [
            asyncio.create_task(self._consume(compaction, self._on_compaction), name="compaction"),
            asyncio.create_task(self._consume(hydrate, self._on_hydrate), name="hydrate"),
        ]
        _log.info(
            "graph processor consuming %s and %s on stream %s",
            COMPACTION_SUBJECTS,
            HYDRATE_SUBJECTS,
            cfg.stream_name,
        )

    def _consumer_config(self) -> ConsumerConfig:
        """A fresh consumer config (`pull_subscribe` mutates the one it is given)."""
        return ConsumerConfig(
            ack_wait=self._config.ack_wait_seconds,
            max_deliver=self._config.max_deliver,
            deliver_policy=DeliverPolicy.ALL,
        )

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop fetching, finish the messages already fetched, disconnect.

        True when everything in flight finished within `timeout` (default
        `drain_timeout_seconds`); otherwise the rest is cancelled unacknowledged
        (JetStream redelivers it to the next processor on the durable consumers).
        """
        if not self._running:
            await self._close_client()
            return True
        self._stopping.set()
        limit = self._config.drain_timeout_seconds if timeout is None else timeout
        tasks, self._tasks = self._tasks, []
        _done, pending = await asyncio.wait(tasks, timeout=limit)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._running = False
        await self._close_client()
        drained = not pending
        _log.info("graph processor stopped (drained=%s): %s", drained, self._stats.as_dict())
        return drained

    async def run_until(self, stop: asyncio.Event) -> None:
        """Start, wait for `stop` to be set, then stop (the CLI's main loop)."""
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()

    async def _close_client(self) -> None:
        nc = self._nc
        if nc is not None and self._owns_client:
            self._nc = None
            # Everything fetched was handled (or abandoned to redelivery): flush our
            # publishes and acks, then close (drain() would wait on the pull inboxes).
            with contextlib.suppress(Exception):
                await nc.flush(timeout=2)
            with contextlib.suppress(Exception):
                await nc.close()

    async def _ensure_stream(self, js: JetStreamContext) -> None:
        name = self._config.stream_name
        try:
            await js.stream_info(name)
            return
        except nats.js.errors.NotFoundError:
            if not self._config.create_stream:
                raise
        with contextlib.suppress(nats.js.errors.BadRequestError):  # created meanwhile
            await js.add_stream(StreamConfig(name=name, subjects=list(STREAM_SUBJECTS)))

    async def _dedup_bucket(self, js: JetStreamContext) -> KeyValue:
        bucket = self._config.dedup_bucket
        try:
            return await js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            return await js.create_key_value(
                bucket=bucket,
                history=1,
                ttl=self._config.dedup_ttl_days * 86_400,
                description="agent-memory: event ids already processed",
            )

    # -- consuming -------------------------------------------------------------

    async def _consume(self, sub: JetStreamContext.PullSubscription, handler: Any) -> None:
        cfg = self._config
        while not self._stopping.is_set():
            try:
                msgs = await sub.fetch(cfg.batch_size, timeout=cfg.fetch_timeout_seconds)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection trouble: log, back off, keep going
                self._stats.errors += 1
                _log.warning("graph processor: fetch failed: %s: %s", type(exc).__name__, exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), cfg.retry_delay_seconds)
                continue
            await self._handle_all(msgs, handler)
        await self._drain_stragglers(sub, handler)

    async def _handle_all(self, msgs: list[Msg], handler: Any) -> None:
        self._stats.in_flight += len(msgs)
        for msg in msgs:
            try:
                await self._handle(msg, handler)
            finally:
                self._stats.in_flight -= 1

    async def _drain_stragglers(self, sub: JetStreamContext.PullSubscription, handler: Any) -> None:
        """Messages the server delivered for the last pull request after `fetch`
        returned are in flight too: wait for that request to expire, then process
        what arrived (instead of leaving it to an ack timeout)."""
        await asyncio.sleep(self._config.fetch_timeout_seconds)
        while sub.pending_msgs > 0:
            try:
                msg = await sub._sub.next_msg(timeout=0.1)
            except (nats.errors.TimeoutError, TimeoutError):
                return
            if JetStreamContext.is_status_msg(msg):
                continue
            await self._handle_all([msg], handler)

    async def _handle(self, msg: Msg, handler: Any) -> None:
        """Process one message; acknowledge it, then count the outcome."""
        self._stats.received += 1
        try:
            event = _decode(msg)
            event_id = _str_field(event, "id")
            assert event_id is not None
            key = hashlib.sha256(f"{msg.subject.split('.')[0]}\x00{event_id}".encode()).hexdigest()
            if await self._seen(key):
                _log.info("graph processor: event %r already processed, skipped", event_id)
                outcome = "duplicates"
            else:
                async with self._working(msg):
                    await handler(msg, event, event_id)
                await self._mark(key)
                outcome = "processed"
        except _Invalid as exc:
            _log.warning("graph processor: invalid event on %s skipped: %s", msg.subject, exc)
            outcome = "invalid"
        except _Unknown as exc:
            _log.warning("graph processor: unknown event on %s skipped: %s", msg.subject, exc)
            outcome = "unknown"
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._stats.errors += 1
            _log.warning(
                "graph processor: processing %s failed: %s: %s",
                msg.subject,
                type(exc).__name__,
                exc,
            )
            await self._retry_or_drop(msg)
            return
        await self._ack(msg)
        setattr(self._stats, outcome, getattr(self._stats, outcome) + 1)

    @contextlib.asynccontextmanager
    async def _working(self, msg: Msg) -> AsyncIterator[None]:
        """While a message is processed, tell the server every half `ack_wait`
        that it is in progress, so a slow model call is not redelivered meanwhile."""

        async def beat() -> None:
            while True:
                await asyncio.sleep(self._config.ack_wait_seconds / 2)
                with contextlib.suppress(Exception):
                    await msg.in_progress()

        task = asyncio.create_task(beat())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _seen(self, key: str) -> bool:
        assert self._kv is not None
        try:
            await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return False
        return True

    async def _mark(self, key: str) -> None:
        assert self._kv is not None
        await self._kv.put(key, b"1")

    async def _ack(self, msg: Msg) -> None:
        try:
            await msg.ack_sync(timeout=5)
        except Exception as exc:  # redelivered later; the dedup record skips it then
            self._stats.errors += 1
            _log.warning("graph processor: ack failed: %s: %s", type(exc).__name__, exc)

    async def _retry_or_drop(self, msg: Msg) -> None:
        try:
            delivered = msg.metadata.num_delivered
            if delivered >= self._config.max_deliver:
                _log.error(
                    "graph processor: giving up on %s after %d tries", msg.subject, delivered
                )
                await msg.term()
                self._stats.dropped += 1
            else:
                await msg.nak(delay=self._config.retry_delay_seconds)
        except Exception as exc:
            self._stats.errors += 1
            _log.warning("graph processor: nak failed: %s: %s", type(exc).__name__, exc)

    async def _publish(self, subject: str, body: Mapping[str, Any], msg_id: str) -> None:
        assert self._js is not None
        assert self._nc is not None
        data = json.dumps(body).encode()
        try:
            await self._js.publish(subject, data, headers={"Nats-Msg-Id": msg_id})
        except nats.js.errors.NoStreamResponseError:  # no stream stores it: plain NATS
            await self._nc.publish(subject, data)
        self._stats.published += 1

    # -- handlers --------------------------------------------------------------

    def _scope(self, event: Mapping[str, Any]) -> tuple[str, str]:
        owner = _str_field(event, "owner", required=False) or self._config.owner
        loop = _str_field(event, "loop_id")
        assert loop is not None
        return owner, loop

    async def _on_compaction(self, msg: Msg, event: dict[str, Any], event_id: str) -> None:
        kind = _event_type(event, msg.subject, 3)
        if kind not in _COMPACTION_TYPES:
            raise _Unknown(f"type {kind!r} (known: {', '.join(_COMPACTION_TYPES)})")
        owner, loop = self._scope(event)
        if kind == "gc_complete":
            self._stats.gc_complete += 1
            _log.info("graph processor: gc complete for loop %r (event %r)", loop, event_id)
            return
        try:
            if kind == "compaction_starting":
                await self._compaction_starting(event, event_id, owner, loop)
            else:
                hydration = await self._graph.hydrate_post_compaction(owner, loop)
                await self._inject(event_id, "post_compaction", hydration, None)
        except InvalidInput as exc:
            raise _Invalid(str(exc)) from None

    async def _compaction_starting(
        self, event: Mapping[str, Any], event_id: str, owner: str, loop: str
    ) -> None:
        content = event.get("content", "")
        if not isinstance(content, str):
            raise _Invalid(f"content: a string is required, got {type(content).__name__}")
        summary = event.get("summary", "")
        if not isinstance(summary, str):
            raise _Invalid(f"summary: a string is required, got {type(summary).__name__}")
        iteration = _int_field(event, "iteration")
        outcome = await self._graph.extract(
            owner,
            loop,
            content,
            source=event_id,
            iteration=iteration,
            utilization=_utilization(event),
        )
        if outcome.bad_output:
            self._stats.bad_model_output += 1
        self._stats.triples_added += outcome.added
        token = subject_token(loop)
        if outcome.triggered:
            await self._publish(
                f"graph.mutation.{token}",
                {
                    "id": f"{event_id}:mutation",
                    "event_id": event_id,
                    "owner": owner,
                    "loop_id": loop,
                    "operation": "add",
                    "added": outcome.added,
                    "triples": [
                        {"subject": t.subject, "predicate": t.predicate, "object": t.object}
                        for t in outcome.triples
                    ],
                    "bad_items": outcome.bad_items,
                    "error": outcome.error,
                    "failures": list(outcome.failures),
                },
                f"{event_id}:mutation",
            )
        checkpoint, _failures = await self._graph.checkpoint(
            owner, loop, summary=summary, iteration=iteration, source=event_id
        )
        if checkpoint is not None:
            await self._publish(
                f"memory.checkpoint.created.{token}",
                {"event_id": event_id, "loop_id": loop, **checkpoint.as_json()},
                f"{event_id}:checkpoint",
            )

    async def _on_hydrate(self, msg: Msg, event: dict[str, Any], event_id: str) -> None:
        kind = _event_type(event, msg.subject, None)
        if kind not in _HYDRATE_TYPES:
            raise _Unknown(f"type {kind!r} (known: {', '.join(_HYDRATE_TYPES)})")
        owner, loop = self._scope(event)
        reply_to = _str_field(event, "reply_to", required=False)
        try:
            if kind == "pre_task":
                task = _str_field(event, "task")
                assert task is not None
                hydration = await self._graph.hydrate_pre_task(owner, loop, task)
            else:
                hydration = await self._graph.hydrate_post_compaction(owner, loop)
        except InvalidInput as exc:
            raise _Invalid(str(exc)) from None
        await self._inject(event_id, kind, hydration, reply_to)

    async def _inject(
        self, event_id: str, kind: str, hydration: Hydration, reply_to: str | None
    ) -> None:
        body = {"id": f"{event_id}:injected", "event_id": event_id, **hydration.as_json()}
        body["request_type"] = kind
        body["loop_id"] = hydration.loop
        await self._publish(
            f"agent.context.injected.{subject_token(hydration.loop)}", body, f"{event_id}:injected"
        )
        if reply_to is not None:
            assert self._nc is not None
            await self._nc.publish(reply_to, json.dumps(body).encode())

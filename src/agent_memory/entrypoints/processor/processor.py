"""The graph memory processor: agent-loop events in, graph memory out, on JetStream.

Inputs (durable pull consumers on the stream, default `AGENT`, names ending in
`-<consumer_name_suffix>` when one is set):

- `agent-memory-compaction` on `agent.context.compaction.>`:
  `compaction_starting` -> extract the key facts from its `content` (else its
  `summary`; with neither, counted `no_content`) (always: the context is about
  to be compacted), publish `graph.mutation.<loop>` when any were found, save a
  checkpoint and publish `memory.checkpoint.created.<loop>`;
  `compaction_complete` -> publish `agent.context.injected.<loop>` (post-compaction
  hydration); `gc_complete` -> logged. A `compaction_complete` or `gc_complete`
  carrying `content` is extracted from when the iteration/utilisation triggers say so.
- `agent-memory-hydrate` on `memory.hydrate.request.*`: `pre_task` (needs
  `task_description`) or `post_compaction` -> `agent.context.injected.<loop>`
  (and the request's `reply_to`, when it names one).
- `agent-memory-loop-end` on `agent.complete.*`: the final checkpoint.
- A watch on the key-value bucket `ENTITY_STATES`: when an entity changes, every
  active loop whose graph mentions it gets fresh post-compaction context
  (`source: entity_update`).

A message is acknowledged only after it was processed. Invalid payloads and
unknown types are counted and acknowledged. A failure while processing is
logged and counted; the message is redelivered after `retry_delay_seconds`
until `max_deliver`, then terminated. Each processed event's idempotency key
(`wire.idempotency_key`: its `id`, else its `Nats-Msg-Id`, else its stream
position and content) is recorded in a key-value bucket before the ack, so a
redelivery is never applied twice; outputs carry `Nats-Msg-Id` headers derived
from it. `stop()` finishes the messages already fetched.

`<loop>` is the event's `loop_id` as one subject token (`subject_token`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.nats import (
    Delivery,
    JetStreamBus,
    KeyValueBucket,
    KeyValueCache,
    KeyValueChange,
    PullConsumer,
    subject_token,
)
from agent_memory.domain.errors import BackendUnavailable, InvalidInput
from agent_memory.domain.triples import Checkpoint
from agent_memory.entrypoints.processor.config import ProcessorConfig
from agent_memory.entrypoints.processor.wire import (
    CompactionEvent,
    HydrateRequest,
    InvalidEvent,
    LoopEnded,
    checkpoint_payload,
    idempotency_key,
    injected_payload,
    mutation_payload,
    read_event,
)
from agent_memory.ports.models import Clock
from agent_memory.services.graph_memory import GraphMemory

__all__ = [
    "COMPACTION_SUBJECTS",
    "HYDRATE_SUBJECTS",
    "LOOP_END_SUBJECTS",
    "STREAM_SUBJECTS",
    "GraphProcessor",
    "ProcessorStats",
]

_log = logging.getLogger(__name__)

COMPACTION_SUBJECTS = "agent.context.compaction.>"
HYDRATE_SUBJECTS = "memory.hydrate.request.*"
LOOP_END_SUBJECTS = "agent.complete.*"
#: The subjects of a stream the processor creates: its inputs and its outputs.
STREAM_SUBJECTS = ["agent.context.>", "agent.complete.>", "memory.>", "graph.mutation.>"]
_COMPACTION_TYPES = ("compaction_starting", "compaction_complete", "gc_complete")
_HYDRATE_TYPES = ("pre_task", "post_compaction")
#: How many loops the entity watch keeps track of (least recently seen dropped first).
MAX_ACTIVE_LOOPS = 1_000

Handler = Callable[[Delivery, dict[str, Any], str], Awaitable[None]]


@attrs.define
class ProcessorStats:
    """Counters since start (one processor instance). Extractions that found no
    facts say why: `no_model` (none configured), `model_errors` (the call
    failed), `bad_model_output` (the answer was not valid triples); a
    `compaction_starting` with neither `content` nor `summary` counts
    `no_content` (there was nothing to extract from)."""

    received: int = 0
    processed: int = 0
    invalid: int = 0
    unknown: int = 0
    duplicates: int = 0
    errors: int = 0
    dropped: int = 0
    bad_model_output: int = 0
    no_model: int = 0
    model_errors: int = 0
    no_content: int = 0
    triples_added: int = 0
    published: int = 0
    checkpoints: int = 0
    gc_complete: int = 0
    entity_updates: int = 0
    in_flight: int = 0

    @property
    def settled(self) -> int:
        """Messages done with for good: processed, skipped (invalid, unknown,
        duplicate) or dropped after `max_deliver` tries."""
        return self.processed + self.invalid + self.unknown + self.duplicates + self.dropped

    def as_dict(self) -> dict[str, int]:
        return {**attrs.asdict(self), "settled": self.settled}


class _Unknown(Exception):
    """The event type is not one this consumer handles (counted, acknowledged)."""


def _decode(data: bytes) -> dict[str, Any]:
    try:
        event = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidEvent(f"not JSON: {exc}") from None
    if not isinstance(event, dict):
        raise InvalidEvent(f"a JSON object is required, got {type(event).__name__}")
    return event


class GraphProcessor:
    """Consumes agent-loop events from JetStream and answers them from graph memory.

    With `checkpoint.storage_bucket` set, checkpoints go to that key-value bucket
    (created when missing, max age `retention_days`); otherwise to `graph`'s cache.
    """

    def __init__(
        self,
        graph: GraphMemory,
        config: ProcessorConfig | None = None,
        *,
        bus: JetStreamBus | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._config = config if config is not None else ProcessorConfig()
        self._graph = graph
        self._bus = bus if bus is not None else JetStreamBus(self._config.nats_url)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._done: KeyValueBucket | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._watch: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._stats = ProcessorStats()
        self._running = False
        self._active: OrderedDict[str, str] = OrderedDict()

    @property
    def stats(self) -> ProcessorStats:
        return self._stats

    @property
    def config(self) -> ProcessorConfig:
        return self._config

    @property
    def graph(self) -> GraphMemory:
        return self._graph

    @property
    def running(self) -> bool:
        return self._running

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Connect; make sure the stream, consumers and buckets exist; start consuming."""
        if self._running:
            return
        cfg = self._config
        delivery = cfg.delivery
        try:
            await self._bus.connect()
            await self._bus.ensure_stream(
                cfg.stream_name, STREAM_SUBJECTS, create=cfg.create_stream
            )
            self._done = await self._bus.key_value(
                cfg.dedup_bucket,
                ttl_seconds=delivery.dedup_ttl_days * 86_400,
                description="agent-memory: events already processed",
            )
            bucket = cfg.checkpoint.storage_bucket
            if bucket is not None:
                kv = await self._bus.key_value(
                    bucket,
                    ttl_seconds=cfg.checkpoint.retention_days * 86_400,
                    description="agent-memory: loop checkpoints",
                )
                assert kv is not None
                self._graph = self._graph.with_cache(KeyValueCache(kv))
            consumers: list[tuple[PullConsumer, Handler]] = []
            for subject, durable, handler in (
                (COMPACTION_SUBJECTS, cfg.compaction_consumer, self._on_compaction),
                (HYDRATE_SUBJECTS, cfg.hydrate_consumer, self._on_hydrate),
            ):
                consumer = await self._bus.pull(
                    cfg.stream_name,
                    subject,
                    durable,
                    ack_wait=delivery.ack_wait_seconds,
                    max_deliver=delivery.max_deliver,
                )
                consumers.append((consumer, handler))
            loop_end = await self._loop_end_consumer()
            if loop_end is not None:
                consumers.append((loop_end, self._on_loop_end))
        except BackendUnavailable:
            await self._bus.close()
            raise
        self._stopping.clear()
        self._running = True
        self._tasks = [
            asyncio.create_task(self._consume(c, h), name=c.durable) for c, h in consumers
        ]
        if cfg.entity_states.enabled:
            self._watch = asyncio.create_task(self._watch_entities(), name="entity_states")
        _log.info(
            "graph processor consuming %s on stream %s",
            ", ".join(c.durable for c, _ in consumers),
            cfg.stream_name,
        )

    async def _loop_end_consumer(self) -> PullConsumer | None:
        """The loop-end consumer, or None (logged) when the stream does not carry
        `agent.complete.*`: then no final checkpoints are taken."""
        cfg = self._config
        try:
            return await self._bus.pull(
                cfg.stream_name,
                LOOP_END_SUBJECTS,
                cfg.loop_end_consumer,
                ack_wait=cfg.delivery.ack_wait_seconds,
                max_deliver=cfg.delivery.max_deliver,
            )
        except BackendUnavailable as exc:
            _log.warning(
                "graph processor: no loop-end consumer on stream %s (%s): "
                "final checkpoints are off",
                cfg.stream_name,
                exc.detail,
            )
            return None

    async def stop(self, timeout: float | None = None) -> bool:
        """Stop fetching, finish the messages already fetched, disconnect.

        True when everything in flight finished within `timeout` (default
        `drain_timeout_seconds`); otherwise the rest is cancelled unacknowledged
        (JetStream redelivers it to the next processor on the durable consumers).
        """
        if not self._running:
            await self._bus.close()
            return True
        self._stopping.set()
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        limit = self._config.delivery.drain_timeout_seconds if timeout is None else timeout
        tasks, self._tasks = self._tasks, []
        pending: set[asyncio.Task[None]] = set()
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=limit)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._running = False
        await self._bus.close()
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

    # -- consuming -------------------------------------------------------------

    async def _pause(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), self._config.delivery.retry_delay_seconds)

    async def _consume(self, consumer: PullConsumer, handler: Handler) -> None:
        delivery = self._config.delivery
        while not self._stopping.is_set():
            try:
                batch = await consumer.fetch(delivery.batch_size, delivery.fetch_timeout_seconds)
            except BackendUnavailable as exc:  # connection trouble: log, back off, go on
                self._stats.errors += 1
                _log.warning("graph processor: fetch failed: %s", exc)
                await self._pause()
                continue
            await self._handle_all(batch, handler)
        # Messages delivered for the last pull request are in flight too: wait for
        # that request to expire, then process them (not leave them to ack_wait).
        await asyncio.sleep(delivery.fetch_timeout_seconds)
        await self._handle_all(await consumer.leftovers(), handler)

    async def _handle_all(self, batch: list[Delivery], handler: Handler) -> None:
        self._stats.in_flight += len(batch)
        for item in batch:
            try:
                await self._handle(item, handler)
            finally:
                self._stats.in_flight -= 1

    async def _handle(self, item: Delivery, handler: Handler) -> None:
        """Process one message; acknowledge it, then count the outcome."""
        self._stats.received += 1
        try:
            payload = _decode(item.data)
            key = idempotency_key(
                payload, item.headers, item.stream, item.stream_sequence, item.data
            )
            done_key = _done_key(item.subject.split(".")[0], key)
            if await self._seen(done_key):
                _log.info("graph processor: event %s already processed, skipped", key)
                outcome = "duplicates"
            else:
                async with self._working(item):
                    await handler(item, payload, key)
                await self._mark(done_key)
                outcome = "processed"
        except (InvalidEvent, InvalidInput) as exc:
            _log.warning("graph processor: invalid event on %s skipped: %s", item.subject, exc)
            outcome = "invalid"
        except _Unknown as exc:
            _log.warning("graph processor: unknown event on %s skipped: %s", item.subject, exc)
            outcome = "unknown"
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._stats.errors += 1
            _log.warning(
                "graph processor: processing %s failed: %s: %s",
                item.subject,
                type(exc).__name__,
                exc,
            )
            await self._retry_or_drop(item)
            return
        await self._ack(item)
        setattr(self._stats, outcome, getattr(self._stats, outcome) + 1)

    @contextlib.asynccontextmanager
    async def _working(self, item: Delivery) -> AsyncIterator[None]:
        """While a message is processed, tell the server every half `ack_wait`
        that it is in progress, so a slow model call is not redelivered meanwhile."""

        async def beat() -> None:
            while True:
                await asyncio.sleep(self._config.delivery.ack_wait_seconds / 2)
                with contextlib.suppress(BackendUnavailable):
                    await item.in_progress()

        task = asyncio.create_task(beat())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _seen(self, key: str) -> bool:
        assert self._done is not None
        return await self._done.get(key) is not None

    async def _mark(self, key: str) -> None:
        assert self._done is not None
        await self._done.put(key, b"1")

    async def _ack(self, item: Delivery) -> None:
        try:
            await item.ack()
        except BackendUnavailable as exc:  # redelivered later; the dedup record skips it
            self._stats.errors += 1
            _log.warning("graph processor: ack failed: %s", exc)

    async def _retry_or_drop(self, item: Delivery) -> None:
        try:
            if item.num_delivered >= self._config.delivery.max_deliver:
                _log.error(
                    "graph processor: giving up on %s after %d tries",
                    item.subject,
                    item.num_delivered,
                )
                await item.term()
                self._stats.dropped += 1
            else:
                await item.nak(self._config.delivery.retry_delay_seconds)
        except BackendUnavailable as exc:
            self._stats.errors += 1
            _log.warning("graph processor: nak failed: %s", exc)

    async def _publish(self, subject: str, body: dict[str, Any], msg_id: str) -> None:
        await self._bus.publish(subject, json.dumps(body).encode(), msg_id=msg_id)
        self._stats.published += 1

    def _now(self) -> int:
        return int(self._clock.now().timestamp())

    def _seen_loop(self, loop: str, owner: str) -> None:
        self._active[loop] = owner
        self._active.move_to_end(loop)
        while len(self._active) > MAX_ACTIVE_LOOPS:
            self._active.popitem(last=False)

    # -- handlers --------------------------------------------------------------

    async def _on_compaction(self, item: Delivery, payload: dict[str, Any], key: str) -> None:
        if payload.get("type") is None:  # the subject's 4th token names it
            tokens = item.subject.split(".")
            if len(tokens) > 3:
                payload = {**payload, "type": tokens[3]}
        event = read_event(payload, CompactionEvent)
        kind = event.type
        if kind not in _COMPACTION_TYPES:
            raise _Unknown(f"type {kind!r} (known: {', '.join(_COMPACTION_TYPES)})")
        owner = event.owner or self._config.owner
        loop = event.loop_id
        source = event.id or key
        self._seen_loop(loop, owner)
        if kind == "compaction_starting":
            content = event.content or event.summary
            if content.strip():
                await self._extract(owner, loop, content, event, source, key, force=True)
            else:
                self._stats.no_content += 1
                _log.info(
                    "graph processor: compaction_starting for loop %r carries no content "
                    "(nor summary): no facts extracted (%s)",
                    loop,
                    key,
                )
            checkpoint, _failures = await self._graph.checkpoint(
                owner, loop, summary=event.summary, iteration=event.iteration, source=source
            )
            await self._announce(checkpoint, key, final=False)
            return
        if event.content.strip():
            await self._extract(owner, loop, event.content, event, source, key, force=False)
        if kind == "gc_complete":
            self._stats.gc_complete += 1
            _log.info("graph processor: gc complete for loop %r (%s)", loop, key)
        elif self._graph.settings.post_compaction.enabled:
            hydration = await self._graph.hydrate_post_compaction(owner, loop)
            body = injected_payload(loop, "post_compaction", hydration, self._now(), key)
            await self._publish(_injected_subject(loop), body, f"{key}:injected")

    async def _extract(
        self,
        owner: str,
        loop: str,
        content: str,
        event: CompactionEvent,
        source: str,
        key: str,
        *,
        force: bool,
    ) -> None:
        outcome = await self._graph.extract(
            owner,
            loop,
            content,
            source=source[:500],
            iteration=event.iteration,
            utilization=event.utilization,
            force=force,
        )
        if outcome.no_model:
            self._stats.no_model += 1
        elif outcome.model_failed:
            self._stats.model_errors += 1
        elif outcome.bad_output:
            self._stats.bad_model_output += 1
        self._stats.triples_added += outcome.added
        if outcome.triples:
            await self._publish(
                f"graph.mutation.{subject_token(loop)}",
                mutation_payload(loop, owner, outcome, self._now(), key),
                f"{key}:mutation",
            )

    async def _announce(self, checkpoint: Checkpoint | None, key: str, *, final: bool) -> None:
        if checkpoint is None:
            return
        self._stats.checkpoints += 1
        bucket = self._config.checkpoint.storage_bucket or ""
        await self._publish(
            f"memory.checkpoint.created.{subject_token(checkpoint.loop)}",
            checkpoint_payload(checkpoint, bucket, self._now(), key, final=final),
            f"{key}:checkpoint",
        )

    async def _on_hydrate(self, item: Delivery, payload: dict[str, Any], key: str) -> None:
        request = read_event(payload, HydrateRequest)
        kind = request.type
        if kind not in _HYDRATE_TYPES:
            raise _Unknown(f"type {kind!r} (known: {', '.join(_HYDRATE_TYPES)})")
        owner = request.owner or self._config.owner
        loop = request.loop_id
        self._seen_loop(loop, owner)
        settings = self._graph.settings
        if kind == "pre_task":
            task = request.task_text
            if task is None or not task.strip():
                raise InvalidEvent("task_description: a non-empty string is required")
            if not settings.pre_task.enabled:
                return
            hydration = await self._graph.hydrate_pre_task(owner, loop, task)
        else:
            if not settings.post_compaction.enabled:
                return
            hydration = await self._graph.hydrate_post_compaction(owner, loop)
        body = injected_payload(loop, kind, hydration, self._now(), key)
        await self._publish(_injected_subject(loop), body, f"{key}:injected")
        if request.reply_to is not None:
            await self._bus.publish_plain(request.reply_to, json.dumps(body).encode())

    async def _on_loop_end(self, item: Delivery, payload: dict[str, Any], key: str) -> None:
        event = read_event(payload, LoopEnded)
        owner = event.owner or self._config.owner
        checkpoint, _failures = await self._graph.checkpoint(
            owner,
            event.loop_id,
            summary=event.summary,
            iteration=event.iteration,
            source=event.id or key,
        )
        await self._announce(checkpoint, key, final=True)
        self._active.pop(event.loop_id, None)

    # -- entity states ---------------------------------------------------------

    async def _watch_entities(self) -> None:
        """Watch the entity-state bucket (waiting for it to exist) until stopped."""
        name = self._config.entity_states.bucket
        warned = False
        while not self._stopping.is_set():
            try:
                bucket = await self._bus.key_value(name, create=False)
                if bucket is None:
                    if not warned:
                        _log.info("graph processor: waiting for key-value bucket %s", name)
                        warned = True
                    await self._pause()
                    continue
                async for change in bucket.watch():
                    await self._on_entity(change)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._stats.errors += 1
                _log.warning("graph processor: entity watch on %s failed: %s", name, exc)
                await self._pause()

    async def _on_entity(self, change: KeyValueChange) -> None:
        if change.value is None:
            return
        done_key = _done_key("entity", f"{change.key}\x00{change.revision}")
        if await self._seen(done_key):
            return
        nodes = [change.key]
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            state = json.loads(change.value)
            if isinstance(state, dict) and isinstance(state.get("id"), str):
                nodes.append(state["id"])
        if self._graph.settings.post_compaction.enabled:
            for loop, owner in list(self._active.items()):
                if not await self._graph.mentions(owner, loop, nodes):
                    continue
                hydration = await self._graph.hydrate_post_compaction(owner, loop)
                key = f"entity:{change.key}:{change.revision}"
                body = injected_payload(loop, "entity_update", hydration, self._now(), key)
                await self._publish(_injected_subject(loop), body, f"{key}:{loop}:injected")
                self._stats.entity_updates += 1
        await self._mark(done_key)


def _injected_subject(loop: str) -> str:
    return f"agent.context.injected.{subject_token(loop)}"


def _done_key(kind: str, key: str) -> str:
    return hashlib.sha256(f"{kind}\x00{key}".encode()).hexdigest()

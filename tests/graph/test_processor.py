"""The graph memory processor end to end on a real nats-server with JetStream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from agent_memory.adapters.memory import InMemoryCache, InMemoryTripleStore
from agent_memory.adapters.nats import GraphProcessor, ProcessorConfig, subject_token
from agent_memory.domain.views import count_tokens
from agent_memory.services.graph_memory import GraphMemory, GraphSettings
from graph.helpers import FixedClock, RuleModel, wait_for

CONFIG_DOC: dict[str, Any] = {
    "stream_name": "AGENT",
    "owner": "team",
    "processor": {
        "batch_size": 4,
        "fetch_timeout_seconds": 0.2,
        "ack_wait_seconds": 1,
        "max_deliver": 3,
        "retry_delay_seconds": 0.2,
        "drain_timeout_seconds": 10,
    },
    "extraction": {
        "llm_assisted": {"max_tokens": 321, "every_n_iterations": 1, "utilization_threshold": 0.7}
    },
    "hydration": {
        "pre_task": {"max_context_tokens": 120, "hops": 1},
        "post_compaction": {"max_recovery_tokens": 90},
    },
    "checkpoint": {"retention_days": 2},
}


class Harness:
    """One test's processor world: stream, consumers and collectors on the server."""

    def __init__(self, url: str, nc: Client, model: RuleModel) -> None:
        self.url = url
        self.nc = nc
        self.js = nc.jetstream()
        self.suffix = "-" + uuid.uuid4().hex[:8]
        self.stream = f"GRAPHTEST{self.suffix}"  # never a real deployment's stream
        self.model = model
        self.triples = InMemoryTripleStore()
        self.cache = InMemoryCache()
        self.settings = GraphSettings.from_mapping(CONFIG_DOC)
        self.graph = GraphMemory(
            self.triples, self.cache, model, clock=FixedClock(), settings=self.settings
        )
        self.out: dict[str, list[dict[str, Any]]] = {"mutation": [], "injected": [], "cp": []}
        self.processors: list[GraphProcessor] = []

    def config(self, **overrides: Any) -> ProcessorConfig:
        return ProcessorConfig.from_mapping(
            CONFIG_DOC,
            nats_url=self.url,
            consumer_suffix=self.suffix,
            stream_name=self.stream,
            **overrides,
        )

    def processor(self, **overrides: Any) -> GraphProcessor:
        proc = GraphProcessor(self.graph, self.config(**overrides))
        self.processors.append(proc)
        return proc

    async def collect(self) -> None:
        for name, subject in (
            ("mutation", "graph.mutation.>"),
            ("injected", "agent.context.injected.>"),
            ("cp", "memory.checkpoint.created.>"),
        ):
            await self.nc.subscribe(subject, cb=self._sink(self.out[name]))

    @staticmethod
    def _sink(into: list[dict[str, Any]]) -> Callable[[Msg], Awaitable[None]]:
        async def sink(msg: Msg) -> None:
            into.append(json.loads(msg.data))

        return sink

    async def publish(self, subject: str, body: object, *, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(body).encode()
        await self.js.publish(subject, data)

    async def compaction(self, kind: str, loop: str, event_id: str, **fields: Any) -> None:
        body = {"id": event_id, "type": kind, "loop_id": loop, **fields}
        await self.publish(f"agent.context.compaction.{kind}.{subject_token(loop)}", body)

    async def cleanup(self) -> None:
        for proc in self.processors:
            await proc.stop(timeout=5)
        for name in (self.stream, f"KV_{self.stream}_agent_memory_done{self.suffix}"):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await self.js.delete_stream(name)


@pytest.fixture
async def world(nats_url: str) -> AsyncIterator[Harness]:
    nc = await nats.connect(nats_url)
    harness = Harness(nats_url, nc, RuleModel())
    # The processor creates the stream; make it now so the test can publish first.
    await harness.js.add_stream(
        name=harness.stream, subjects=["agent.context.>", "memory.>", "graph.mutation.>"]
    )
    await harness.collect()
    try:
        yield harness
    finally:
        await harness.cleanup()
        await nc.drain()


def _facts(*triples: tuple[str, str, str]) -> str:
    return "\n".join(f"FACT: {s} | {p} | {o}" for s, p, o in triples)


async def test_compaction_in_mutations_and_context_out(world: Harness) -> None:
    proc = world.processor()
    await proc.start()
    content = _facts(
        ("service", "uses", "postgres"),
        ("agent", "decided", "use pgvector for search"),
        ("agent", "modified", "src/app/db.py"),
        ("postgres", "runs_on", "port 5432"),
    )
    await world.compaction(
        "compaction_starting",
        "loop.1",
        "e1",
        content=content,
        iteration=7,
        utilization=0.9,
        summary="Migrating search to PostgreSQL with pgvector. " * 20,
    )
    await wait_for(lambda: world.out["cp"], what="the checkpoint")
    [mutation] = world.out["mutation"]
    assert mutation["loop_id"] == "loop.1"
    assert mutation["added"] == 4
    assert {"subject": "service", "predicate": "uses", "object": "postgres"} in mutation["triples"]
    assert world.model.max_tokens_seen == [321]
    stored = await world.triples.query("team", loop="loop.1")
    assert len(stored) == 4
    assert {t.source for t in stored} == {"e1"}
    [checkpoint] = world.out["cp"]
    assert checkpoint["decisions"] == ["agent decided use pgvector for search"]
    assert checkpoint["files"] == ["src/app/db.py"]

    await world.compaction("compaction_complete", "loop.1", "e2")
    await wait_for(lambda: world.out["injected"], what="injected context")
    [injected] = world.out["injected"]
    assert injected["kind"] == "post_compaction"
    assert injected["checkpoint_id"] == "e1"
    assert injected["tokens"] <= 90
    assert count_tokens(injected["context"]) <= 90
    assert injected["omitted"] > 0  # the long summary and the graph do not all fit
    assert "pgvector" in injected["context"]
    assert proc.stats.processed == 2


async def test_hydrate_request_answered(world: Harness) -> None:
    await world.triples.add([])
    proc = world.processor()
    await proc.start()
    await world.compaction(
        "compaction_starting",
        "old-loop",
        "h1",
        content=_facts(
            ("billing", "depends_on", "stripe"),
            ("team", "decided", "retry stripe webhooks"),
            ("agent", "modified", "billing/webhooks.py"),
            ("frontend", "uses", "react"),
        ),
    )
    await wait_for(lambda: world.out["cp"], what="the first loop's checkpoint")
    replies: list[dict[str, Any]] = []

    async def on_reply(msg: Msg) -> None:
        replies.append(json.loads(msg.data))

    await world.nc.subscribe("test.reply.h2", cb=on_reply)
    await world.publish(
        "memory.hydrate.request.new-loop",
        {
            "id": "h2",
            "type": "pre_task",
            "loop_id": "new-loop",
            "task": "Fix the billing webhooks from stripe",
            "reply_to": "test.reply.h2",
        },
    )
    await wait_for(lambda: replies and world.out["injected"], what="the hydrate answer")
    [answer] = replies
    assert answer == world.out["injected"][0]
    assert answer["request_type"] == "pre_task"
    assert answer["loop_id"] == "new-loop"
    assert answer["tokens"] <= 120
    assert count_tokens(answer["context"]) <= 120
    context = answer["context"]
    assert "## Past decisions" in context
    assert '"retry stripe webhooks"' in context
    assert '"billing/webhooks.py"' in context
    assert '"stripe"' in context

    await world.publish(
        "memory.hydrate.request.old-loop",
        {"id": "h3", "type": "post_compaction", "loop_id": "old-loop"},
    )
    await wait_for(lambda: len(world.out["injected"]) == 2, what="the post-compaction answer")
    recovery = world.out["injected"][1]
    assert recovery["request_type"] == "post_compaction"
    assert recovery["checkpoint_id"] == "h1"
    assert recovery["tokens"] <= 90
    assert 'decision: "team decided retry stripe webhooks"' in recovery["context"]


async def test_invalid_and_unknown_events_are_counted_and_skipped(world: Harness) -> None:
    proc = world.processor()
    await proc.start()
    await world.publish("agent.context.compaction.compaction_starting.l", None, raw=b"\xff{not")
    await world.publish("agent.context.compaction.compaction_starting.l", [1, 2])
    await world.publish("agent.context.compaction.compaction_starting.l", {"loop_id": "l"})
    await world.compaction("compaction_starting", "l", "no-loop", loop_id=None)
    await world.compaction("compaction_starting", "l", "bad-iter", iteration="seven")
    await world.compaction("compaction_exploded", "l", "u1")
    await world.publish("memory.hydrate.request.l", {"id": "u2", "type": "x", "loop_id": "l"})
    await world.publish(
        "memory.hydrate.request.l", {"id": "i8", "type": "pre_task", "loop_id": "l"}
    )
    await world.compaction("compaction_starting", "l", "garbage", content="GARBAGE")
    await world.compaction(
        "compaction_starting", "l", "half", content="HALFBAD " + _facts(("a", "b", "c"))
    )
    await world.compaction("gc_complete", "l", "gc1")
    await world.compaction("compaction_starting", "l", "good", content=_facts(("k", "v", "w")))
    await wait_for(lambda: proc.stats.settled == 12, what="every event")
    stats = proc.stats
    assert stats.invalid == 6, stats
    assert stats.unknown == 2, stats
    assert stats.bad_model_output == 2, stats
    assert stats.gc_complete == 1, stats
    assert stats.processed == 4, stats
    assert stats.errors == 0, stats
    assert proc.running
    added = {m["event_id"]: m["added"] for m in world.out["mutation"]}
    assert added == {"garbage": 0, "half": 1, "good": 1}
    info = await world.js.consumer_info(world.stream, proc.config.compaction_consumer)
    assert info.num_ack_pending == 0
    assert info.num_pending == 0


async def test_same_event_twice_is_applied_once(world: Harness) -> None:
    proc = world.processor()
    await proc.start()
    for _ in range(2):
        await world.compaction("compaction_starting", "l", "dup", content=_facts(("a", "b", "c")))
    await wait_for(lambda: proc.stats.settled == 2, what="both copies")
    assert proc.stats.duplicates == 1
    assert world.model.calls == 1
    assert [m["event_id"] for m in world.out["mutation"]] == ["dup"]


async def test_stop_drains_and_restart_resumes_exactly_once(world: Harness) -> None:
    world.model.delay = 0.03
    total = 24
    for i in range(total):
        await world.compaction(
            "compaction_starting", f"loop-{i % 3}", f"ev-{i}", content=_facts((f"s{i}", "p", "o"))
        )
    first = world.processor()
    await first.start()
    await wait_for(lambda: first.stats.processed >= 5, what="a few processed")
    drained = await first.stop()
    assert drained
    assert first.stats.in_flight == 0
    done_first = first.stats.processed
    assert 5 <= done_first < total
    info = await world.js.consumer_info(world.stream, first.config.compaction_consumer)
    assert info.num_ack_pending == 0  # everything fetched was processed and acknowledged
    assert info.num_pending == total - done_first

    second = world.processor()
    await second.start()
    await wait_for(
        lambda: first.stats.processed + second.stats.processed == total,
        timeout=20,
        what="the rest after the restart",
    )
    assert second.stats.duplicates == 0
    per_event = Counter(m["event_id"] for m in world.out["mutation"])
    assert set(per_event) == {f"ev-{i}" for i in range(total)}
    assert set(per_event.values()) == {1}
    stored = await world.triples.query("team", limit=1000)
    assert sorted(t.subject for t in stored) == sorted(f"s{i}" for i in range(total))


class _CrashBeforeAck(GraphProcessor):
    """Processes and records the event, then 'crashes' before acknowledging it."""

    async def _ack(self, msg: Msg) -> None:
        return None


async def test_redelivery_after_a_crash_is_not_applied_twice(world: Harness) -> None:
    crashing = _CrashBeforeAck(world.graph, world.config())
    world.processors.append(crashing)
    await crashing.start()
    await world.compaction("compaction_starting", "l", "once", content=_facts(("x", "y", "z")))
    await wait_for(lambda: crashing.stats.processed == 1, what="the first delivery")
    await crashing.stop()

    again = world.processor()
    await again.start()
    await wait_for(lambda: again.stats.duplicates == 1, timeout=10, what="the redelivery")
    assert again.stats.processed == 0
    assert world.model.calls == 1
    assert len(world.out["mutation"]) == 1


async def test_stop_timeout_leaves_the_message_for_the_next_processor(world: Harness) -> None:
    world.model.delay = 5.0
    slow = world.processor()
    await slow.start()
    await world.compaction("compaction_starting", "l", "slow", content=_facts(("q", "r", "s")))
    await wait_for(lambda: world.model.calls == 1, what="the slow call")
    drained = await slow.stop(timeout=0.2)
    assert not drained
    assert world.out["mutation"] == []

    world.model.delay = 0.0
    fast = world.processor()
    await fast.start()
    await wait_for(lambda: fast.stats.processed == 1, timeout=10, what="the redelivery")
    assert [m["event_id"] for m in world.out["mutation"]] == ["slow"]


async def test_failing_stores_do_not_fail_the_loop(world: Harness) -> None:
    await world.triples.close()  # every triple store and cache call now fails
    await world.cache.close()
    proc = world.processor()
    await proc.start()
    await world.compaction("compaction_complete", "l", "broken")
    await world.compaction("compaction_starting", "l", "fine", content=_facts(("a", "b", "c")))
    await wait_for(lambda: proc.stats.processed == 2, timeout=10, what="both events")
    [injected] = world.out["injected"]  # fail-open: the failure is reported, not raised
    assert injected["failures"]
    assert injected["context"] == ""
    [mutation] = world.out["mutation"]
    assert mutation["added"] == 0
    assert mutation["failures"]
    assert proc.stats.errors == 0


class _Exploding:
    """A GraphHandler whose post-compaction hydration always raises."""

    def __init__(self, inner: GraphMemory) -> None:
        self.inner = inner
        self.calls = 0

    async def extract(self, *args: Any, **kwargs: Any) -> Any:
        return await self.inner.extract(*args, **kwargs)

    async def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        return await self.inner.checkpoint(*args, **kwargs)

    async def hydrate_pre_task(self, owner: str, loop: str, task: str) -> Any:
        return await self.inner.hydrate_pre_task(owner, loop, task)

    async def hydrate_post_compaction(self, owner: str, loop: str) -> Any:
        self.calls += 1
        raise RuntimeError("boom")


async def test_processing_error_is_retried_then_dropped(world: Harness) -> None:
    handler = _Exploding(world.graph)
    proc = GraphProcessor(handler, world.config())
    world.processors.append(proc)
    await proc.start()
    await world.compaction("compaction_complete", "l", "explodes")
    await world.compaction("compaction_starting", "l", "after", content=_facts(("a", "b", "c")))
    await wait_for(lambda: proc.stats.dropped == 1, timeout=15, what="the give-up")
    await wait_for(lambda: proc.stats.processed == 1, timeout=5, what="the next event")
    assert handler.calls == 3  # max_deliver
    assert proc.stats.errors == 3
    assert proc.running
    assert [m["event_id"] for m in world.out["mutation"]] == ["after"]


async def test_config_errors_name_the_field() -> None:
    from agent_memory.domain.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="unknown configuration keys"):
        ProcessorConfig.from_mapping({"stream": "X"})
    with pytest.raises(ConfigurationError, match="batch_size"):
        ProcessorConfig.from_mapping({"processor": {"batch_size": 0}})
    with pytest.raises(ConfigurationError, match="consumer_suffix"):
        ProcessorConfig.from_mapping({"consumer_suffix": "a.b"})
    with pytest.raises(ConfigurationError, match="max_recovery_tokens"):
        GraphSettings.from_mapping({"hydration": {"post_compaction": {"max_recovery_tokens": -1}}})
    with pytest.raises(ConfigurationError, match=r"extraction\.llm_assisted: unknown keys"):
        GraphSettings.from_mapping({"extraction": {"llm_assisted": {"max_token": 5}}})
    assert ProcessorConfig.from_mapping({}).stream_name == "AGENT"


def test_subject_token() -> None:
    assert subject_token("loop-1_a") == "loop-1_a"
    assert subject_token("loop.1") == "loop~2e1"
    assert subject_token("a b>*") == "a~20b~3e~2a"
    assert subject_token("é") == "~c3~a9"
    assert subject_token("a.b") != subject_token("a~2eb")  # '~' itself is escaped too
    assert subject_token("~") == "~7e"


async def test_asyncio_cancel_safety_of_stop_without_start() -> None:
    proc = GraphProcessor(
        GraphMemory(InMemoryTripleStore(), InMemoryCache(), None, clock=FixedClock())
    )
    assert await proc.stop() is True
    assert not proc.running
    await asyncio.sleep(0)


async def test_slow_processing_is_not_redelivered_to_another_processor(world: Harness) -> None:
    world.model.delay = 1.6  # longer than ack_wait (1 s): in-progress beats keep it ours
    first, second = world.processor(), world.processor()
    await first.start()
    await second.start()
    await world.compaction("compaction_starting", "l", "slow-1", content=_facts(("m", "n", "o")))
    await wait_for(
        lambda: first.stats.settled + second.stats.settled >= 1, timeout=10, what="processing"
    )
    await asyncio.sleep(1.2)  # a redelivery, if any, would arrive by now
    assert world.model.calls == 1
    assert first.stats.processed + second.stats.processed == 1
    assert first.stats.duplicates + second.stats.duplicates == 0

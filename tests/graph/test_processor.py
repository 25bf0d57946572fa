"""The graph memory processor end to end on a real nats-server with JetStream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from agent_memory.adapters.memory import InMemoryCache, InMemoryTripleStore
from agent_memory.adapters.nats import Delivery, subject_token
from agent_memory.domain.errors import ConfigurationError
from agent_memory.domain.views import count_tokens
from agent_memory.entrypoints.processor import GraphProcessor, ProcessorConfig
from agent_memory.services.graph_memory import GraphMemory
from graph import design_examples as design
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
    "extraction": {"llm_assisted": {"max_tokens": 321, "trigger_context_threshold": 0.7}},
    "hydration": {
        "pre_task": {"max_context_tokens": 120},
        "post_compaction": {"max_recovery_tokens": 90},
    },
    "checkpoint": {"retention_days": 2},
}
#: The keys of each output, exactly (ours are inside `agent_memory`).
INJECTED_KEYS = {"loop_id", "context", "token_count", "source", "timestamp", "agent_memory"}
MUTATION_KEYS = {"operation", "loop_id", "triples", "timestamp", "agent_memory"}
CHECKPOINT_KEYS = {"loop_id", "checkpoint_id", "bucket", "timestamp", "agent_memory"}


class Harness:
    """One test's processor world: stream, consumers and collectors on the server."""

    def __init__(self, url: str, nc: Client, model: RuleModel) -> None:
        self.url = url
        self.nc = nc
        self.js = nc.jetstream()
        self.suffix = uuid.uuid4().hex[:8]
        self.stream = f"GRAPHTEST-{self.suffix}"  # never a real deployment's stream
        self.model = model
        self.triples = InMemoryTripleStore()
        self.cache = InMemoryCache()
        self.clock = FixedClock()
        self.settings = self.config().graph
        self.graph = GraphMemory(
            self.triples, self.cache, model, clock=self.clock, settings=self.settings
        )
        self.out: dict[str, list[dict[str, Any]]] = {"mutation": [], "injected": [], "cp": []}
        self.processors: list[GraphProcessor] = []
        self.buckets: list[str] = []

    def config(self, doc: dict[str, Any] | None = None, **overrides: Any) -> ProcessorConfig:
        return ProcessorConfig.from_mapping(
            CONFIG_DOC if doc is None else doc,
            nats_url=self.url,
            consumer_name_suffix=self.suffix,
            stream_name=self.stream,
            **overrides,
        )

    def processor(
        self, graph: GraphMemory | None = None, doc: dict[str, Any] | None = None
    ) -> GraphProcessor:
        proc = GraphProcessor(graph or self.graph, self.config(doc), clock=self.clock)
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

    async def compaction(self, kind: str, loop: str, event_id: str | None, **fields: Any) -> None:
        body = {"type": kind, "loop_id": loop, **fields}
        if event_id is not None:
            body["id"] = event_id
        await self.publish(f"agent.context.compaction.{kind}.{subject_token(loop)}", body)

    async def cleanup(self) -> None:
        for proc in self.processors:
            await proc.stop(timeout=5)
        names = [self.stream, f"KV_{self.stream}_agent_memory_done-{self.suffix}"]
        for name in names + [f"KV_{b}" for b in self.buckets]:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await self.js.delete_stream(name)


@pytest.fixture
async def world(nats_url: str) -> AsyncIterator[Harness]:
    nc = await nats.connect(nats_url)
    harness = Harness(nats_url, nc, RuleModel())
    # The processor creates the stream; make it now so the test can publish first.
    await harness.js.add_stream(
        name=harness.stream,
        subjects=["agent.context.>", "agent.complete.>", "memory.>", "graph.mutation.>"],
    )
    await harness.collect()
    try:
        yield harness
    finally:
        await harness.cleanup()
        await nc.drain()


def _facts(*triples: tuple[str, str, str]) -> str:
    return "\n".join(f"FACT: {s} | {p} | {o}" for s, p, o in triples)


def _key(out: dict[str, Any]) -> str:
    key = out["agent_memory"]["event_key"]
    assert isinstance(key, str)
    return key


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
    assert set(mutation) == MUTATION_KEYS
    assert mutation["operation"] == "add_triples"
    assert mutation["loop_id"] == "loop.1"
    assert mutation["timestamp"] == int(world.clock.now().timestamp())
    assert mutation["agent_memory"]["version"] == 1
    assert mutation["agent_memory"]["added"] == 4
    assert {"subject": "service", "predicate": "uses", "object": "postgres"} in mutation["triples"]
    assert world.model.max_tokens_seen == [321]
    stored = await world.triples.query("team", loop="loop.1")
    assert len(stored) == 4
    assert {t.source for t in stored} == {"e1"}
    [checkpoint] = world.out["cp"]
    assert set(checkpoint) == CHECKPOINT_KEYS
    assert checkpoint["checkpoint_id"] == "e1"
    assert checkpoint["bucket"] == ""  # on the cache port: no bucket configured
    assert checkpoint["agent_memory"]["decisions"] == ["agent decided use pgvector for search"]
    assert checkpoint["agent_memory"]["files"] == ["src/app/db.py"]

    await world.compaction("compaction_complete", "loop.1", "e2")
    await wait_for(lambda: world.out["injected"], what="injected context")
    [injected] = world.out["injected"]
    assert set(injected) == INJECTED_KEYS
    assert injected["source"] == "post_compaction"
    assert injected["agent_memory"]["checkpoint_id"] == "e1"
    assert injected["token_count"] <= 90
    assert count_tokens(injected["context"]) <= 90
    assert injected["agent_memory"]["omitted"] > 0  # the long summary and graph do not fit
    assert "pgvector" in injected["context"]
    assert proc.stats.processed == 2


async def test_the_designs_events_verbatim(world: Harness) -> None:
    """The design's example events, byte for byte, on the design's subjects."""
    await world.triples.add([])
    proc = world.processor()
    await proc.start()
    replies: list[dict[str, Any]] = []
    await world.publish(
        "agent.context.compaction.loop_123", None, raw=design.COMPACTION_STARTING.encode()
    )
    await wait_for(lambda: world.out["cp"], what="the checkpoint before compaction")
    [cp] = world.out["cp"]
    assert set(cp) == CHECKPOINT_KEYS
    assert cp["loop_id"] == "loop_123"
    assert isinstance(cp["checkpoint_id"], str)
    assert cp["checkpoint_id"]
    assert cp["bucket"] == ""
    assert cp["timestamp"] == int(world.clock.now().timestamp())
    assert cp["agent_memory"]["iteration"] == 5
    assert cp["agent_memory"]["final"] is False
    assert world.out["mutation"] == []  # the example carries no context to extract from

    await world.publish(
        "agent.context.compaction.loop_123", None, raw=design.COMPACTION_COMPLETE.encode()
    )
    await wait_for(lambda: world.out["injected"], what="post-compaction context")
    [post] = world.out["injected"]
    assert set(post) == INJECTED_KEYS
    assert post["loop_id"] == "loop_123"
    assert post["source"] == "post_compaction"
    assert post["token_count"] == count_tokens(post["context"]) <= 90
    assert post["agent_memory"]["checkpoint_id"] == cp["checkpoint_id"]

    await world.publish("agent.context.compaction.loop_123", None, raw=design.GC_COMPLETE.encode())
    await world.publish(
        "memory.hydrate.request.loop_123", None, raw=design.HYDRATE_PRE_TASK.encode()
    )
    await world.publish(
        "memory.hydrate.request.loop_123", None, raw=design.HYDRATE_POST_COMPACTION.encode()
    )
    await wait_for(lambda: proc.stats.settled == 5, what="every example")
    assert proc.stats.processed == 5, proc.stats
    assert proc.stats.gc_complete == 1
    assert [i["source"] for i in world.out["injected"]] == [
        "post_compaction",
        "pre_task",
        "post_compaction",
    ]
    for injected in world.out["injected"]:
        assert set(injected) == INJECTED_KEYS
        assert injected["loop_id"] == "loop_123"
    assert replies == []


def _documented_event(name: str) -> str:
    """The JSON example under `<!-- example: name -->` in docs/graph.md, verbatim."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "graph.md").read_text()
    found = re.search(rf"<!-- example: {name} -->\n```json\n(.*?)\n```", doc, re.DOTALL)
    assert found, f"docs/graph.md has no example {name}"
    return found.group(1)


@attrs.define
class _Recording:
    """A model that records its prompts and answers with fixed triples."""

    answer: list[dict[str, str]]
    prompts: list[str] = attrs.field(factory=list)
    fingerprint: str = "recording"
    stable: bool = True

    async def complete(
        self, prompt: str, *, max_tokens: int, timeout: float, system: str | None = None
    ) -> str:
        self.prompts.append(prompt)
        return json.dumps(self.answer)


async def test_the_documented_producer_event_yields_facts(world: Harness) -> None:
    """The design's `compaction_starting` carries no context, so it yields no
    facts (counted `no_content`); the documented event, with `content`, does."""
    triple = {"subject": "auth", "predicate": "decided", "object": "OAuth with PKCE"}
    model = _Recording([triple])
    graph = GraphMemory(world.triples, world.cache, model, clock=world.clock)
    proc = world.processor(graph)
    await proc.start()
    subject = "agent.context.compaction.loop_123"
    await world.publish(subject, None, raw=design.COMPACTION_STARTING.encode())
    await wait_for(lambda: proc.stats.settled == 1, what="the design's event")
    assert proc.stats.no_content == 1, proc.stats
    assert model.prompts == []
    text = _documented_event("compaction_starting_with_content")
    event = json.loads(text)
    assert {k: event[k] for k in json.loads(design.COMPACTION_STARTING)} == json.loads(
        design.COMPACTION_STARTING
    )  # the design's fields, unchanged, plus ours
    await world.publish(subject, None, raw=text.encode())
    await wait_for(lambda: world.out["mutation"], what="the facts of the documented event")
    [mutation] = world.out["mutation"]
    assert mutation["loop_id"] == "loop_123"
    assert mutation["triples"] == [triple]
    [prompt] = model.prompts
    assert event["content"].splitlines()[0] in prompt
    assert proc.stats.no_content == 1
    assert len(world.out["cp"]) == 2


async def test_compaction_extracts_whatever_the_triggers_say(world: Harness) -> None:
    """Iteration 7 at 0.65 utilisation (neither trigger): the facts are still
    extracted before the compaction; between compactions the triggers decide."""
    doc = {**CONFIG_DOC, "extraction": {"llm_assisted": {}}}  # interval 5, threshold 0.8
    proc = world.processor(doc=doc)
    await proc.start()
    before = json.loads(design.COMPACTION_STARTING)
    before.update(iteration=7, utilization=0.65, summary=_facts(("auth", "uses", "oauth")))
    await world.publish("agent.context.compaction.loop_123", before)
    await wait_for(lambda: world.out["mutation"], what="the pre-compaction facts")
    [mutation] = world.out["mutation"]
    assert mutation["triples"] == [{"subject": "auth", "predicate": "uses", "object": "oauth"}]
    gc = json.loads(design.GC_COMPLETE)
    gc.update(iteration=7, utilization=0.65, content=_facts(("gc", "at", "seven")))
    await world.publish("agent.context.compaction.loop_123", gc)
    gc.update(iteration=10, content=_facts(("gc", "at", "ten")))
    await world.publish("agent.context.compaction.loop_123", gc)
    await wait_for(lambda: proc.stats.settled == 3, what="both gc events")
    assert [m["triples"][0]["object"] for m in world.out["mutation"]] == ["oauth", "ten"]
    assert world.model.calls == 2


async def test_hydrate_request_answered(world: Harness) -> None:
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
            "task_description": "Fix the billing webhooks from stripe",
            "reply_to": "test.reply.h2",
        },
    )
    await wait_for(lambda: replies and world.out["injected"], what="the hydrate answer")
    [answer] = replies
    assert answer == world.out["injected"][0]
    assert answer["source"] == "pre_task"
    assert answer["loop_id"] == "new-loop"
    assert answer["token_count"] <= 120
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
    assert recovery["source"] == "post_compaction"
    assert recovery["agent_memory"]["checkpoint_id"] == "h1"
    assert recovery["token_count"] <= 90
    assert 'decision: "team decided retry stripe webhooks"' in recovery["context"]


async def test_invalid_and_unknown_events_are_counted_and_skipped(world: Harness) -> None:
    proc = world.processor()
    await proc.start()
    await world.publish("agent.context.compaction.compaction_starting.l", None, raw=b"\xff{not")
    await world.publish("agent.context.compaction.compaction_starting.l", [1, 2])
    await world.publish("agent.context.compaction.compaction_starting.l", {"loop_id": "l"})
    await world.compaction("compaction_starting", "l", "no-loop", loop_id=None)
    await world.compaction("compaction_starting", "l", "bad-iter", iteration="seven")
    await world.compaction("compaction_starting", "l", "bad-util", utilization=1.5)
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
    await wait_for(lambda: proc.stats.settled == 13, what="every event")
    stats = proc.stats
    assert stats.invalid == 6, stats
    assert stats.unknown == 2, stats
    assert stats.bad_model_output == 2, stats
    assert stats.gc_complete == 1, stats
    assert stats.processed == 5, stats  # {"loop_id": "l"}: no id, type from the subject
    assert stats.errors == 0, stats
    assert proc.running
    added = {_key(m): m["agent_memory"]["added"] for m in world.out["mutation"]}
    assert added == {"id:half": 1, "id:good": 1}  # no triples found: nothing published
    info = await world.js.consumer_info(world.stream, proc.config.compaction_consumer)
    assert info.num_ack_pending == 0
    assert info.num_pending == 0


class _Unreachable:
    """A model whose every call fails (the endpoint is down)."""

    fingerprint = "unreachable"
    stable = True

    async def complete(
        self, prompt: str, *, max_tokens: int, timeout: float, system: str | None = None
    ) -> str:
        raise ConnectionError("model endpoint refused the connection")


async def test_extraction_without_a_model_or_with_a_failing_one_says_so(world: Harness) -> None:
    """No model configured counts `no_model`, a failing call `model_errors`;
    neither is the model's output being bad."""
    content = _facts(("auth", "uses", "oauth"))
    no_model = GraphMemory(world.triples, world.cache, None, clock=world.clock)
    failing = GraphMemory(world.triples, world.cache, _Unreachable(), clock=world.clock)
    for graph, loop in ((no_model, "none"), (failing, "down")):
        proc = world.processor(graph)
        await proc.start()
        await world.compaction("compaction_starting", loop, f"{loop}-1", content=content)
        await wait_for(lambda p=proc: p.stats.settled == 1, what="the event")
        await proc.stop(timeout=5)
    first, second = world.processors
    assert (first.stats.no_model, first.stats.model_errors) == (1, 0), first.stats
    assert (second.stats.no_model, second.stats.model_errors) == (0, 1), second.stats
    assert first.stats.bad_model_output == second.stats.bad_model_output == 0
    assert world.out["mutation"] == []
    assert len(world.out["cp"]) == 2  # the checkpoint is still taken


async def test_same_event_twice_is_applied_once(world: Harness) -> None:
    proc = world.processor()
    await proc.start()
    for _ in range(2):
        await world.compaction("compaction_starting", "l", "dup", content=_facts(("a", "b", "c")))
    await wait_for(lambda: proc.stats.settled == 2, what="both copies")
    assert proc.stats.duplicates == 1
    assert world.model.calls == 1
    assert [_key(m) for m in world.out["mutation"]] == ["id:dup"]


async def test_events_without_id_get_a_key_from_their_stream_position(world: Harness) -> None:
    proc = world.processor()
    await proc.start()
    for _ in range(2):  # the same bytes twice: two events (a loop may ask twice)
        await world.publish(
            "memory.hydrate.request.loop_123", None, raw=design.HYDRATE_POST_COMPACTION.encode()
        )
    await wait_for(lambda: len(world.out["injected"]) == 2, what="both answers")
    first, second = (_key(i) for i in world.out["injected"])
    assert first.startswith(f"seq:{world.stream}:")
    assert first != second
    assert proc.stats.processed == 2


async def test_stop_drains_and_restart_resumes_exactly_once(world: Harness) -> None:
    """Events without ids (the design's shape), a stop mid-stream, a restart."""
    world.model.delay = 0.03
    total = 24
    for i in range(total):
        await world.compaction(
            "compaction_starting",
            f"loop-{i % 3}",
            None,
            iteration=i,
            summary=_facts((f"s{i}", "p", "o")),
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
    per_event = Counter(_key(m) for m in world.out["mutation"])
    assert len(per_event) == total
    assert set(per_event.values()) == {1}
    assert Counter(_key(c) for c in world.out["cp"]) == per_event
    stored = await world.triples.query("team", limit=1000)
    assert sorted(t.subject for t in stored) == sorted(f"s{i}" for i in range(total))
    assert world.model.calls == total


class _CrashBeforeAck(GraphProcessor):
    """Processes and records the event, then 'crashes' before acknowledging it."""

    async def _ack(self, item: Delivery) -> None:
        return None


@pytest.mark.parametrize("event_id", ["once", None])
async def test_redelivery_after_a_crash_is_not_applied_twice(
    world: Harness, event_id: str | None
) -> None:
    crashing = _CrashBeforeAck(world.graph, world.config())
    world.processors.append(crashing)
    await crashing.start()
    await world.compaction("compaction_starting", "l", event_id, content=_facts(("x", "y", "z")))
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
    assert [_key(m) for m in world.out["mutation"]] == ["id:slow"]


async def test_failing_stores_do_not_fail_the_loop(world: Harness) -> None:
    await world.triples.close()  # every triple store and cache call now fails
    await world.cache.close()
    proc = world.processor()
    await proc.start()
    await world.compaction("compaction_complete", "l", "broken")
    await world.compaction("compaction_starting", "l", "fine", content=_facts(("a", "b", "c")))
    await wait_for(lambda: proc.stats.processed == 2, timeout=10, what="both events")
    [injected] = world.out["injected"]  # fail-open: the failure is reported, not raised
    assert injected["agent_memory"]["failures"]
    assert injected["context"] == ""
    [mutation] = world.out["mutation"]
    assert mutation["agent_memory"]["added"] == 0
    assert mutation["agent_memory"]["failures"]
    assert world.out["cp"] == []  # the checkpoint could not be saved
    assert proc.stats.errors == 0


class _Exploding(GraphMemory):
    """Graph memory whose post-compaction hydration always raises."""

    calls = 0

    async def hydrate_post_compaction(self, owner: str, loop: str) -> Any:
        type(self).calls += 1
        raise RuntimeError("boom")


async def test_processing_error_is_retried_then_dropped(world: Harness) -> None:
    graph = _Exploding(
        world.triples, world.cache, world.model, clock=world.clock, settings=world.settings
    )
    _Exploding.calls = 0
    proc = world.processor(graph)
    await proc.start()
    await world.compaction("compaction_complete", "l", "explodes")
    await world.compaction("compaction_starting", "l", "after", content=_facts(("a", "b", "c")))
    await wait_for(lambda: proc.stats.dropped == 1, timeout=15, what="the give-up")
    await wait_for(lambda: proc.stats.processed == 1, timeout=5, what="the next event")
    assert _Exploding.calls == 3  # max_deliver
    assert proc.stats.errors == 3
    assert proc.running
    assert [_key(m) for m in world.out["mutation"]] == ["id:after"]


async def test_loop_end_takes_the_final_checkpoint(world: Harness) -> None:
    proc = world.processor()
    await proc.start()
    await world.compaction(
        "compaction_starting", "loop_123", None, summary=_facts(("a", "decided", "b"))
    )
    await wait_for(lambda: world.out["cp"], what="the compaction's checkpoint")
    await world.publish("agent.complete.loop_123", {"loop_id": "loop_123", "outcome": "success"})
    await wait_for(lambda: len(world.out["cp"]) == 2, what="the final checkpoint")
    final = world.out["cp"][1]
    assert set(final) == CHECKPOINT_KEYS
    assert final["loop_id"] == "loop_123"
    assert final["agent_memory"]["final"] is True
    assert final["agent_memory"]["decisions"] == ["a decided b"]
    assert world.out["cp"][0]["agent_memory"]["final"] is False


async def test_checkpoints_in_the_named_bucket(world: Harness) -> None:
    bucket = f"CP_{world.suffix}"
    world.buckets.append(bucket)
    doc = {**CONFIG_DOC, "checkpoint": {"storage_bucket": bucket, "retention_days": 1}}
    proc = world.processor(doc=doc)
    await proc.start()
    await world.compaction("compaction_starting", "l", "c1", summary="kept in the bucket")
    await wait_for(lambda: world.out["cp"], what="the checkpoint")
    assert world.out["cp"][0]["bucket"] == bucket
    assert await world.cache.get("agent-memory/graph-checkpoints", "anything") is None
    kv = await world.js.key_value(bucket)
    assert len(await kv.keys()) == 2  # <loop>/c1 and <loop>/latest
    status = await kv.status()
    assert status.ttl == pytest.approx(86_400)
    await world.compaction("compaction_complete", "l", "c2")
    await wait_for(lambda: world.out["injected"], what="the recovery")
    assert "kept in the bucket" in world.out["injected"][0]["context"]
    assert world.out["injected"][0]["agent_memory"]["checkpoint_id"] == "c1"


async def test_entity_state_changes_rehydrate_the_loops_that_mention_them(
    world: Harness,
) -> None:
    bucket = f"ENTITY_STATES_{world.suffix}"
    world.buckets.append(bucket)
    doc = {**CONFIG_DOC, "entity_states": {"bucket": bucket}}
    proc = world.processor(doc=doc)
    await proc.start()  # the bucket does not exist yet: the watch waits for it
    await world.compaction(
        "compaction_starting", "loop-a", "a1", summary=_facts(("billing", "uses", "stripe"))
    )
    await world.compaction(
        "compaction_starting", "loop-b", "b1", summary=_facts(("search", "uses", "pg"))
    )
    await wait_for(lambda: len(world.out["cp"]) == 2, what="both loops' checkpoints")
    kv = await world.js.create_key_value(bucket=bucket)
    await kv.put("stripe", json.dumps({"id": "stripe", "triples": []}).encode())
    await kv.put("unrelated", b"{}")
    await wait_for(lambda: world.out["injected"], timeout=10, what="the reactive hydration")
    await asyncio.sleep(0.5)
    [update] = world.out["injected"]
    assert set(update) == INJECTED_KEYS
    assert update["source"] == "entity_update"
    assert update["loop_id"] == "loop-a"
    assert '"stripe"' in update["context"]
    assert proc.stats.entity_updates == 1
    await proc.stop()

    again = world.processor(doc=doc)  # the watch replays the latest values: skipped
    await again.start()
    await world.publish(
        "memory.hydrate.request.loop-a", {"type": "post_compaction", "loop_id": "loop-a"}
    )
    await wait_for(lambda: len(world.out["injected"]) == 2, timeout=10, what="the request")
    await kv.put("stripe", b'{"id": "stripe", "v": 2}')
    await wait_for(lambda: len(world.out["injected"]) == 3, timeout=10, what="the new revision")
    await asyncio.sleep(0.3)
    assert [i["source"] for i in world.out["injected"]] == [
        "entity_update",
        "post_compaction",
        "entity_update",
    ]
    assert again.stats.entity_updates == 1


async def test_config_errors_name_the_path() -> None:
    with pytest.raises(ConfigurationError, match=r"^stream: unknown key$"):
        ProcessorConfig.from_mapping({"stream": "X"})
    with pytest.raises(ConfigurationError, match=r"processor\.batch_size: a positive integer"):
        ProcessorConfig.from_mapping({"processor": {"batch_size": 0}})
    with pytest.raises(ConfigurationError, match="consumer_name_suffix"):
        ProcessorConfig.from_mapping({"consumer_name_suffix": "a.b"})
    with pytest.raises(
        ConfigurationError, match=r"hydration\.post_compaction\.max_recovery_tokens"
    ):
        ProcessorConfig.from_mapping(
            {"hydration": {"post_compaction": {"max_recovery_tokens": -1}}}
        )
    with pytest.raises(
        ConfigurationError, match=r"extraction\.llm_assisted\.max_token: unknown key"
    ):
        ProcessorConfig.from_mapping({"extraction": {"llm_assisted": {"max_token": 5}}})
    with pytest.raises(
        ConfigurationError,
        match=r"extraction\.llm_assisted\.every_n_iterations: unknown key "
        r"\(now 'trigger_iteration_interval'\)",
    ):
        ProcessorConfig.from_mapping({"extraction": {"llm_assisted": {"every_n_iterations": 5}}})
    with pytest.raises(
        ConfigurationError, match=r"hydration\.pre_task\.include_files: true or false"
    ):
        ProcessorConfig.from_mapping({"hydration": {"pre_task": {"include_files": 1}}})
    with pytest.raises(
        ConfigurationError, match=r"checkpoint\.retention_days: a number is required"
    ):
        ProcessorConfig.from_mapping({"checkpoint": {"retention_days": "7"}})
    with pytest.raises(ConfigurationError, match=r"checkpoint\.storage_bucket"):
        ProcessorConfig.from_mapping({"checkpoint": {"storage_bucket": "a.b"}})
    with pytest.raises(ConfigurationError, match=r"^hydration: an object is required"):
        ProcessorConfig.from_mapping({"hydration": []})
    assert ProcessorConfig.from_mapping({}).stream_name == "AGENT"


def test_the_designs_configuration_is_read_unchanged() -> None:
    config = ProcessorConfig.from_mapping(json.loads(design.CONFIG))
    assert config.stream_name == "AGENT"
    assert config.extraction.llm_assisted.model == "fast"
    assert config.graph.extraction.max_tokens == 1000
    assert config.graph.pre_task.include_decisions
    assert config.graph.post_compaction.reconstruct_from_checkpoint
    assert config.graph.post_compaction.max_recovery_tokens == 1500
    assert config.checkpoint.storage_bucket == "AGENT_MEMORY_CHECKPOINTS"
    assert config.compaction_consumer == "agent-memory-compaction"


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

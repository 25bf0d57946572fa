"""`agent-memory processor` as a real process on a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import nats
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from graph import design_examples as design
from graph.helpers import wait_for


def _fake_openai() -> Any:
    """The scripted OpenAI-compatible server of tests/openai (not a package)."""
    module = sys.modules.get("fake_openai_server")
    if module is None:
        path = Path(__file__).parents[1] / "openai" / "fake_openai_server.py"
        spec = importlib.util.spec_from_file_location("fake_openai_server", path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["fake_openai_server"] = module
        spec.loader.exec_module(module)
    return module


async def _start(
    nats_url: str, config: Path, tmp_path: Path, extra_env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    env.update(extra_env or {})
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent_memory.entrypoints.cli",
        "processor",
        "--nats",
        nats_url,
        "--config",
        str(config),
        "--url",
        f"sqlite:///{tmp_path / 'memory.db'}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


async def _wait_for_consumer(
    js: JetStreamContext, proc: asyncio.subprocess.Process, stream: str, consumer: str
) -> None:
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.consumer_info(stream, consumer)
            return
        assert proc.returncode is None, await proc.stderr.read() if proc.stderr else b""
        assert asyncio.get_running_loop().time() < deadline, "the processor never started"
        await asyncio.sleep(0.05)


async def _stop(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0, stderr.decode()
    stats = json.loads(stdout.decode().strip().splitlines()[-1])
    assert isinstance(stats, dict)
    return stats


async def test_processor_command_runs_and_stops_cleanly(nats_url: str, tmp_path: Path) -> None:
    config = tmp_path / "processor.json"
    config.write_text(
        json.dumps(
            {
                "stream_name": "CLITEST",
                "consumer_name_suffix": "cli",
                "owner": "cli-owner",
                "processor": {"fetch_timeout_seconds": 0.2},
                "hydration": {"post_compaction": {"max_recovery_tokens": 50}},
            }
        )
    )
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    injected: list[dict[str, Any]] = []

    async def sink(msg: Msg) -> None:
        injected.append(json.loads(msg.data))

    await nc.subscribe("agent.context.injected.>", cb=sink)
    proc = await _start(nats_url, config, tmp_path)
    try:
        await _wait_for_consumer(js, proc, "CLITEST", "agent-memory-compaction-cli")
        await js.publish(
            "agent.context.compaction.compaction_complete.l1",
            json.dumps({"id": "c1", "type": "compaction_complete", "loop_id": "l1"}).encode(),
        )
        await wait_for(lambda: injected, timeout=15, what="the injected context")
        assert injected[0]["agent_memory"]["owner"] == "cli-owner"
        assert injected[0]["agent_memory"]["budget_tokens"] == 50
        stats = await _stop(proc)
        assert stats["processed"] == 1
        assert stats["in_flight"] == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for name in ("CLITEST", "KV_CLITEST_agent_memory_done-cli"):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(name)
        await nc.drain()


async def test_processor_starts_from_the_designs_configuration(
    nats_url: str, tmp_path: Path
) -> None:
    """The design's configuration document, unchanged; its events, unchanged."""
    config = tmp_path / "design.json"
    config.write_text(design.CONFIG)
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    out: dict[str, list[dict[str, Any]]] = {"cp": [], "injected": []}

    def sink(into: list[dict[str, Any]]) -> Any:
        async def cb(msg: Msg) -> None:
            into.append(json.loads(msg.data))

        return cb

    await nc.subscribe("memory.checkpoint.created.>", cb=sink(out["cp"]))
    await nc.subscribe("agent.context.injected.>", cb=sink(out["injected"]))
    proc = await _start(nats_url, config, tmp_path)
    try:
        await _wait_for_consumer(js, proc, "AGENT", "agent-memory-compaction")
        subject = "agent.context.compaction.loop_123"
        await js.publish(subject, design.COMPACTION_STARTING.encode())
        await wait_for(lambda: out["cp"], timeout=15, what="the checkpoint")
        await js.publish(subject, design.COMPACTION_COMPLETE.encode())
        await wait_for(lambda: out["injected"], timeout=15, what="the recovered context")
        [cp] = out["cp"]
        assert cp["loop_id"] == "loop_123"
        assert cp["bucket"] == "AGENT_MEMORY_CHECKPOINTS"
        kv = await js.key_value("AGENT_MEMORY_CHECKPOINTS")
        assert len(await kv.keys()) == 2
        assert (await kv.status()).ttl == 7 * 86_400
        [injected] = out["injected"]
        assert injected["source"] == "post_compaction"
        assert injected["agent_memory"]["checkpoint_id"] == cp["checkpoint_id"]
        assert injected["agent_memory"]["budget_tokens"] == 1500
        stats = await _stop(proc)
        assert stats["processed"] == 2
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for name in ("AGENT", "KV_AGENT_agent_memory_done", "KV_AGENT_MEMORY_CHECKPOINTS"):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(name)
        await nc.drain()


async def test_the_configured_model_needs_no_llm_model_variable(
    nats_url: str, tmp_path: Path
) -> None:
    """`extraction.llm_assisted.model` with only AGENT_MEMORY_LLM_URL set: the
    processor starts and extraction asks the endpoint for that model."""
    config = tmp_path / "model.json"
    config.write_text(
        json.dumps(
            {
                "stream_name": "CLIMODEL",
                "consumer_name_suffix": "model",
                "extraction": {"llm_assisted": {"model": "fast"}},
                "processor": {"fetch_timeout_seconds": 0.2},
            }
        )
    )
    openai = _fake_openai()
    fake = openai.FakeOpenAIServer()
    fake.start()
    answer = json.dumps([{"subject": "auth", "predicate": "uses", "object": "oauth"}])
    fake.script(
        openai.CHAT,
        openai.Reply(
            json={"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]}
        ),
    )
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    mutations: list[dict[str, Any]] = []

    async def sink(msg: Msg) -> None:
        mutations.append(json.loads(msg.data))

    await nc.subscribe("graph.mutation.>", cb=sink)
    proc = await _start(nats_url, config, tmp_path, {"AGENT_MEMORY_LLM_URL": fake.url + "/v1"})
    try:
        await _wait_for_consumer(js, proc, "CLIMODEL", "agent-memory-compaction-model")
        event = {**json.loads(design.COMPACTION_STARTING), "content": "We chose OAuth."}
        await js.publish("agent.context.compaction.loop_123", json.dumps(event).encode())
        await wait_for(lambda: mutations, timeout=15, what="the extracted facts")
        [request] = fake.requests_to(openai.CHAT)
        assert request.body["model"] == "fast"
        assert mutations[0]["triples"] == [
            {"subject": "auth", "predicate": "uses", "object": "oauth"}
        ]
        stats = await _stop(proc)
        assert stats["processed"] == 1
        assert stats["bad_model_output"] == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        fake.stop()
        for name in ("CLIMODEL", "KV_CLIMODEL_agent_memory_done-model"):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(name)
        await nc.drain()


def test_the_model_extraction_asks_for() -> None:
    """The document's model, else AGENT_MEMORY_TRIPLE_MODEL, else AGENT_MEMORY_LLM_MODEL."""
    from agent_memory.entrypoints.processor import ProcessorConfig
    from agent_memory.entrypoints.processor.cli import processor_settings

    named = ProcessorConfig.from_mapping({"extraction": {"llm_assisted": {"model": "fast"}}})
    silent = ProcessorConfig()
    url = {"AGENT_MEMORY_LLM_URL": "http://127.0.0.1:9/v1"}
    both = {**url, "AGENT_MEMORY_LLM_MODEL": "main"}
    triple = {**both, "AGENT_MEMORY_TRIPLE_MODEL": "triples"}
    assert processor_settings(named, url).llm_model == "fast"
    assert processor_settings(named, triple).llm_model == "fast"
    assert processor_settings(silent, triple).llm_model == "triples"
    assert processor_settings(silent, both).llm_model == "main"
    assert processor_settings(named, {}).llm_url is None

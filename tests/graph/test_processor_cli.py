"""`agent-memory processor` as a real process on a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import nats
import nats.js.errors
from nats.aio.msg import Msg

from graph.helpers import wait_for


async def test_processor_command_runs_and_stops_cleanly(nats_url: str, tmp_path: Path) -> None:
    config = tmp_path / "processor.json"
    config.write_text(
        json.dumps(
            {
                "stream_name": "CLITEST",
                "consumer_suffix": "-cli",
                "owner": "cli-owner",
                "processor": {"fetch_timeout_seconds": 0.2},
                "hydration": {"post_compaction": {"max_recovery_tokens": 50}},
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    injected: list[dict[str, object]] = []

    async def sink(msg: Msg) -> None:
        injected.append(json.loads(msg.data))

    await nc.subscribe("agent.context.injected.>", cb=sink)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent_memory.cli",
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
    try:

        async def stream_ready() -> bool:
            try:
                await js.stream_info("CLITEST")
            except nats.js.errors.NotFoundError:
                return False
            return True

        deadline = asyncio.get_running_loop().time() + 20
        while not await stream_ready():
            assert proc.returncode is None, await proc.stderr.read() if proc.stderr else b""
            assert asyncio.get_running_loop().time() < deadline, "the processor never started"
            await asyncio.sleep(0.05)
        await js.publish(
            "agent.context.compaction.compaction_complete.l1",
            json.dumps({"id": "c1", "type": "compaction_complete", "loop_id": "l1"}).encode(),
        )
        await wait_for(lambda: injected, timeout=15, what="the injected context")
        assert injected[0]["owner"] == "cli-owner"
        assert injected[0]["budget_tokens"] == 50
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 20)
        assert proc.returncode == 0, stderr.decode()
        stats = json.loads(stdout.decode().strip().splitlines()[-1])
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

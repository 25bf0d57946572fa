"""The synchronous facade, used the way a script uses it."""

from __future__ import annotations

import asyncio
import re
import sys
import textwrap
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import background
from agent_memory import ConfigurationError, Entity, Event, Step
from agent_memory.domain.user_facts import FactCandidate
from agent_memory.sync import connect


def test_script_round_trip_on_sqlite(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    with connect(f"sqlite:///{tmp_path / 'm.db'}") as memory:
        written = memory.events.append(
            [
                Event(
                    id="e1",
                    domain="k8s",
                    agent="a",
                    action="x",
                    outcome="ok",
                    summary="s",
                    occurred_at=now,
                    recorded_at=now,
                    user_id="u1",
                )
            ]
        )
        assert written == 1
        window = memory.events.window("k8s", since=now - timedelta(hours=1), limit=5)
        assert [e.id for e in window.events] == ["e1"]
        memory.users.extract(user_id="u1", namespace="n", conversation="I'm vegan", wait=True)
        receipt = memory.users.forget("u1")
        assert (receipt.facts, receipt.events) == (1, 1)
        memory.users.reconcile(
            user_id="u2", namespace="n", candidates=[FactCandidate("User likes tea", "preference")]
        )
        assert memory.users.delete_scope("u2") == 1
        entries = memory.audit.entries()
        assert [(e.operation, e.subject) for e in entries] == [
            ("delete_scope", "u2"),
            ("forget_user", "u1"),
        ]
        assert memory.audit.page(limit=1).entries == (entries[0],)
    with connect(f"sqlite:///{tmp_path / 'm.db'}") as again:
        assert again.events.window("k8s", since=now - timedelta(hours=1), limit=5).events == ()


def test_agents_request_is_blocking_too(tmp_path: Path) -> None:
    with connect(f"sqlite:///{tmp_path / 'm.db'}") as memory:
        pod = Entity("pod", "web-1")
        with memory.agents.request(
            agent="a", domain="k8s", request_id="r1", entities=[pod], doing="look"
        ) as req:
            assert req.claims[0].acquired
            report = req.record([Step(action="kubectl describe pod web-1", outcome="OOMKilled")])
            assert report.ok, report.as_dict()
        with memory.agents.request(agent="b", domain="k8s", request_id="r2") as later:
            assert "kubectl describe pod web-1" in later.planning_context().text
    assert not [t for t in threading.enumerate() if t.name == "agent-memory-sync"], "joined"


async def test_works_inside_a_running_event_loop() -> None:
    """Jupyter runs cells inside an event loop: the facade runs its own loop on a
    helper thread instead of refusing."""
    asyncio.get_running_loop()  # this test runs inside one
    with connect("memory://in-a-loop") as memory:
        memory.cache.put("s", "k", b"v")
        assert memory.cache.get("s", "k") == b"v"
        assert memory.users.forget("u1").complete


def test_a_closed_connection_says_so() -> None:
    memory = connect("memory://closed")
    memory.close()
    memory.close()  # idempotent
    with pytest.raises(ConfigurationError, match="closed"):
        memory.cache.get("s", "k")


_USER_SCRIPT = textwrap.dedent(
    """
    from datetime import UTC, datetime, timedelta

    from agent_memory import Step
    from agent_memory.sync import connect

    with connect("memory://typed") as memory:
        since = datetime.now(UTC) - timedelta(hours=1)
        reveal_type(memory.events.window("k8s", since=since, limit=5))
        reveal_type(memory.users.forget("u1"))
        with memory.agents.request(agent="a", domain="k8s", request_id="r") as req:
            reveal_type(req.planning_context())
            reveal_type(req.record([Step(action="x", outcome="ok")]))
        reveal_type(memory.store.get("o", "i"))
        reveal_type(memory.leases.scan("s"))
        reveal_type(memory.cache.get("s", "k"))
        memory.events.window("k8s", since="yesterday", limit=5)
    """
)


@background.job("sync-facade-mypy")
def _user_script_job(work: Path) -> background.Command:
    script = work / "user_script.py"
    script.write_text(_USER_SCRIPT)
    argv = [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(script)]
    return background.Command(argv, cwd=work, timeout=600)


@pytest.mark.background("sync-facade-mypy")
def test_a_user_script_type_checks_with_real_types() -> None:
    """mypy --strict on a script using the facade sees the real return types."""
    result = background.result("sync-facade-mypy")
    revealed = re.findall(r'Revealed type is "([^"]+)"', result.stdout)
    assert revealed == [
        "agent_memory.domain.records.EventWindow",
        "agent_memory.services.user_memory.ForgetReceipt",
        "agent_memory.services.planning.PlanningContext",
        "agent_memory.services.reports.StageReport",
        "agent_memory.domain.records.MemoryRecord | None",
        "list[agent_memory.domain.records.Lease]",
        "bytes | None",
    ], result.stdout + result.stderr
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, result.stdout  # the one deliberate mistake, and nothing else
    assert '"window" of "SyncEventLog" has incompatible type "str"' in errors[0]


async def test_unprovable_embedding_space_warns_at_startup(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import numpy as np

    from agent_memory import EmbeddingSpace
    from agent_memory import connect as aconnect

    class Remote:
        space = EmbeddingSpace("acme-embed", 8, provable=False)

        async def embed(self, texts: list[str]) -> np.ndarray:
            return np.ones((len(texts), 8), np.float32)

    with caplog.at_level("WARNING", logger="agent_memory"):
        memory = await aconnect("memory://warn", embedder=Remote())  # type: ignore[arg-type]
    await memory.close()
    assert "cannot be proven" in caplog.text
    assert "'acme-embed'" in caplog.text


async def test_async_connect_is_a_context_manager_and_awaitable() -> None:
    import agent_memory

    async with agent_memory.connect("memory://ctx") as memory:
        assert memory.agents is memory.agents, "built once"
        async with memory.agents.request(agent="a", domain="d", request_id="r") as req:
            await req.record([agent_memory.Step(action="x", outcome="ok")])
        assert (await memory.users.forget("u1")).complete
    with pytest.raises(agent_memory.StoreClosed):
        await memory.cache.get("s", "k")  # closed on exit
    awaited = await agent_memory.connect("memory://awaited")
    try:
        assert await awaited.cache.get("s", "k") is None
    finally:
        await awaited.close()


def test_the_top_level_shows_the_entry_points_first() -> None:
    import importlib.metadata

    import agent_memory

    assert agent_memory.__all__[:6] == [
        "connect",
        "Memory",
        "Connecting",
        "Settings",
        "Entity",
        "Step",
    ]
    assert agent_memory.__version__ == importlib.metadata.version("agent-memory")
    with pytest.raises(AttributeError):
        agent_memory.__no_such_name__  # noqa: B018

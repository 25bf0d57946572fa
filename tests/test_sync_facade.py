"""The synchronous facade, used the way a script uses it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_memory import ConfigurationError, Event
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
    with connect(f"sqlite:///{tmp_path / 'm.db'}") as again:
        assert again.events.window("k8s", since=now - timedelta(hours=1), limit=5).events == ()


async def test_refuses_inside_an_event_loop() -> None:
    with pytest.raises(ConfigurationError, match="running event loop"):
        connect("memory://x")


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

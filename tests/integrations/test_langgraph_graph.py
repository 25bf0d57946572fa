"""A real LangGraph graph compiled with `store=AgentMemoryStore(...)`: memories
written by one thread are recalled by another and after a process restart (a
SQLite file), and each user's namespace sees only that user's memories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

APP = Path(__file__).with_name("graph_app.py")


def run_app(db: Path, *runs: tuple[str, str, str]) -> list[dict[str, Any]]:
    args = [part for run in runs for part in run]
    env = {**os.environ, "AGENT_MEMORY_EMBEDDING_DIMENSION": "64"}
    done = subprocess.run(
        [sys.executable, str(APP), str(db), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_memories_persist_across_threads_and_restarts_per_user(tmp_path: Path) -> None:
    db = tmp_path / "graph.db"
    first = run_app(
        db,
        ("alice", "t1", "remember I drink dark roast coffee"),
        ("bob", "t1", "remember I live in Tokyo"),
        ("alice", "t2", "what coffee do I drink?"),  # another thread, same process
        ("bob", "t2", "where do I live?"),
    )
    assert first[2]["recalled"] == ["I drink dark roast coffee"]
    assert first[3]["recalled"] == ["I live in Tokyo"]
    # A new process on the same file: memories persist, users stay apart.
    second = run_app(
        db,
        ("alice", "t3", "remember my cat is called Mochi"),
        ("alice", "t4", "anything"),
        ("bob", "t4", "anything"),
        ("carol", "t1", "anything"),
    )
    assert second[1]["recalled"] == ["I drink dark roast coffee", "my cat is called Mochi"]
    assert second[2]["recalled"] == ["I live in Tokyo"]
    assert second[3]["recalled"] == []
    assert second[3]["everyone"] == ["alice/memories", "bob/memories"]

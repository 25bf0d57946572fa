"""A process with a gRPC channel open (Milvus Lite here; a Qdrant server client
too) can still start subprocesses the way the embedded PostgreSQL starts pg_ctl
(a preexec_fn, file descriptors closed before exec). With gRPC's fork support
on, its poller restarts in the child and crashes it in about 1 of 30 forks
(grpc/grpc#43055); tests/conftest.py turns that support off for the session."""

from __future__ import annotations

import subprocess
from pathlib import Path

import agent_memory.sync


def test_subprocesses_survive_while_a_grpc_channel_is_open(tmp_path: Path) -> None:
    """When this fails, the session's GRPC_ENABLE_FORK_SUPPORT=false was lost
    (or set after grpc was imported): server restarts in the tests crash."""
    with agent_memory.sync.connect(f"milvus+lite://{tmp_path}/m.db") as memory:
        memory.store.ping()
        codes = [
            subprocess.run(
                ["/bin/true"], capture_output=True, preexec_fn=lambda: None, close_fds=True
            ).returncode
            for _ in range(150)
        ]
    assert [c for c in codes if c] == []

"""`agent-memory doctor` on a cluster URL shows the topology: primaries with
their slots and replicas, slots covered, and the Search module on every node."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def test_doctor_shows_the_cluster_topology(redis_cluster_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent_memory.entrypoints.cli",
            "doctor",
            "--url",
            redis_cluster_url,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert re.search(r"cluster\s+3 primaries, 3 replicas, 16384/16384 slots covered", out), out
    primaries = re.findall(r"cluster primary (\S+)\s+slots (\S+); replicas: (\S+)", out)
    assert len(primaries) == 3, out
    assert all(replicas != "none" for _, _, replicas in primaries), out
    nodes = re.findall(r"cluster node \S+\s+(primary|replica), search (\S+)", out)
    assert len(nodes) == 6, out
    assert {search for _, search in nodes} == {"loaded"}, out
    assert re.search(r"search_module\s+loaded on every node", out), out
    assert re.search(r"ok\s+memory store\s+reachable", out), out

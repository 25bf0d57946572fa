"""Graceful shutdown: SIGTERM drains a request in flight, finishes every open
agent request (claims and signals released) and closes the backend."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import httpx

import agent_memory
from agent_memory.entrypoints.server.tenancy import Tenant
from server.live import LiveServer, unique


def test_sigterm_drains_in_flight_and_releases_claims(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    tenant = unique("acme-")
    live = LiveServer(url, {"acme": {"tenant": tenant}}).start()
    try:
        headers = live.headers("acme")
        start = {"agent": "A", "domain": "k8s", "request_id": "r1",
                 "entities": [{"type": "pod", "id": "web-1"}]}  # fmt: skip
        r = httpx.post(live.base + "/v1/requests", json=start, headers=headers)
        assert r.status_code == 201
        assert r.json()["claims"][0]["acquired"] is True

        # A request in flight: headers and half the body sent before SIGTERM.
        fact = {"content": "User likes tea", "category": "preference"}
        body = json.dumps({"user_id": "ana", "namespace": "n", "facts": [fact]})
        raw = body.encode()
        head = (
            f"POST /v1/users/remember HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: {headers['Authorization']}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\n\r\n"
        ).encode()
        sock = socket.create_connection(("127.0.0.1", live.port), timeout=30)
        sock.sendall(head + raw[:10])
        time.sleep(0.3)
        live.terminate()
        time.sleep(1.0)
        sock.sendall(raw[10:])
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        sock.close()
        assert answer.startswith(b"HTTP/1.1 200"), answer[:300]

        code = live.stop(timeout=30)
        assert code in (0, -15), code  # uvicorn re-raises the SIGTERM it handled
        log = live.log()
        assert "1 open agent requests finished" in log, log
        assert "Traceback" not in log
    finally:
        live.close()

    asyncio.run(_check_stored(url, Tenant(tenant)))


async def _check_stored(url: str, t: Tenant) -> None:
    async with agent_memory.connect(url) as memory:
        assert await memory.leases.scan(t.domain("k8s")) == []  # signal and claim released
        facts = await memory.users.facts(user_id=t.owner("ana"))
        assert [f.content for f in facts] == ["User likes tea"]  # the drained request landed

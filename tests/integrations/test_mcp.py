"""The MCP server through the official SDK's own client: a `ClientSession` over
stdio launching `agent-memory mcp` as a subprocess (every tool, the resource,
bad input), and once over streamable HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client

from agent_memory import MAX_ID_BYTES

TOOLS = {"remember", "recall", "forget", "search_memories", "record_steps", "planning_context"}
SERVER = [sys.executable, "-m", "agent_memory.entrypoints.cli", "mcp"]


@asynccontextmanager
async def stdio_session(url: str, errlog: Path) -> AsyncIterator[ClientSession]:
    # The SDK starts the server with a minimal environment: keep PYTHONPATH, so
    # the server runs the code under test (a source tree first on the path).
    env = get_default_environment() | {k: v for k, v in os.environ.items() if k == "PYTHONPATH"}
    params = StdioServerParameters(command=SERVER[0], args=[*SERVER[1:], "--url", url], env=env)
    with errlog.open("w") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, (tool, result.content)
    assert result.structured_content is not None, result
    return result.structured_content  # type: ignore[no-any-return]


async def error_of(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, (tool, arguments, result)
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert "Traceback" not in text, text
    assert text.strip(), result
    return text


def structured(text: str) -> dict[str, Any]:
    """The JSON error body (the SDK prefixes it with 'Error executing tool <name>: ')."""
    body = json.loads(text[text.index("{") :])["error"]
    assert set(body) >= {"type", "message"}, body
    return body  # type: ignore[no-any-return]


async def test_every_tool_over_stdio(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mcp.db'}"
    errlog = tmp_path / "server.err"
    async with stdio_session(url, errlog) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == TOOLS
        for name in ("remember", "recall", "forget", "search_memories"):
            assert "user_id" in tools[name].input_schema["required"], name
            assert tools[name].description
        facts = [
            {"content": "User prefers dark roast coffee", "category": "preference"},
            {"content": "User is allergic to peanuts", "category": "constraint"},
        ]
        added = await call(session, "remember", user_id="alice", namespace="barista", facts=facts)
        assert added["operations"] == {"ADD": 2}
        again = await call(session, "remember", user_id="alice", namespace="barista", facts=facts)
        assert again["operations"] == {"DUPLICATE": 2}  # reconciled, not stored twice
        recalled = await call(
            session, "recall", user_id="alice", namespace="barista", request="coffee order"
        )
        assert {f["content"] for f in recalled["facts"]} == {f["content"] for f in facts}
        assert (await call(session, "recall", user_id="bob", namespace="barista"))["facts"] == []
        found = await call(session, "search_memories", user_id="alice", query="coffee", limit=1)
        assert [r["content"] for r in found["results"]] == ["User prefers dark roast coffee"]
        profile = await session.read_resource("user-profile://alice/barista")
        text = " ".join(getattr(c, "text", "") for c in profile.contents)
        assert "<user_profile" in text
        assert "peanuts" in text

        steps = [
            {
                "action": "kubectl describe pod web-1",
                "outcome": "failure",
                "failure_cause": "OOMKilled",
            }
        ]
        recorded = await call(
            session, "record_steps", agent="A", domain="k8s", request_id="r1", steps=steps
        )
        assert recorded["recorded"] == 1
        context = await call(
            session,
            "planning_context",
            agent="B",
            domain="k8s",
            request_id="r2",
            entity_type="pod",
            entity_id="web-1",
        )
        assert "<agent_memory" in context["agent_memory"]
        assert "kubectl describe pod web-1" in context["agent_memory"]
        assert isinstance(context["agent_coordination"], str)

        fact_id = recalled["facts"][0]["id"]
        one = await call(session, "forget", user_id="alice", fact_id=fact_id)
        assert one["facts"] == 1
        receipt = await call(session, "forget", user_id="alice")
        assert receipt["facts"] == 1
        assert receipt["complete"] is True
        assert (await call(session, "recall", user_id="alice", namespace="barista"))["facts"] == []

        # Bad input: a structured tool error every time, never a traceback.
        blank = structured(
            await error_of(session, "remember", user_id="   ", namespace="barista", facts=facts)
        )
        assert blank["type"] == "InvalidInput"
        assert blank["field"] == "user_id"
        nul = structured(await error_of(session, "recall", user_id="a\x00b", namespace="x"))
        assert nul["field"] == "user_id"
        half = structured(
            await error_of(
                session,
                "planning_context",
                agent="B",
                domain="k8s",
                request_id="r3",
                entity_type="pod",
            )
        )
        assert half["field"] == "entity_id"
        both = structured(
            await error_of(session, "forget", user_id="alice", namespace="barista", fact_id="x")
        )
        assert both["type"] == "InvalidInput"
        empty = structured(
            await error_of(session, "remember", user_id="alice", namespace="barista", facts=[])
        )
        assert empty["field"] == "facts"
        await error_of(session, "remember", user_id="alice", namespace="barista")  # no facts
        await error_of(
            session,
            "remember",
            user_id="alice",
            namespace="b",
            facts=[{"content": "x", "category": "nonsense"}],
        )
        await error_of(session, "search_memories", user_id="alice", query="x", limit=0)
        await error_of(
            session, "record_steps", agent="A", domain="k8s", request_id="r", steps=[{"action": ""}]
        )
        await error_of(session, "recall", user_id=7, namespace="x")
        await error_of(session, "no_such_tool")
    assert "Traceback" not in errlog.read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_streamable_http(tmp_path: Path) -> None:
    port = _free_port()
    url = f"sqlite:///{tmp_path / 'mcp.db'}"
    errlog = (tmp_path / "http.err").open("w")
    proc = await asyncio.create_subprocess_exec(
        *SERVER,
        "--url",
        url,
        "--transport",
        "http",
        "--no-auth",  # one local user on loopback; keys: test_mcp_keys.py
        "--port",
        str(port),
        stdout=errlog,
        stderr=errlog,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.returncode is None, (tmp_path / "http.err").read_text()
                assert time.monotonic() < deadline, "the HTTP server did not start"
                await asyncio.sleep(0.1)
        async with (
            streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            facts = [{"content": "User lives in Lyon", "category": "context"}]
            await call(session, "remember", user_id="u1", namespace="travel", facts=facts)
            recalled = await call(
                session, "recall", user_id="u1", namespace="travel", request="where"
            )
            assert [f["content"] for f in recalled["facts"]] == ["User lives in Lyon"]
            bad = structured(await error_of(session, "recall", user_id=" ", namespace="x"))
            assert bad["field"] == "user_id"
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
        errlog.close()
    assert "Traceback" not in (tmp_path / "http.err").read_text()


def test_bad_url_is_a_usage_error() -> None:
    done = subprocess.run(
        [*SERVER, "--url", "bogus://x"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done
    assert "UnsupportedBackend" in done.stderr
    assert "Traceback" not in done.stderr


async def test_tools_enforce_the_http_bounds_with_typed_errors(tmp_path: Path) -> None:
    """What HTTP refuses (413/422) MCP refuses too, with the typed error body:
    ids over 1,024 characters, facts over 100,000, oversized requests, and
    missing or wrong-typed arguments; nothing of it is stored."""
    url = f"sqlite:///{tmp_path / 'bounds.db'}"
    errlog = tmp_path / "err.log"
    long_id, huge = "u" * 5_000, "x" * 2_000_000
    async with stdio_session(url, errlog) as session:
        cases: list[tuple[str, dict[str, Any], str]] = [
            (
                "remember",
                {"user_id": long_id, "namespace": "b", "facts": [{"content": "a"}]},
                "user_id",
            ),
            (
                "remember",
                {"user_id": "alice", "namespace": "b", "facts": [{"content": huge}]},
                "facts.0.content",
            ),
            (
                "remember",
                {"user_id": "alice", "namespace": "b" * 1025, "facts": [{"content": "a"}]},
                "namespace",
            ),
            ("remember", {"user_id": "alice", "namespace": "b"}, "facts"),
            ("remember", {"user_id": 7, "namespace": "b", "facts": [{"content": "a"}]}, "user_id"),
            ("forget", {"user_id": huge}, "user_id"),
            (
                "record_steps",
                {"agent": "A", "domain": "k8s", "request_id": huge, "steps": [{"action": "x"}]},
                "request_id",
            ),
            (
                "record_steps",
                {
                    "agent": "A",
                    "domain": "k8s",
                    "request_id": "r",
                    "steps": [{"action": "x"}] * 101,
                },
                "steps",
            ),
            ("recall", {"user_id": "alice", "namespace": "b", "request": huge}, "request"),
            ("search_memories", {"user_id": "alice", "query": huge}, "query"),
            ("search_memories", {"user_id": "alice", "query": "x", "limit": "ten"}, "limit"),
            (
                "planning_context",
                {"agent": "A", "domain": "k8s", "request_id": "r", "doing": huge},
                "doing",
            ),
        ]
        for tool, arguments, field in cases:
            body = structured(await error_of(session, tool, **arguments))
            assert body["type"] == "InvalidInput", (tool, field, body)
            assert body["field"] == field, (tool, field, body)
            assert len(body["message"]) < 2_000, (tool, field, body["message"][:300])
        # Nothing was stored; the bounds themselves are accepted.
        assert (await call(session, "recall", user_id="alice", namespace="b"))["facts"] == []
        # The wire admits ids of up to 1,024 characters; the library's own bound
        # (MAX_ID_BYTES of UTF-8) then refuses a longer one with the same typed body.
        over = structured(
            await error_of(session, "remember", user_id="u" * 1024, namespace="b",
                           facts=[{"content": "y"}])
        )  # fmt: skip
        assert (over["type"], over["field"]) == ("InvalidInput", "user_id"), over
        edge = "u" * MAX_ID_BYTES
        done = await call(
            session, "remember", user_id=edge, namespace="b", facts=[{"content": "y" * 100_000}]
        )
        assert done["failures"] == []
    assert "Traceback" not in errlog.read_text()


async def test_a_hung_store_answers_deadline_exceeded_and_the_retry_is_stored(
    tmp_path: Path,
) -> None:
    """`--call-timeout 1`: another connection holds SQLite's write lock, so the
    server's write waits on the busy timeout (10 s); the tool call answers a
    `DeadlineExceeded` error at the deadline instead, the server keeps serving,
    and the retried write is stored."""
    import sqlite3

    db = tmp_path / "mcp.db"
    url = f"sqlite:///{db}"
    env = get_default_environment() | {k: v for k, v in os.environ.items() if k == "PYTHONPATH"}
    params = StdioServerParameters(
        command=SERVER[0], args=[*SERVER[1:], "--url", url, "--call-timeout", "1"], env=env
    )
    fact = [{"content": "User likes green tea", "category": "preference"}]
    with (tmp_path / "server.err").open("w") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            first = [{"content": "User likes tea", "category": "preference"}]
            await call(session, "remember", user_id="u", namespace="n", facts=first)
            lock = sqlite3.connect(db, timeout=0)
            try:
                lock.execute("BEGIN EXCLUSIVE")
                started = time.monotonic()
                text = await error_of(session, "remember", user_id="u", namespace="n", facts=fact)
                waited = time.monotonic() - started
            finally:
                lock.rollback()
                lock.close()
            body = structured(text)
            assert body["type"] == "DeadlineExceeded", body
            assert "1 s" in body["message"], body
            assert waited < 8, waited  # the deadline (1 s), not the busy timeout (10 s)
            await call(session, "remember", user_id="u", namespace="n", facts=fact)
            found = await call(session, "recall", user_id="u", namespace="n", request="tea")
            assert "User likes green tea" in {f["content"] for f in found["facts"]}, found


def test_a_bad_call_timeout_is_a_configuration_error() -> None:
    from agent_memory.domain.errors import ConfigurationError
    from agent_memory.entrypoints.mcp.server import build_server

    for bad in (0, -1.0, float("nan"), float("inf"), True, "5"):
        with pytest.raises(ConfigurationError, match="call_timeout"):
            build_server("memory://", call_timeout=bad)  # type: ignore[arg-type]

"""`agent-memory mcp --transport http --keys FILE`: the MCP server bound to the
API keys of `agent-memory serve`, through the official SDK's own client over
real HTTP (a subprocess on a free loopback port, SQLite).

Keys: A (tenant a), B (tenant b), C (tenant a, bound to user "alice"), R
(tenant a, read-only), X (tenant a, revoked during the tests). The same user
id ("alice", "bob") exists in both tenants: only the tenant mapping keeps
them apart."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agent_memory.entrypoints.cli import main
from agent_memory.entrypoints.server.keys import hash_key, new_key

from .conftest import profile_examples

SERVER = [sys.executable, "-m", "agent_memory.entrypoints.cli", "mcp"]
ENTRIES: dict[str, dict[str, Any]] = {
    "A": {"tenant": "a"},
    "B": {"tenant": "b"},
    "C": {"tenant": "a", "user": "alice"},
    "R": {"tenant": "a", "read_only": True},
    "X": {"tenant": "a"},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class McpServer:
    """`agent-memory mcp --transport http --keys FILE` in a subprocess."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.key = {name: new_key() for name in ENTRIES}
        self.entries = {
            name: {"id": f"key-{name}", "sha256": hash_key(self.key[name]), **entry}
            for name, entry in ENTRIES.items()
        }
        self.key_file = root / "keys.json"
        self.log = root / "mcp.log"
        self.write_keys()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_SERVER_")}
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [*SERVER, "--url", f"sqlite:///{root / 'mcp.db'}", "--transport", "http",
                 "--port", str(self.port), "--keys", str(self.key_file)],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                assert self.proc.poll() is None, self.log.read_text()
                assert time.monotonic() < deadline, "the MCP server did not start"
                time.sleep(0.1)

    def write_keys(self) -> None:
        tmp = self.key_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"keys": list(self.entries.values())}))
        os.replace(tmp, self.key_file)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:  # pragma: no cover
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    server = McpServer(tmp_path_factory.mktemp("mcp-keys"))
    try:
        yield server
    finally:
        server.stop()
    assert "Traceback" not in server.log.read_text(), server.log.read_text()


@asynccontextmanager
async def session_as(server: McpServer, name: str | None) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session presenting key `name` (None: no key)."""
    headers = {} if name is None else {"Authorization": f"Bearer {server.key[name]}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(server.url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, (tool, result.content)
    assert result.structured_content is not None, result
    return result.structured_content  # type: ignore[no-any-return]


async def refused(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """The typed error body of a refused call: a tool result with is_error."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, (tool, arguments, result)
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert "Traceback" not in text, text
    body: dict[str, Any] = json.loads(text[text.index("{") :])["error"]
    assert set(body) >= {"type", "message"}, body
    return body


def fact(content: str) -> list[dict[str, str]]:
    return [{"content": content, "category": "preference"}]


async def contents(session: ClientSession, user: str) -> set[str]:
    recalled = await ok(session, "recall", user_id=user, namespace="n", request="anything")
    return {f["content"] for f in recalled["facts"]}


async def test_tenants_do_not_see_each_other(mcp_server: McpServer) -> None:
    """Key A (tenant a) cannot read, search or forget key B's (tenant b) user
    facts, though both name the same user id."""
    mark = uuid.uuid4().hex[:8]
    secret = f"User of b keeps {mark} in a vault"
    async with session_as(mcp_server, "A") as a, session_as(mcp_server, "B") as b:
        await ok(b, "remember", user_id="bob", namespace="n", facts=fact(secret))
        await ok(a, "remember", user_id="bob", namespace="n", facts=fact(f"User of a {mark}"))
        assert secret in await contents(b, "bob")
        assert secret not in await contents(a, "bob")
        found = await ok(a, "search_memories", user_id="bob", query=f"vault {mark}", limit=100)
        assert secret not in {r["content"] for r in found["results"]}
        assert all(mark not in r["content"] or "of a" in r["content"] for r in found["results"])
        profile = await a.read_resource("user-profile://bob/n")
        assert secret not in " ".join(getattr(c, "text", "") for c in profile.contents)
        # A forgets "bob": its own bob, never b's.
        receipt = await ok(a, "forget", user_id="bob")
        assert receipt["user_id"] == "bob"  # the caller's id, not the stored scope
        assert "t/a/" not in json.dumps(receipt)
        assert secret in await contents(b, "bob")
        fact_id = (await ok(b, "recall", user_id="bob", namespace="n"))["facts"][0]["id"]
        # b's fact id, a's scope: not found there, as over HTTP (404)
        body = await refused(a, "forget", user_id="bob", fact_id=fact_id)
        assert (body["type"], body.get("field")) == ("NotFound", "fact_id"), body
        assert secret in await contents(b, "bob")


async def test_agent_memory_is_per_tenant(mcp_server: McpServer) -> None:
    domain, mark = "k8s", uuid.uuid4().hex[:8]
    steps = [{"action": f"kubectl rollout restart {mark}", "outcome": "failure"}]
    async with session_as(mcp_server, "A") as a, session_as(mcp_server, "B") as b:
        await ok(b, "record_steps", agent="B1", domain=domain, request_id=mark, steps=steps)
        mine = await ok(b, "planning_context", agent="B2", domain=domain, request_id=mark + "2")
        assert mark in mine["agent_memory"]
        assert "t/b/" not in json.dumps(mine)  # views name the caller's domain
        theirs = await ok(a, "planning_context", agent="A1", domain=domain, request_id="r-a")
        assert mark not in json.dumps(theirs)
        assert "B1" not in json.dumps(theirs)


async def test_a_user_bound_key_acts_on_its_user_only(mcp_server: McpServer) -> None:
    mark = uuid.uuid4().hex[:8]
    async with session_as(mcp_server, "C") as c, session_as(mcp_server, "A") as a:
        await ok(a, "remember", user_id="bob", namespace="n", facts=fact(f"User bob {mark}"))
        await ok(c, "remember", user_id="alice", namespace="n", facts=fact(f"User alice {mark}"))
        assert f"User alice {mark}" in await contents(c, "alice")
        assert f"User alice {mark}" in await contents(a, "alice")  # tenant a's alice
        calls: list[tuple[str, dict[str, Any]]] = [
            ("recall", {"user_id": "bob", "namespace": "n"}),
            ("search_memories", {"user_id": "bob", "query": "bob"}),
            ("remember", {"user_id": "bob", "namespace": "n", "facts": fact("planted")}),
            ("forget", {"user_id": "bob"}),
            ("record_steps", {"agent": "C", "domain": "k8s", "request_id": mark,
                              "steps": [{"action": "x"}], "user_id": "bob"}),
        ]  # fmt: skip
        for tool, arguments in calls:
            body = await refused(c, tool, **arguments)
            assert body["type"] == "PermissionDenied", (tool, body)
            assert body["field"] == "user_id", (tool, body)
            assert mark not in json.dumps(body)
        with pytest.raises(MCPError) as denied:
            await c.read_resource("user-profile://bob/n")
        assert denied.value.data["error"]["type"] == "PermissionDenied", denied.value.data
        assert denied.value.data["error"]["field"] == "user_id", denied.value.data
        assert await contents(a, "bob") == {f"User bob {mark}"}  # untouched, nothing planted
        receipt = await ok(c, "forget", user_id="alice")
        assert receipt["facts"] >= 1


async def test_a_read_only_key_cannot_write(mcp_server: McpServer) -> None:
    mark = uuid.uuid4().hex[:8]
    async with session_as(mcp_server, "R") as r, session_as(mcp_server, "A") as a:
        await ok(a, "remember", user_id="carol", namespace="n", facts=fact(f"User carol {mark}"))
        assert f"User carol {mark}" in await contents(r, "carol")  # reading is fine
        await ok(r, "search_memories", user_id="carol", query="carol")
        writes: list[tuple[str, dict[str, Any]]] = [
            ("remember", {"user_id": "carol", "namespace": "n", "facts": fact("planted")}),
            ("forget", {"user_id": "carol"}),
            ("record_steps", {"agent": "R", "domain": "k8s", "request_id": mark,
                              "steps": [{"action": "x"}]}),
            ("planning_context", {"agent": "R", "domain": "k8s", "request_id": mark}),
        ]  # fmt: skip
        for tool, arguments in writes:
            body = await refused(r, tool, **arguments)
            assert body["type"] == "PermissionDenied", (tool, body)
            assert "read" in body["message"], body
        assert await contents(a, "carol") == {f"User carol {mark}"}


def _initialize(server: McpServer, token: str | None) -> httpx.Response:
    headers = {"Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    return httpx.post(server.url, json=message, headers=headers, timeout=30)


def _assert_401(r: httpx.Response) -> None:
    assert r.status_code == 401, (r.status_code, r.text)
    assert r.headers["www-authenticate"].startswith("Bearer"), r.headers
    assert r.json()["error"] == "invalid_token", r.text
    assert "Traceback" not in r.text


async def test_missing_unknown_or_revoked_keys_are_401(mcp_server: McpServer) -> None:
    assert _initialize(mcp_server, mcp_server.key["A"]).status_code == 200
    _assert_401(_initialize(mcp_server, None))
    _assert_401(_initialize(mcp_server, new_key()))
    _assert_401(_initialize(mcp_server, "not-a-key"))
    with pytest.raises(Exception):  # the SDK client cannot even initialize
        async with session_as(mcp_server, None):
            pass
    # Revoked while a session is open: its next call is refused at the HTTP layer.
    async with session_as(mcp_server, "X") as x:
        await ok(x, "recall", user_id="dave", namespace="n")
        mcp_server.entries["X"]["revoked"] = True
        mcp_server.write_keys()
        await asyncio.sleep(1.3)  # the key file is re-read within a second
        _assert_401(_initialize(mcp_server, mcp_server.key["X"]))
        with pytest.raises(Exception):
            await x.call_tool("recall", {"user_id": "dave", "namespace": "n"})


def test_a_session_belongs_to_its_key(mcp_server: McpServer) -> None:
    """Another key presenting A's session id gets "session not found" (the
    SDK binds a session to the key that opened it)."""
    r = _initialize(mcp_server, mcp_server.key["A"])
    session_id = r.headers["mcp-session-id"]
    message = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Mcp-Session-Id": session_id,
        "Mcp-Protocol-Version": "2025-06-18",
        "Authorization": f"Bearer {mcp_server.key['B']}",
    }
    stolen = httpx.post(mcp_server.url, json=message, headers=headers, timeout=30)
    assert stolen.status_code == 404, stolen.text


ADVERSARIAL = [*"/:*{}|@-. \\%?#&=\"'tud", "t/b/u/", "t/a/u/", "../"]
ADVERSARIAL += ["\u00e9", "\U0001d518", "\u200b"]  # e-acute, fraktur U, zero-width space
user_ids = (
    st.lists(
        st.sampled_from(ADVERSARIAL) | st.characters(blacklist_categories=("Cs",), min_codepoint=1),
        min_size=1,
        max_size=12,
    )
    .map("".join)
    .filter(lambda s: s.strip() != "")
)


@pytest.fixture(scope="module")
def loop_sessions(mcp_server: McpServer) -> Iterator[tuple[Any, ClientSession, ClientSession]]:
    """Sessions of A and B on one private event loop, for the hypothesis test
    (a sync test: hypothesis drives the examples, the loop runs the calls)."""
    loop = asyncio.new_event_loop()
    opened: dict[str, ClientSession] = {}
    ready, done = asyncio.Event(), asyncio.Event()

    async def hold() -> None:  # one task enters and exits the sessions (anyio scopes)
        async with session_as(mcp_server, "A") as a, session_as(mcp_server, "B") as b:
            opened.update(A=a, B=b)
            ready.set()
            await done.wait()

    holder = loop.create_task(hold())
    loop.run_until_complete(asyncio.wait([holder, loop.create_task(ready.wait())],
                                         return_when=asyncio.FIRST_COMPLETED))  # fmt: skip
    if holder.done():
        holder.result()  # the sessions failed to open: raise why
    try:
        yield loop, opened["A"], opened["B"]
    finally:
        done.set()
        loop.run_until_complete(holder)
        loop.close()


@settings(
    max_examples=profile_examples(0.3, floor=5),  # dev 9, ci 30
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(user=user_ids)
@example(user="t/b/u/bob")
@example(user="/")
@example(user="t/other/u/")
@example(user="bob/../../b/u/bob")
@example(user="\u00e5lice \U0001d518")
def test_no_adversarial_user_id_reads_across_tenants(
    loop_sessions: tuple[Any, ClientSession, ClientSession], user: str
) -> None:
    """Whatever user id A names (prefix look-alikes, `/`, unicode), it reaches
    none of B's facts for that id or any other; B's own user sees its fact."""
    loop, a, b = loop_sessions
    mark = uuid.uuid4().hex
    secret = f"Secret of b {mark}"

    async def check() -> None:
        await ok(b, "remember", user_id=user, namespace="n", facts=fact(secret))
        for target in (user, "bob", f"t/b/u/{user}"):
            assert mark not in json.dumps(await ok(a, "recall", user_id=target, namespace="n"))
            found = await ok(a, "search_memories", user_id=target, query=secret, limit=100)
            assert mark not in json.dumps(found)
            await ok(a, "forget", user_id=target)
        assert secret in await contents(b, user)  # B still has it: A deleted nothing of b

    loop.run_until_complete(check())


def test_http_without_keys_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Never an open multi-user server by accident: HTTP needs keys, and
    `--no-auth` is for a loopback host only (in-process: nothing starts)."""
    for name in ("AGENT_MEMORY_SERVER_KEYS", "AGENT_MEMORY_SERVER_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)
    url = f"sqlite:///{tmp_path / 'x.db'}"
    cases = [
        (["--transport", "http"], "no API keys configured"),
        (["--transport", "http", "--no-auth", "--host", "0.0.0.0"], "loopback"),
        (["--transport", "http", "--no-auth", "--keys", "k.json"], "not both"),
        (["--keys", "k.json"], "stdio"),
        (["--no-auth"], "stdio"),
    ]
    for args, message in cases:
        assert main(["mcp", "--url", url, *args]) == 2, args
        err = capsys.readouterr().err
        assert "ConfigurationError" in err, (args, err)
        assert message in err, (args, err)
        assert "Traceback" not in err
    assert not (tmp_path / "x.db").exists()  # nothing was opened


async def test_a_forget_over_mcp_is_audited_as_its_key_and_tenant(
    mcp_server: McpServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The audit entry of a forget made through MCP names the key that made it
    and the key's tenant, and the caller-visible user id (never the stored scope)."""
    mark = uuid.uuid4().hex[:8]
    user = f"dora-{mark}"
    async with session_as(mcp_server, "A") as a:
        await ok(a, "remember", user_id=user, namespace="n", facts=fact(f"User {mark} rows"))
        receipt = await ok(a, "forget", user_id=user)
    capsys.readouterr()
    url = f"sqlite:///{mcp_server.root / 'mcp.db'}"
    assert await asyncio.to_thread(main, ["audit", "--url", url, "--tenant", "a", "--json"]) == 0
    # JSON Lines: split on "\n" only (ids of the fuzz test may hold U+2028 and kin)
    entries = [json.loads(line) for line in capsys.readouterr().out.split("\n") if line]
    mine = [e for e in entries if e.get("subject") == user]
    assert len(mine) == 1, entries
    assert (mine[0]["operation"], mine[0]["caller"], mine[0]["tenant"]) == (
        "forget_user",
        "key-A",
        "a",
    ), mine[0]
    assert receipt["facts"] in mine[0]["counts"].values(), (mine[0], receipt)
    assert mark not in json.dumps({k: v for k, v in mine[0].items() if k != "subject"})

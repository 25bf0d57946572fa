"""A second hunt on the two network surfaces: the HTTP service and the MCP server.

Both run in process on real loopback sockets (uvicorn), over ONE memory and
ONE key file, so the same input can be sent to both and their verdicts
compared: the MCP side through the official SDK client (streamable HTTP with
API keys), the HTTP side through httpx. What is checked: every argument is
taken with its JSON type as sent (no string, bool or float read as a number,
no number read as a date), the two surfaces agree on what they accept and what
they refuse (a fact that is not there is not found on both), every error the
MCP transport answers is a JSON-RPC body (not the SDK's plain text), and no
audit read path (`GET /v1/audit` with every cursor, crafted or reused)
reveals another tenant's or another user's entries."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agent_memory.bootstrap import Memory
from agent_memory.entrypoints.mcp.server import build_server
from agent_memory.entrypoints.server.app import ServerConfig, create_app
from agent_memory.entrypoints.server.keys import KeyRing, hash_key, new_key
from server.test_mcp_hunt import _text, opened, serving

PROBLEM = "tag:agent-memory,2025:problem/"
MCP_BODY_LIMIT = 8 * 1024

KEYS: dict[str, dict[str, Any]] = {
    "A": {"tenant": "a"},
    "B": {"tenant": "b"},
    "AD": {"tenant": "a", "admin": True, "read_only": True},
    "AB": {"tenant": "a.b"},  # a tenant whose name starts with another's
    "ABD": {"tenant": "a.b", "admin": True},
    "BD": {"tenant": "b", "admin": True},
    "CA": {"tenant": "a", "user": "alice", "admin": True},  # admin bound to alice
    "CB": {"tenant": "a", "user": "bob"},
}


class Surfaces:
    """The MCP server and the HTTP service of one memory and one key file."""

    def __init__(self, memory: Memory, raw: dict[str, str], mcp_url: str, http_url: str) -> None:
        self.memory = memory
        self.raw = raw
        self.mcp_url = mcp_url
        self.http_url = http_url
        self.stack = contextlib.AsyncExitStack()
        self.sessions: dict[str, ClientSession] = {}
        self.http: dict[str, httpx.AsyncClient] = {}

    def headers(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.raw[name]}"}

    async def session(self, name: str) -> ClientSession:
        if name not in self.sessions:
            http = await self.stack.enter_async_context(
                httpx2.AsyncClient(headers=self.headers(name), timeout=60)
            )
            read, write = await self.stack.enter_async_context(
                streamable_http_client(self.mcp_url, http_client=http)
            )
            session = await self.stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            self.sessions[name] = session
        return self.sessions[name]

    async def client(self, name: str) -> httpx.AsyncClient:
        if name not in self.http:
            self.http[name] = await self.stack.enter_async_context(
                httpx.AsyncClient(base_url=self.http_url, headers=self.headers(name), timeout=60)
            )
        return self.http[name]


@contextlib.asynccontextmanager
async def surfaces(
    url: str | None = None, mcp_body_limit: int = 1024 * 1024
) -> AsyncIterator[Surfaces]:
    async with opened(url) as memory:
        raw = {name: new_key() for name in KEYS}
        entries = [
            {"id": f"key-{name}", "sha256": hash_key(raw[name]), **entry}
            for name, entry in KEYS.items()
        ]
        ring = KeyRing(text=json.dumps({"keys": entries}))
        mcp_app = build_server(memory=memory, keys=ring).streamable_http_app(
            max_request_body_size=mcp_body_limit
        )

        async def open_memory() -> Memory:
            return memory

        http_app = create_app(ServerConfig(rate=1e6, burst=10**6), ring, open_memory=open_memory)
        async with serving(mcp_app) as mcp_base, serving(http_app) as http_base:
            both = Surfaces(memory, raw, mcp_base + "/mcp", http_base)
            async with both.stack:
                yield both


async def call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """`{"ok": structured result}` or `{"error": typed body}` of one tool call."""
    result = await session.call_tool(tool, arguments)
    text = _text(result)
    assert "Traceback" not in text, text
    if result.is_error:
        return {"error": json.loads(text[text.index("{") :])["error"]}
    assert result.structured_content is not None, result
    return {"ok": result.structured_content}


def fact(content: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"content": content, "category": "preference", **extra}]


# -- arguments are taken with their JSON type ---------------------------------------------
#: (tool, arguments, the field at fault): a value of another JSON type than the
#: parameter's, which the SDK or pydantic's lax mode read as the parameter's.
MCP_WRONG_TYPES: list[tuple[str, dict[str, Any], str]] = [
    ("search_memories", {"user_id": "u", "query": "q", "limit": "5"}, "limit"),
    ("search_memories", {"user_id": "u", "query": "q", "limit": True}, "limit"),
    ("search_memories", {"user_id": "u", "query": "q", "limit": 5.0}, "limit"),
    ("search_memories", {"user_id": "u", "query": "q", "limit": 5.5}, "limit"),
    ("search_memories", {"user_id": "u", "query": "q", "limit": [5]}, "limit"),
    ("search_memories", {"user_id": 5, "query": "q"}, "user_id"),
    ("search_memories", {"user_id": "u", "query": {"q": 1}}, "query"),
    ("remember", {"user_id": "u", "namespace": "n", "facts": fact("x", confidence="0.9")},
     "facts.0.confidence"),
    ("remember", {"user_id": "u", "namespace": "n", "facts": fact("x", confidence=True)},
     "facts.0.confidence"),
    ("remember", {"user_id": "u", "namespace": "n", "facts": fact("x", confidence=[0.9])},
     "facts.0.confidence"),
    ("remember", {"user_id": "u", "namespace": True, "facts": fact("x")}, "namespace"),
    ("record_steps", {"agent": "x", "domain": "d", "request_id": "r",
                      "steps": [{"action": "ls", "outcome": 1}]}, "steps.0.outcome"),
    ("planning_context", {"agent": "x", "domain": "d", "request_id": 7}, "request_id"),
    ("forget", {"user_id": "u", "fact_id": 12}, "fact_id"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    MCP_WRONG_TYPES,
    ids=[f"{t}-{f}-{i}" for i, (t, _, f) in enumerate(MCP_WRONG_TYPES)],
)
async def test_mcp_takes_every_argument_with_its_json_type(
    tool: str, arguments: dict[str, Any], field: str
) -> None:
    """A fact's `confidence` sent as the string "0.9" or as `true` was read as
    the number 0.9 or 1.0 (pydantic's lax mode), though the tool's schema says
    number: every argument of another JSON type than its parameter's is
    `InvalidInput` naming it, and nothing is stored."""
    async with surfaces() as both:
        a = await both.session("A")
        answer = await call(a, tool, arguments)
        assert "error" in answer, (tool, arguments, answer)
        body = answer["error"]
        assert (body["type"], body.get("field")) == ("InvalidInput", field), body
        stored = await both.memory.users.facts(user_id="t/a/u/u")
        assert stored == [], stored


HTTP_WRONG_TYPES: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/users/remember", {"user_id": "u", "namespace": "n",
                            "facts": fact("x", confidence="0.9")}, "facts.0.confidence"),
    ("/v1/users/remember", {"user_id": "u", "namespace": "n",
                            "facts": fact("x", confidence=True)}, "facts.0.confidence"),
    ("/v1/users/search", {"user_id": "u", "query": "q", "min_score": "0.5"}, "min_score"),
    ("/v1/users/search", {"user_id": "u", "query": "q", "limit": "5"}, "limit"),
    ("/v1/users/search", {"user_id": "u", "query": "q", "limit": 5.0}, "limit"),
    ("/v1/requests/steps", {"request_id": "r", "steps": [{"action": "ls", "importance": "0.5"}]},
     "steps.0.importance"),
    ("/v1/requests/steps", {"request_id": "r", "steps": [{"action": "ls", "importance": True}]},
     "steps.0.importance"),
    ("/v1/requests/steps", {"request_id": "r", "steps": [{"action": "ls",
                                                          "started_at": 1700000000}]},
     "steps.0.started_at"),
    ("/v1/requests/steps", {"request_id": "r", "steps": [{"action": "ls",
                                                          "ended_at": "1700000000"}]},
     "steps.0.ended_at"),
    ("/v1/requests/steps", {"request_id": "r", "steps": [{"action": "ls", "started_at": True}]},
     "steps.0.started_at"),
    ("/v1/requests/context", {"request_id": "r",
                              "knowledge": [{"id": "k", "content": "c", "score": "1"}]},
     "knowledge.0.score"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "body", "field"),
    HTTP_WRONG_TYPES,
    ids=[f"{p.rsplit('/', 1)[1]}-{f}-{i}" for i, (p, _, f) in enumerate(HTTP_WRONG_TYPES)],
)
async def test_http_takes_every_field_with_its_json_type(
    path: str, body: dict[str, Any], field: str
) -> None:
    """The schema says types are strict, but `confidence`, `importance` and a
    knowledge item's `score` took "0.9" or `true` as a number, and a step's
    `started_at` took the number 1700000000 (or the string "1700000000") as a
    Unix time: each is now `422` naming the field, nothing recorded."""
    async with surfaces() as both:
        http = await both.client("A")
        started = await http.post(
            "/v1/requests", json={"agent": "x", "domain": "d", "request_id": "r"}
        )
        assert started.status_code == 201, started.text
        r = await http.post(path, json=body)
        assert r.status_code == 422, (path, body, r.text)
        assert r.json().get("field") == field, r.text
        assert await both.memory.users.facts(user_id="t/a/u/u") == []
        events = await both.memory.agents.events.user_events("t/a/u/u")
        assert events == []
        ok = await http.post(
            "/v1/requests/steps",
            json={"request_id": "r", "steps": [{"action": "ls",
                                                "started_at": "2026-01-02T03:04:05Z"}]},
        )  # fmt: skip
        assert ok.status_code == 200, ok.text  # an ISO-8601 text still reads


@pytest.mark.parametrize("since", ["1700000000", "1.7e9", " 42 ", "-1"])
async def test_http_events_take_since_as_iso_text_only(since: str) -> None:
    """`GET /v1/events?since=1700000000` was read as a Unix time: a
    `422` naming `since` now, as in the step bodies; ISO-8601 still reads."""
    async with surfaces() as both:
        http = await both.client("A")
        r = await http.get("/v1/events", params={"domain": "d", "since": since})
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "since", r.text
        r = await http.get("/v1/events", params={"domain": "d", "since": "2026-01-02T03:04:05Z"})
        assert r.status_code == 200, r.text


# -- the two surfaces agree -------------------------------------------------------------------
async def test_forgetting_a_fact_that_is_not_there_is_not_found_on_both_surfaces() -> None:
    """HTTP answers `404 not-found` for a fact id the user does not have (another
    user's fact, another tenant's, none at all), the MCP tool answered a
    receipt with `facts: 0` for the same input. Both now say not found, naming
    `fact_id`, and neither removes anything; an existing fact is forgotten on
    both."""
    async with surfaces() as both:
        a, b = await both.session("A"), await both.session("B")
        http_a = await both.client("A")
        for session, user in ((a, "u"), (a, "other"), (b, "u")):
            arguments = {"user_id": user, "namespace": "n", "facts": fact(f"User {user} likes tea")}
            answer = await call(session, "remember", arguments)
            assert "ok" in answer, answer
        (mine,) = await both.memory.users.facts(user_id="t/a/u/u")
        (others,) = await both.memory.users.facts(user_id="t/a/u/other")
        (b_fact,) = await both.memory.users.facts(user_id="t/b/u/u")
        for missing in (others.id, b_fact.id, "nope", "null", "\u00e9\U0001d518", "x" * 512):
            answer = await call(a, "forget", {"user_id": "u", "fact_id": missing})
            assert "error" in answer, (missing, answer)
            body = answer["error"]
            assert (body["type"], body.get("field")) == ("NotFound", "fact_id"), body
            assert "t/a/" not in body["message"], body
            r = await http_a.post("/v1/users/facts/forget",
                                  json={"user_id": "u", "fact_id": missing})  # fmt: skip
            assert r.status_code == 404, r.text
            assert r.json().get("field") == "fact_id", r.text
        for refused in ("x" * 513, " ", "a\x00b"):  # not an id: refused alike, naming it
            answer = await call(a, "forget", {"user_id": "u", "fact_id": refused})
            assert answer.get("error", {}).get("field") == "fact_id", answer
            assert answer["error"]["type"] == "InvalidInput", answer
            r = await http_a.post("/v1/users/facts/forget", json={"user_id": "u",
                                                                  "fact_id": refused})  # fmt: skip
            assert (r.status_code, r.json().get("field")) == (422, "fact_id"), r.text
            assert r.json()["type"] == PROBLEM + "invalid-input", r.text
        for user, left in (("u", 1), ("other", 1)):
            assert len(await both.memory.users.facts(user_id=f"t/a/u/{user}")) == left
        assert len(await both.memory.users.facts(user_id="t/b/u/u")) == 1
        answer = await call(a, "forget", {"user_id": "u", "fact_id": mine.id})
        assert answer.get("ok", {}).get("facts") == 1, answer
        r = await http_a.post("/v1/users/facts/forget", json={"user_id": "other",
                                                              "fact_id": others.id})  # fmt: skip
        assert (r.status_code, r.json()["facts"]) == (200, 1), r.text


FACTS: list[dict[str, Any]] = [
    {"content": "User wrote a summary of the session", "category": "summary"},
    {"content": "User likes tea", "category": "preference", "confidence": 1},
    {"content": "User likes tea", "category": "identity", "confidence": -0.0},
    {"content": "User likes tea", "category": "context", "confidence": 1.0000001},
    {"content": "User likes tea", "category": "chitchat"},
    {"content": "y" * 100_001, "category": "preference"},
    {"content": {"text": "User likes tea"}, "category": "preference"},
    {"content": "x\u2028y", "category": "relationship"},
]


@pytest.mark.parametrize("item", FACTS, ids=[f"fact-{i}" for i in range(len(FACTS))])
async def test_a_fact_gets_the_same_verdict_over_mcp_and_http(item: dict[str, Any]) -> None:
    """`remember` over MCP and `POST /v1/users/remember` take a fact alike:
    a session summary (category `summary`) was stored over HTTP and refused
    over MCP."""
    async with surfaces() as both:
        arguments = {"user_id": "u", "namespace": "n", "facts": [item]}
        answer = await call(await both.session("A"), "remember", arguments)
        r = await (await both.client("B")).post("/v1/users/remember", json=arguments)
        if r.status_code == 200:
            assert "ok" in answer, (item, answer)
            assert answer["ok"]["operations"] == r.json()["report"]["details"]["operations"]
        else:
            assert r.status_code == 422, r.text
            assert answer.get("error", {}).get("field") == r.json()["field"], (answer, r.text)
        mine = await both.memory.users.facts(user_id="t/a/u/u")
        theirs = await both.memory.users.facts(user_id="t/b/u/u")
        assert [(f.kind, f.content) for f in mine] == [(f.kind, f.content) for f in theirs]


JSON_VALUES = st.one_of(
    st.sampled_from(["u", "", " ", "\t", "a\x00b", "x" * 1025, "\u00e9" * 300, "null", "5",
                     "\U0001d518", "t/b/u/u", "\u2028", "x" * 70_000]),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=8),
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, 5, 100, 101, 150, 200, 201, -1, 10**20, 0.5, 5.0, -0.0]),
    st.lists(st.sampled_from(["u", 1]), max_size=2),
    st.dictionaries(st.sampled_from(["a", "user_id"]), st.sampled_from(["u", 1]), max_size=1),
)  # fmt: skip


@pytest.fixture(scope="module")
def parity() -> Iterator[tuple[asyncio.AbstractEventLoop, Surfaces]]:
    """Both surfaces on a private event loop (hypothesis drives the examples)."""
    loop = asyncio.new_event_loop()
    ready, done = asyncio.Event(), asyncio.Event()
    state: dict[str, Surfaces] = {}

    async def hold() -> None:
        async with surfaces() as both:
            a = await both.session("A")
            answer = await call(a, "remember", {"user_id": "u", "namespace": "n",
                                                "facts": fact("User u likes tea")})  # fmt: skip
            assert "ok" in answer, answer
            await both.client("A")
            state["both"] = both
            ready.set()
            await done.wait()

    holder = loop.create_task(hold())
    waiter = loop.create_task(ready.wait())
    loop.run_until_complete(asyncio.wait([holder, waiter], return_when=asyncio.FIRST_COMPLETED))
    if holder.done():
        holder.result()
    try:
        yield loop, state["both"]
    finally:
        done.set()
        loop.run_until_complete(holder)
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.wait(left))
        loop.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=st.sampled_from(["user_id", "query", "namespace", "limit"]), value=JSON_VALUES)
@example(name="query", value="")
@example(name="limit", value=150)
@example(name="limit", value=200)
@example(name="limit", value=201)
@example(name="limit", value="5")
@example(name="user_id", value="a\x00b")
@example(name="namespace", value=None)
def test_a_search_gets_the_same_verdict_over_mcp_and_http(
    parity: tuple[asyncio.AbstractEventLoop, Surfaces], name: str, value: Any
) -> None:
    """`search_memories` over MCP and `POST /v1/users/search` over HTTP take the
    same arguments: one value in one of them is accepted by both (with the
    same facts found) or refused by both, naming the same field. An empty
    query was refused over MCP and searched over HTTP; a limit of 101..200
    was refused over MCP and read over HTTP."""
    loop, both = parity
    arguments: dict[str, Any] = {"user_id": "u", "query": "tea", name: value}

    async def check() -> None:
        answer = await call(await both.session("A"), "search_memories", arguments)
        r = await (await both.client("A")).post("/v1/users/search", json=arguments)
        assert r.status_code in (200, 403, 422), r.text
        if r.status_code == 200:
            assert "ok" in answer, (arguments, answer, r.text)
            assert [x["content"] for x in answer["ok"]["results"]] == [
                x["fact"]["content"] for x in r.json()["results"]
            ], (answer, r.text)
        else:
            assert "error" in answer, (arguments, answer, r.text)
            assert answer["error"].get("field") == r.json().get("field"), (answer, r.text)

    loop.run_until_complete(check())


# -- the MCP transport answers JSON-RPC bodies --------------------------------------------------
def _rpc(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "recall", "arguments": arguments}}  # fmt: skip


async def test_an_oversized_mcp_body_is_answered_with_a_json_rpc_error() -> None:
    """The SDK answers a body over the limit with `413` and the plain text
    "Request body too large"; a JSON-RPC client cannot read that as an answer.
    It is now a JSON-RPC error body (`id: null`, code -32600, saying the
    limit), whether the body's size was declared or streamed; a body within
    the limit is still served, and without a key it is still a 401."""
    async with surfaces(mcp_body_limit=MCP_BODY_LIMIT) as both:
        big = json.dumps(_rpc({"user_id": "u", "namespace": "n", "request": "x" * 20_000}))
        accept = {"Accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(timeout=30) as h:

            async def chunks() -> AsyncIterator[bytes]:
                for i in range(0, len(big), 1000):
                    yield big[i : i + 1000].encode()

            for content in (big.encode(), chunks()):
                r = await h.post(
                    both.mcp_url,
                    content=content,
                    headers={**both.headers("A"), **accept, "content-type": "application/json"},
                )
                assert r.status_code == 413, r.text
                assert r.headers["content-type"].startswith("application/json"), r.headers
                doc = r.json()
                assert (doc["jsonrpc"], doc["id"], doc["error"]["code"]) == ("2.0", None, -32600)
                assert str(MCP_BODY_LIMIT) in doc["error"]["message"], doc
            r = await h.post(both.mcp_url, content=big.encode(),
                             headers={**accept, "content-type": "application/json"})  # fmt: skip
            assert r.status_code == 401, r.text
        a = await both.session("A")
        # the SDK's own client reads it as the call's error, and the session goes on
        too_big = {"user_id": "u", "namespace": "n", "request": "x" * 20_000}
        with pytest.raises(MCPError, match="Request body too large"):
            await asyncio.wait_for(a.call_tool("recall", too_big), 20)
        answer = await call(a, "recall", {"user_id": "u", "namespace": "n", "request": "x" * 100})
        assert "ok" in answer, answer


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"content-type": "text/plain"}, 400),
        ({"content-type": "application/json", "host": "evil.example:80"}, 421),
        ({"content-type": "application/json", "origin": "http://evil.example"}, 403),
    ],
    ids=["content-type", "host", "origin"],
)
async def test_every_mcp_transport_refusal_is_a_json_rpc_error(
    headers: dict[str, str], status: int
) -> None:
    """The SDK's transport checks (content type, DNS-rebinding Host and Origin)
    answer plain text ("Invalid Content-Type header"): each is now a JSON-RPC
    error body with the same status, saying what was refused."""
    async with surfaces() as both:
        body = json.dumps(_rpc({"user_id": "u", "namespace": "n"})).encode()
        accept = {"Accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(timeout=30) as h:
            r = await h.post(
                both.mcp_url, content=body, headers={**both.headers("A"), **accept, **headers}
            )
        assert r.status_code == status, r.text
        assert r.headers["content-type"].startswith("application/json"), (r.headers, r.text)
        doc = r.json()
        assert (doc["jsonrpc"], doc["id"], doc["error"]["code"]) == ("2.0", None, -32600), doc
        assert doc["error"]["message"], doc


# -- audit isolation ----------------------------------------------------------------------------
async def _audit_pages(
    http: httpx.AsyncClient, limit: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every entry an admin key reads, page by page, and the cursors it got."""
    found: list[dict[str, Any]] = []
    cursors: list[str] = []
    before: str | None = None
    while True:
        params: dict[str, Any] = {"limit": limit}
        if before is not None:
            params["before"] = before
        r = await http.get("/v1/audit", params=params)
        assert r.status_code == 200, r.text
        doc = r.json()
        found += doc["entries"]
        before = doc["next"]
        if before is None:
            return found, cursors
        cursors.append(before)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_no_audit_read_reveals_another_tenants_or_users_entries(
    backend: str, tmp_path: Any
) -> None:
    """Forgets by keys of tenants `a`, `a.b` (a name that starts with `a`) and
    `b`, over MCP and HTTP, for the same user ids (unicode ones too): each
    admin key pages exactly its own tenant's entries (every page size), the
    admin key bound to alice exactly the entries about alice; a cursor of one
    key's trail given to another key's is `422 invalid-input` naming
    `before`; a cursor crafted from another trail's position pages the
    caller's own trail only; no refusal names another tenant's ids."""
    url = None if backend == "memory" else f"sqlite:///{tmp_path / 'audit.db'}"
    mark = uuid.uuid4().hex[:8]
    users = ["alice", "bob", f"\u00e9l\u00e8ve-{mark}", "t/b/u/alice"]
    async with surfaces(url) as both:
        for key in ("A", "AB", "B"):
            session, http = await both.session(key), await both.client(key)
            for user in users:
                arguments = {"user_id": user, "namespace": "n", "facts": fact(f"{key} {user}")}
                answer = await call(session, "remember", arguments)
                assert "ok" in answer, answer
                answer = await call(session, "forget", {"user_id": user, "namespace": "n"})
                assert "ok" in answer, answer
                r = await http.post("/v1/users/forget", json={"user_id": user})
                assert r.status_code == 200, r.text
        cb = await both.session("CB")
        assert "ok" in await call(cb, "forget", {"user_id": "bob"})
        entries = [e.as_json() async for e in both.memory.audit.entries()]
        expected = {
            "AD": {e["id"] for e in entries if e["tenant"] == "a"},
            "ABD": {e["id"] for e in entries if e["tenant"] == "a.b"},
            "BD": {e["id"] for e in entries if e["tenant"] == "b"},
            "CA": {e["id"] for e in entries if e["tenant"] == "a" and e["subject"] == "alice"},
        }
        assert all(expected.values()), expected
        cursors: dict[str, list[str]] = {}
        for key, ids in expected.items():
            http = await both.client(key)
            for limit in (1, 3, 200):
                found, got = await _audit_pages(http, limit)
                assert len(found) == len({e["id"] for e in found}), "an entry repeated"
                assert {e["id"] for e in found} == ids, (key, limit)
                for e in found:  # the caller's own ids, never a stored owner
                    assert e["subject"] in users, e
                    assert e["tenant"] == KEYS[key]["tenant"], e
                cursors.setdefault(key, []).extend(got)
        for key in expected:
            http = await both.client(key)
            for other, theirs in cursors.items():
                if other == key:
                    continue
                for cursor in theirs[:3]:
                    r = await http.get("/v1/audit", params={"before": cursor})
                    assert r.status_code == 422, (key, other, r.text)
                    doc = r.json()
                    assert (doc["type"], doc["field"]) == (PROBLEM + "invalid-input", "before")
                    # crafted: this trail's tag on the other trail's position
                    mine_tag = cursors[key][0].partition(".")[0]
                    crafted = mine_tag + "." + cursor.partition(".")[2]
                    r = await http.get("/v1/audit", params={"before": crafted, "limit": 200})
                    assert r.status_code == 200, r.text
                    assert {e["id"] for e in r.json()["entries"]} <= expected[key], (key, other)
        for bad in ("x", "." * 3, "abc.def", "\u00e9.\u00e9", "0" * 16 + ".e30=", " " * 5):
            r = await (await both.client("CA")).get("/v1/audit", params={"before": bad})
            assert r.status_code == 422, r.text
            assert r.json()["field"] == "before", r.text
        for key in ("A", "B", "CB"):
            r = await (await both.client(key)).get("/v1/audit")
            assert r.status_code == 403, r.text
            assert "entries" not in r.text

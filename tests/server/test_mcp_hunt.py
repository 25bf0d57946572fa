"""An integrator's hunt on the MCP server and the HTTP service.

Both run in process on a real loopback socket (uvicorn), driven by the
official MCP SDK client over streamable HTTP with API keys (and by httpx for
the HTTP service), on a memory:// or SQLite backend that a test can break on
purpose. What is checked: arguments are taken exactly as sent (a string that
looks like JSON is still that string, an unknown argument is refused), every
refusal is a typed body naming a parameter, a forget's receipt names no
stored scope (no tenant prefix, no other tenant's domain), key-bound access
holds under concurrent calls on one session, and the audit trail names the key
and tenant that made each forget."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import uvicorn
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import agent_memory
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Memory
from agent_memory.entrypoints.mcp.server import build_server
from agent_memory.entrypoints.server.app import ServerConfig, create_app
from agent_memory.entrypoints.server.keys import KeyRing, hash_key, new_key

PROBLEM = "tag:agent-memory,2025:problem/"
KEYS: dict[str, dict[str, Any]] = {
    "A": {"tenant": "a"},
    "B": {"tenant": "b"},
    "C": {"tenant": "a", "user": "alice"},
    "R": {"tenant": "a", "read_only": True},
    "M": {"tenant": "a", "admin": True},
}


class Keys:
    """The raw keys of `KEYS` and the `KeyRing` that accepts them."""

    def __init__(self) -> None:
        self.raw = {name: new_key() for name in KEYS}
        entries = [
            {"id": f"key-{name}", "sha256": hash_key(self.raw[name]), **entry}
            for name, entry in KEYS.items()
        ]
        self.ring = KeyRing(text=json.dumps({"keys": entries}))


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """`app` served by uvicorn on a free loopback port of this event loop."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), task.result()
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


@contextlib.asynccontextmanager
async def opened(url: str | None = None) -> AsyncIterator[Memory]:
    async with agent_memory.connect(
        url or f"memory://mcp-hunt-{uuid.uuid4().hex}", embedder=HashingEmbedder(32)
    ) as memory:
        yield memory


class Mcp:
    """An MCP server with keys over a live socket; `session(name)` opens an
    initialized SDK client session presenting key `name`."""

    def __init__(self, base: str, keys: Keys, memory: Memory) -> None:
        self.url = base + "/mcp"
        self.keys = keys
        self.memory = memory

    @contextlib.asynccontextmanager
    async def session(self, name: str) -> AsyncIterator[ClientSession]:
        headers = {"Authorization": f"Bearer {self.keys.raw[name]}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            streamable_http_client(self.url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


@contextlib.asynccontextmanager
async def mcp_server(url: str | None = None) -> AsyncIterator[Mcp]:
    keys = Keys()
    async with opened(url) as memory:
        app = build_server(memory=memory, keys=keys.ring).streamable_http_app()
        async with serving(app) as base:
            yield Mcp(base, keys, memory)


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, (tool, arguments, _text(result))
    assert result.structured_content is not None, result
    return result.structured_content  # type: ignore[no-any-return]


async def refused(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """The typed error body of a refused call (a tool result with is_error)."""
    result = await session.call_tool(tool, arguments)
    text = _text(result)
    assert result.is_error, (tool, arguments, text)
    assert "Traceback" not in text, text
    body: dict[str, Any] = json.loads(text[text.index("{") :])["error"]
    assert set(body) >= {"type", "message"}, body
    return body


def fact(content: str) -> list[dict[str, str]]:
    return [{"content": content, "category": "preference"}]


async def namespaces_of(session: ClientSession, user: str) -> set[str]:
    found = await ok(session, "search_memories", user_id=user, query="fact", limit=100)
    return {r["namespace"] for r in found["results"]}


# -- arguments are taken as sent ---------------------------------------------------------
JSON_LOOKING = ["null", "[]", "{}", "[1, 2]", '{"a": 1}', "true", "0", '"quoted"']


async def test_a_json_looking_namespace_is_that_namespace() -> None:
    """`forget(user_id, namespace="null")` forgets the namespace named "null",
    never the whole user; a search in it sees only it. The SDK decodes a string
    argument as JSON when the parameter is not a plain `str` (here the optional
    ones): "null" became None (forget everything, search every namespace) and
    "[]" a list (refused as not a string), though both are valid ids
    (a JavaScript client writes `String(null)` as "null")."""
    async with mcp_server() as mcp, mcp.session("A") as a:
        for ns in [*JSON_LOOKING, "keep"]:
            await ok(a, "remember", user_id="u", namespace=ns, facts=fact(f"User fact {ns}"))
        for ns in JSON_LOOKING:
            found = await ok(a, "search_memories", user_id="u", query="fact", namespace=ns)
            assert {r["namespace"] for r in found["results"]} == {ns}, (ns, found)
        for ns in JSON_LOOKING:
            receipt = await ok(a, "forget", user_id="u", namespace=ns)
            assert (receipt["namespace"], receipt["facts"]) == (ns, 1), (ns, receipt)
        assert await namespaces_of(a, "u") == {"keep"}


async def test_a_json_looking_fact_id_or_user_is_that_id() -> None:
    """`forget(user_id, fact_id="null")` forgets no fact (there is none with
    that id), not the whole user; `record_steps(user_id="null")` records for
    the user "null", not for no user."""
    async with mcp_server() as mcp, mcp.session("A") as a:
        await ok(a, "remember", user_id="u", namespace="n", facts=fact("User keeps a cat"))
        body = await refused(a, "forget", user_id="u", fact_id="null")  # no such fact
        assert (body["type"], body.get("field")) == ("NotFound", "fact_id"), body
        assert await namespaces_of(a, "u") == {"n"}, "a forget of fact 'null' erased the user"
        await ok(a, "record_steps", agent="x", domain="d", request_id="r", user_id="null",
                 steps=[{"action": "kubectl get pods"}])  # fmt: skip
        events = await mcp.memory.agents.events.user_events("t/a/u/null")
        assert [e.action for e in events] == ["kubectl get pods"], events


UNKNOWN: list[tuple[str, dict[str, Any], str]] = [
    ("forget", {"user_id": "u", "factid": "f-1"}, "factid"),
    ("forget", {"user_id": "u", "name_space": "n"}, "name_space"),
    ("search_memories", {"user_id": "u", "query": "cat", "namespaces": "n"}, "namespaces"),
    ("remember", {"user_id": "u", "namespace": "n",
                  "facts": [{"content": "User likes tea", "universal": True}]},
     "facts.0.universal"),
    ("record_steps", {"agent": "x", "domain": "d", "request_id": "r",
                      "steps": [{"action": "ls", "failure": "disk full"}]}, "steps.0.failure"),
    ("planning_context", {"agent": "x", "domain": "d", "request_id": "r",
                          "entity": "pod/web-1"}, "entity"),
]  # fmt: skip


async def test_an_unknown_argument_is_refused_naming_it() -> None:
    """A misspelt argument is `InvalidInput` naming it, and nothing happens;
    before, it was dropped without a word: `forget(user_id, factid=...)` (one
    fact meant) erased everything about the user."""
    async with mcp_server() as mcp, mcp.session("A") as a:
        await ok(a, "remember", user_id="u", namespace="n", facts=fact("User keeps a cat"))
        for tool, arguments, field in UNKNOWN:
            body = await refused(a, tool, **arguments)
            assert (body["type"], body.get("field")) == ("InvalidInput", field), (tool, body)
            assert body["message"].startswith(f"{field}: "), body
        assert await namespaces_of(a, "u") == {"n"}
        window = await mcp.memory.agents.events.window(
            "t/a/d/d", since=datetime.now(UTC) - timedelta(hours=1), limit=10
        )
        assert not window.events, window


# -- refusals name a parameter, as over HTTP -----------------------------------------------
async def test_a_blank_fact_or_no_step_is_refused_naming_the_argument() -> None:
    """A fact of only whitespace is refused naming `facts.0.content` (it named
    the library's internal `candidate.content`, no parameter of the tool), and
    `record_steps` with no step is refused as over HTTP (it answered
    `recorded: 0` and announced the agent's activity all the same)."""
    async with mcp_server() as mcp, mcp.session("A") as a:
        facts = [{"content": "User likes tea"}, {"content": " \t\n"}]
        body = await refused(a, "remember", user_id="u", namespace="n", facts=facts)
        assert (body["type"], body.get("field")) == ("InvalidInput", "facts.1.content"), body
        assert body["message"].startswith("facts.1.content: "), body
        body = await refused(a, "record_steps", agent="x", domain="d", request_id="r", steps=[])
        assert (body["type"], body.get("field")) == ("InvalidInput", "steps"), body
        assert await namespaces_of(a, "u") == set(), "a refused call stored a fact"
        assert await mcp.memory.leases.scan("t/a/d/d") == [], "a refused call announced"


@contextlib.asynccontextmanager
async def http_service(
    memory: Memory | None = None, **config: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Keys]]:
    """`agent-memory serve` in process on a live socket; a client with key A."""
    keys = Keys()
    async with contextlib.AsyncExitStack() as stack:
        mem = memory or await stack.enter_async_context(opened())

        async def open_memory() -> Memory:
            return mem

        settings_ = {"rate": 1e6, "burst": 10**6, **config}
        app = create_app(ServerConfig(**settings_), keys.ring, open_memory=open_memory)
        base = await stack.enter_async_context(serving(app))
        headers = {"Authorization": f"Bearer {keys.raw['A']}"}
        client = await stack.enter_async_context(
            httpx.AsyncClient(base_url=base, headers=headers, timeout=60)
        )
        yield client, keys


async def test_http_names_a_blank_fact_by_its_path_in_the_body() -> None:
    """`422 invalid-input` with `field: facts.1.content`, a path into the body
    as documented (it was `candidate.content`)."""
    async with http_service() as (http, _):
        facts = [{"content": "User likes tea", "category": "preference"},
                 {"content": "   ", "category": "preference"}]  # fmt: skip
        r = await http.post("/v1/users/remember", json={"user_id": "u", "namespace": "n",
                                                        "facts": facts})  # fmt: skip
        assert r.status_code == 422, r.text
        doc = r.json()
        assert (doc["type"], doc["field"]) == (PROBLEM + "invalid-input", "facts.1.content"), doc
        listed = await http.get("/v1/users/facts", params={"user_id": "u"})
        assert listed.json()["facts"] == [], "a refused body stored a fact"


@pytest.mark.parametrize("action", ["", "   ", "\n\t"])
async def test_http_refuses_a_blank_step_action_naming_it(action: str) -> None:
    """A step's action that is empty or only whitespace: `422` naming
    `steps.0.action`, as the MCP tool refuses it; nothing is recorded."""
    async with http_service() as (http, _):
        started = await http.post(
            "/v1/requests", json={"agent": "a", "domain": "d", "request_id": "r"}
        )
        assert started.status_code == 201, started.text
        r = await http.post(
            "/v1/requests/steps", json={"request_id": "r", "steps": [{"action": action}]}
        )
        assert r.status_code == 422, r.text
        doc = r.json()
        assert doc["field"] == "steps.0.action", doc
        # empty: below the schema's min_length (as an empty fact); blank: invalid-input
        kind = "validation-failed" if action == "" else "invalid-input"
        assert doc["type"] == PROBLEM + kind, doc


@pytest.mark.parametrize(
    "query", ["user_id=%FF", "user_id=ok%C3", "user_id=a&lim%FFit=2", "user_id=%ED%A0%80"]
)
async def test_http_refuses_a_query_parameter_that_is_not_utf8(query: str) -> None:
    """`?user_id=%FF` was read as U+FFFD, so different invalid bytes named one
    user: refused as `invalid-input` naming the parameter."""
    async with http_service() as (http, _):
        r = await http.get(f"/v1/users/facts?{query}")
        assert r.status_code == 422, r.text
        doc = r.json()
        assert doc["type"] == PROBLEM + "invalid-input", doc
        assert doc["field"] == ("lim\ufffdit" if "lim" in query else "user_id"), doc
        ok = await http.get("/v1/users/facts?user_id=%C3%A9t%C3%A9+x")  # valid UTF-8 still reads
        assert ok.status_code == 200, ok.text


# -- a forget's receipt names no stored scope --------------------------------------------
def _flaky_knowledge(memory: Memory) -> None:
    """The store fails every listing of a domain's knowledge fragments (a
    backend that drops queries under load), so a forget reports a failure for
    each domain it visits: every domain of the deployment."""
    store = memory.users.store
    listing = store.list

    async def list_(owner: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("namespace") == "knowledge":
            raise RuntimeError(f"connection reset while listing {owner}")
        return await listing(owner, *args, **kwargs)

    store.list = list_  # type: ignore[method-assign]


async def _tenant_b_domain(memory: Memory, domain: str) -> None:
    """Tenant b works in `domain` (its events are in the deployment)."""
    async with memory.agents.request(agent="b1", domain=f"t/b/d/{domain}", request_id="r") as req:
        report = await req.record([agent_memory.Step(action="kubectl get pods")])
    assert report.ok, report


def _names_no_scope(receipt: dict[str, Any], secret: str) -> None:
    text = json.dumps(receipt, ensure_ascii=False)
    assert secret not in text, receipt  # another tenant's domain name
    assert "t/a/" not in text, receipt
    assert "t/b/" not in text, receipt
    assert receipt["failures"], receipt  # the listing failed: the receipt says so
    for failure in receipt["failures"]:
        operation, _, error = failure.partition(": ")
        assert (operation, error) == ("knowledge", "RuntimeError"), receipt


async def test_a_forget_receipt_over_mcp_names_no_other_tenants_domain() -> None:
    """A forget visits the knowledge of every domain of the deployment; when a
    visit fails, the receipt's `failures` said which domain:
    `knowledge t/b/d/<b's domain>: RuntimeError`, so tenant a's key read tenant
    b's domain names (and its own stored prefixes). Now each failure is its
    operation and error type only."""
    secret = f"merger-{uuid.uuid4().hex[:8]}"
    async with mcp_server() as mcp, mcp.session("A") as a:
        await _tenant_b_domain(mcp.memory, secret)
        await ok(a, "remember", user_id="u", namespace="n", facts=fact("User keeps a cat"))
        _flaky_knowledge(mcp.memory)
        receipt = await ok(a, "forget", user_id="u")
        assert receipt["facts"] == 1, receipt
        _names_no_scope(receipt, secret)


async def test_a_forget_receipt_over_http_names_no_other_tenants_domain() -> None:
    secret = f"merger-{uuid.uuid4().hex[:8]}"
    body = {"user_id": "u", "namespace": "n", "facts": fact("User keeps a cat")}
    async with opened() as memory, http_service(memory) as (http, _):
        await _tenant_b_domain(memory, secret)
        r = await http.post("/v1/users/remember", json=body)
        assert r.status_code == 200, r.text
        _flaky_knowledge(memory)
        r = await http.post("/v1/users/forget", json={"user_id": "u"})
        assert r.status_code == 200, r.text
        assert r.json()["facts"] == 1, r.text
        _names_no_scope(r.json(), secret)


# -- concurrent calls on one session: each keeps its own identity ---------------------------
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_concurrent_calls_keep_their_keys_in_results_and_the_audit_trail(
    backend: str, tmp_path: Path
) -> None:
    """Three keys (tenant a, tenant b, a key of tenant a bound to alice), one
    session each, fire their calls all at once on their sessions: every
    recall sees its own tenant's fact only, the bound key's calls for another
    user are refused, and each forget's audit entry names the key and tenant
    that made it, the caller's user id as subject, and no fact text."""
    url = None if backend == "memory" else f"sqlite:///{tmp_path / 'hunt.db'}"
    mark = uuid.uuid4().hex[:8]
    users = [f"user-{i}" for i in range(6)]
    async with (
        mcp_server(url) as mcp,
        mcp.session("A") as a,
        mcp.session("B") as b,
        mcp.session("C") as c,
    ):

        async def remember(session: ClientSession, tenant: str, user: str) -> None:
            text = f"User {user} of {tenant} keeps {mark}"
            await ok(session, "remember", user_id=user, namespace="n", facts=fact(text))

        await asyncio.gather(
            *(remember(s, t, u) for s, t in ((a, "a"), (b, "b")) for u in [*users, "alice"])
        )

        async def recall(session: ClientSession, tenant: str, user: str) -> None:
            found = await ok(session, "recall", user_id=user, namespace="n", request=mark)
            assert [f["content"] for f in found["facts"]] == [
                f"User {user} of {tenant} keeps {mark}"
            ], (tenant, user, found)

        async def denied(user: str) -> None:
            body = await refused(c, "search_memories", user_id=user, query=mark)
            assert (body["type"], body.get("field")) == ("PermissionDenied", "user_id"), body

        async def forget(session: ClientSession, user: str) -> None:
            receipt = await ok(session, "forget", user_id=user)
            assert (receipt["user_id"], receipt["facts"]) == (user, 1), receipt

        calls: list[Awaitable[None]] = []
        for user in users:
            calls += [recall(a, "a", user), recall(b, "b", user), denied(user)]
        calls += [recall(c, "a", "alice"), recall(b, "b", "alice")]
        await asyncio.gather(*calls)
        forgets = [forget(a, u) for u in users[:3]] + [forget(b, u) for u in users[3:]]
        await asyncio.gather(*forgets, forget(c, "alice"))
        for user in users[:3]:  # a's forgets left b's users alone, and the reverse
            await recall(b, "b", user)
        for user in users[3:]:
            await recall(a, "a", user)
        await recall(b, "b", "alice")

        entries = [e async for e in mcp.memory.audit.entries()]
    seen = {(e.subject, e.tenant, e.caller, e.operation) for e in entries}
    expected = {(u, "a", "key-A", "forget_user") for u in users[:3]}
    expected |= {(u, "b", "key-B", "forget_user") for u in users[3:]}
    expected.add(("alice", "a", "key-C", "forget_user"))
    assert seen == expected, entries
    assert len(entries) == len(expected), entries
    assert mark not in json.dumps([e.as_json() for e in entries]), entries


# -- a fuzz of every tool with adversarial arguments -------------------------------------
TOOLS: dict[str, set[str]] = {
    "remember": {"user_id", "namespace", "facts"},
    "recall": {"user_id", "namespace", "request"},
    "forget": {"user_id", "namespace", "fact_id"},
    "search_memories": {"user_id", "query", "namespace", "limit"},
    "record_steps": {"agent", "domain", "request_id", "steps", "user_id"},
    "planning_context": {"agent", "domain", "request_id", "entity_type", "entity_id", "doing"},
}
#: what a refusal may be: the caller's mistakes, never `InternalError`
TYPED = {"InvalidInput", "ScopeRequired", "PermissionDenied", "NotFound"}

texts = st.one_of(
    st.sampled_from(["alice", "bob", "n", "k8s", "", " ", "\t\n", "null", "[]", "{}", "true",
                     "1e400", "t/b/u/bob", "t/a/u/bob", "../b", "*", "%", "_", "a\x00b",
                     "\u200b", "\U0001d518", "\u2028", "x" * 1025, "é" * 600]),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
)  # fmt: skip
values = st.one_of(
    texts,
    st.none(),
    st.booleans(),
    st.sampled_from([-1, 0, 1, 5, 100, 101, 10**30, -(10**30), 0.5, 1e308]),
    st.lists(texts, max_size=2),
    st.dictionaries(texts, texts, max_size=2),
)
items = st.one_of(
    st.fixed_dictionaries(
        {"content": texts, "action": texts},
        optional=dict.fromkeys(
            ["category", "confidence", "outcome", "response", "failure_cause", "extra"], values
        ),
    ),
    values,
)
SECRET = f"Secret kept {uuid.uuid4().hex}"


@st.composite
def tool_calls(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    key = draw(st.sampled_from(["A", "C", "R"]))
    tool = draw(st.sampled_from(sorted(TOOLS)))
    names = [*sorted(TOOLS[tool]), "bogus"]
    arguments: dict[str, Any] = {}
    for name in names:
        if name == "bogus" and draw(st.integers(0, 9)) > 0:
            continue
        if name in ("facts", "steps"):
            arguments[name] = draw(st.one_of(st.lists(items, max_size=3), values))
        elif draw(st.integers(0, 4)) > 0:
            arguments[name] = draw(values)
    return key, tool, arguments


@pytest.fixture(scope="module")
def fuzz_sessions() -> Any:
    """Sessions of keys A, C (bound to alice) and R (read-only) of tenant a on
    one MCP server, on a private event loop (hypothesis drives the examples);
    tenant a's bob and tenant b's alice each keep a secret fact."""
    loop = asyncio.new_event_loop()
    state: dict[str, Any] = {}
    ready, done = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with (
            mcp_server() as mcp,
            mcp.session("A") as a,
            mcp.session("B") as b,
            mcp.session("C") as c,
            mcp.session("R") as r,
        ):
            await ok(a, "remember", user_id="bob", namespace="n", facts=fact(SECRET))
            await ok(b, "remember", user_id="alice", namespace="n", facts=fact(SECRET))
            state.update(mcp=mcp, A=a, B=b, C=c, R=r)
            ready.set()
            await done.wait()

    holder = loop.create_task(hold())
    waiter = loop.create_task(ready.wait())
    loop.run_until_complete(asyncio.wait([holder, waiter], return_when=asyncio.FIRST_COMPLETED))
    if holder.done():
        holder.result()
    try:
        yield loop, state
    finally:
        done.set()
        loop.run_until_complete(holder)
        left = asyncio.all_tasks(loop)  # the SSE library's shutdown watcher
        for task in left:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(call=tool_calls())
@example(call=("A", "forget", {"user_id": "bob", "namespace": "null"}))
@example(call=("A", "forget", {"user_id": "bob", "fact_id": "null"}))
@example(call=("A", "forget", {"user_id": "bob", "factid": "x"}))
@example(call=("A", "remember", {"user_id": "u", "namespace": "n", "facts": [{"content": " "}]}))
@example(call=("C", "forget", {"user_id": "bob"}))
@example(call=("R", "forget", {"user_id": "bob", "namespace": "n"}))
@example(call=("A", "search_memories", {"user_id": "u", "query": "q", "limit": 10**30}))
def test_every_tool_answers_adversarial_arguments_with_a_typed_result(
    fuzz_sessions: Any, call: tuple[str, str, dict[str, Any]]
) -> None:
    """Whatever the arguments, a call answers a result (no transport error, no
    `InternalError`, no traceback, no stored prefix); a refusal is a typed body
    whose `field` is a parameter of the tool (or the unknown argument); and the
    secrets of tenant a's bob (forgettable by key A only with bob's id) and of
    tenant b's alice stay put unless key A named bob and a forget went through."""
    loop, state = fuzz_sessions
    key, tool, arguments = call
    session: ClientSession = state[key]

    async def check() -> None:
        result = await session.call_tool(tool, arguments)
        text = _text(result)
        assert "Traceback" not in text, text
        assert "t/a/" not in text, text
        assert "t/b/" not in text, text
        assert SECRET not in text or (key == "A" and arguments.get("user_id") == "bob"), text
        if result.is_error:
            body = json.loads(text[text.index("{") :])["error"]
            assert body["type"] in TYPED, (call, body)
            if body["type"] == "InvalidInput":
                field = body.get("field")
                assert isinstance(field, str), body
                assert field.split(".")[0] in TOOLS[tool] | set(arguments), (call, body)
            if body["type"] == "NotFound":  # a fact the user does not have, as over HTTP
                assert (tool, body.get("field")) == ("forget", "fact_id"), (call, body)
            if key == "R" and tool in ("remember", "forget", "record_steps", "planning_context"):
                assert body["type"] in ("PermissionDenied", "InvalidInput"), body
        else:
            assert key != "R" or tool in ("recall", "search_memories"), (call, "a write")
            assert key != "C" or arguments.get("user_id", "alice") == "alice", (call, "bound")
            assert set(arguments) <= TOOLS[tool], (call, "an unknown argument was dropped")
        # tenant b's alice is never reached from tenant a; bob only by A naming him
        found = await ok(state["B"], "recall", user_id="alice", namespace="n")
        assert [f["content"] for f in found["facts"]] == [SECRET], found
        if (key, arguments.get("user_id"), tool) != ("A", "bob", "forget"):
            found = await ok(state["A"], "recall", user_id="bob", namespace="n")
            if [f["content"] for f in found["facts"]] != [SECRET]:  # forgotten by A: put back
                await ok(state["A"], "remember", user_id="bob", namespace="n", facts=fact(SECRET))
                raise AssertionError(f"{call} removed tenant a's bob's fact")
        else:
            await ok(state["A"], "remember", user_id="bob", namespace="n", facts=fact(SECRET))

    loop.run_until_complete(check())


# -- the user-profile resource addresses every id ---------------------------------------------
RESOURCE_IDS = ["u:42", "x:y", "..", "a/../..", "/root", "C:\\x", "a%2Fb", "ann lee", "é/ü"]


async def test_the_profile_resource_reads_every_id_the_tools_take() -> None:
    """The SDK's resource templates refuse values that look like file paths
    (`..`, a leading `/`, a drive letter as in `u:42`) with "Unknown resource":
    ids here are opaque strings, never paths, so the profile of user "u:42"
    (or of namespace "k:prod") could not be read at all. A NUL is the typed
    `InvalidInput` naming the argument, as in the tools."""
    from urllib.parse import quote

    async with mcp_server() as mcp, mcp.session("A") as a:
        for user in RESOURCE_IDS:
            for ns in ("n", "k:prod"):
                text = f"User {user} in {ns} likes tea"
                await ok(a, "remember", user_id=user, namespace=ns, facts=fact(text))
                uri = f"user-profile://{quote(user, safe='')}/{quote(ns, safe='')}"
                read = await a.read_resource(uri)
                shown = " ".join(getattr(c, "text", "") for c in read.contents)
                assert json.dumps(text, ensure_ascii=False)[1:-1] in shown, (uri, shown)
        for uri, field in (("user-profile://u%00/n", "user_id"),
                           ("user-profile://u/n%00", "namespace")):  # fmt: skip
            with pytest.raises(MCPError) as refused_read:
                await a.read_resource(uri)
            body = refused_read.value.data["error"]
            assert (body["type"], body.get("field")) == ("InvalidInput", field), (uri, body)


# -- a backend's error reaches the client by its type, not its internals ---------------------
INTERNALS = ["10.9.8.7", "memory_admin", "/var/lib/agent-memory", "t/a/", "Secret row"]
BACKEND_ERRORS: list[Callable[[], Exception]] = [
    lambda: agent_memory.BackendUnavailable(
        "postgres", 'OperationalError: connection to server at "10.9.8.7", port 5432 failed: '
        'FATAL: password authentication failed for user "memory_admin"'
    ),
    lambda: agent_memory.StorageCorrupted(
        "sqlite", "/var/lib/agent-memory/memory.db", "row of t/a/u/bob: 'Secret row'",
        "restore it from a backup",
    ),
    lambda: agent_memory.LeaseNotHeld("t/a/d/k8s/claim", "t/a/d/k8s/r1", "t/a/d/k8s/r0"),
    lambda: agent_memory.DimensionMismatch(32, 16),
]  # fmt: skip


@pytest.mark.parametrize("make", BACKEND_ERRORS, ids=lambda make: type(make()).__name__)
async def test_a_backend_error_over_mcp_names_its_type_not_its_internals(
    make: Callable[[], Exception],
) -> None:
    """The HTTP service answers a backend's failure with its problem type and
    no message (`backend-unavailable`, detail `BackendUnavailable`); the MCP
    server sent the library's message verbatim: the database host and role of
    a driver error, a server file path, stored scopes of a lease. Now the body
    keeps the type and says what it means, without the message (the server log
    has it)."""
    error = make()
    async with mcp_server() as mcp, mcp.session("A") as a:

        async def broken(*_args: Any, **_kwargs: Any) -> Any:
            raise error

        mcp.memory.users.store.search = broken  # type: ignore[method-assign]
        body = await refused(a, "search_memories", user_id="bob", query="cat")
    assert body["type"] == type(error).__name__, body
    assert body["message"], body
    for internal in INTERNALS:
        assert internal not in json.dumps(body), (internal, body)


# -- stdio: concurrent calls on the one session ---------------------------------------------
async def test_concurrent_calls_over_stdio_each_get_their_own_answer(tmp_path: Path) -> None:
    """`agent-memory mcp` over stdio (the SDK's stdio client, SQLite): calls
    sent at once, good and bad mixed, each get their own answer; the bad ones
    a typed refusal naming the argument, the server keeps serving, and its
    log holds no traceback. Arguments are taken as sent there too."""
    from integrations.test_mcp import stdio_session

    url = f"sqlite:///{tmp_path / 'stdio.db'}"
    errlog = tmp_path / "err.log"
    users = [f"u{i}" for i in range(8)]
    async with stdio_session(url, errlog) as session:
        await asyncio.gather(*(ok(session, "remember", user_id=u, namespace="null",
                                  facts=fact(f"User {u} likes tea")) for u in users))  # fmt: skip

        async def mine(user: str) -> None:
            found = await ok(session, "search_memories", user_id=user, query="tea",
                             namespace="null")  # fmt: skip
            assert [r["content"] for r in found["results"]] == [f"User {user} likes tea"], found

        async def bad(field: str, **arguments: Any) -> None:
            body = await refused(session, "search_memories", **arguments)
            assert (body["type"], body.get("field")) == ("InvalidInput", field), body

        await asyncio.gather(
            *(mine(u) for u in users),
            bad("limit", user_id="u0", query="tea", limit=0),
            bad("user_id", user_id="\x00", query="tea"),
            bad("nmespace", user_id="u0", query="tea", nmespace="null"),
            bad("query", user_id="u0", query="x" * 70_000),
        )
        receipts = await asyncio.gather(
            *(ok(session, "forget", user_id=u, namespace="null") for u in users)
        )
        assert [(r["namespace"], r["facts"]) for r in receipts] == [("null", 1)] * len(users)
    assert "Traceback" not in errlog.read_text(), errlog.read_text()

"""The MCP tools name the offending argument as the HTTP service does: a pair
of arguments that go together (the missing one) or exclude each other (the
conflicting one), text that cannot be stored (NUL, a lone surrogate: the
field's problem, same message as over HTTP), and an id the library refuses.

In process, through the SDK's own client (`mcp.Client(server)`), so strings
with lone surrogates reach the tools as they are; a hypothesis fuzz checks
that every `InvalidInput` body names a non-empty field whose first part is one
of the tool's parameters."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from mcp import Client

import agent_memory
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.entrypoints.mcp.server import build_server

#: tool -> its parameters (as `build_server` declares them)
TOOLS: dict[str, set[str]] = {
    "remember": {"user_id", "namespace", "facts"},
    "recall": {"user_id", "namespace", "request"},
    "forget": {"user_id", "namespace", "fact_id"},
    "search_memories": {"user_id", "query", "namespace", "limit"},
    "record_steps": {"agent", "domain", "request_id", "steps", "user_id"},
    "planning_context": {"agent", "domain", "request_id", "entity_type", "entity_id", "doing"},
}


async def _errors(calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any] | None]:
    """Each call's error body (None when it succeeded), on a fresh in-memory store."""
    url = f"memory://mcp-fields-{uuid.uuid4().hex}"
    out: list[dict[str, Any] | None] = []
    async with (
        agent_memory.connect(url, embedder=HashingEmbedder(16)) as memory,
        Client(build_server(memory=memory)) as client,
    ):
        for tool, arguments in calls:
            result = await client.call_tool(tool, arguments)
            if not result.is_error:
                out.append(None)
                continue
            text = " ".join(getattr(c, "text", "") for c in result.content)
            assert "Traceback" not in text, text
            out.append(json.loads(text[text.index("{") :])["error"])
    return out


def _refused(body: dict[str, Any] | None, field: str) -> dict[str, Any]:
    assert body is not None, "the call succeeded"
    assert body["type"] == "InvalidInput", body
    assert body.get("field") == field, body
    assert body["message"].startswith(f"{field}: "), body
    return body


def test_pairs_name_the_missing_or_conflicting_argument() -> None:
    base = {"agent": "a", "domain": "k8s", "request_id": "r"}
    only_type, only_id, both = asyncio.run(
        _errors(
            [
                ("planning_context", {**base, "entity_type": "pod"}),
                ("planning_context", {**base, "entity_id": "web-1"}),
                ("forget", {"user_id": "u", "namespace": "n", "fact_id": "f"}),
            ]
        )
    )
    _refused(only_type, "entity_id")
    _refused(only_id, "entity_type")
    _refused(both, "fact_id")


def test_unstorable_text_is_the_fields_problem() -> None:
    """As over HTTP: a lone surrogate or NUL anywhere, in a nested fact or step
    too, is `InvalidInput` naming the argument's path, before anything is
    stored (a NUL fact was a silent fail-open failure before)."""
    fact = [{"content": "User likes tea"}]
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("forget", {"user_id": "\ud800"}, "user_id"),
        ("remember", {"user_id": "u", "namespace": "x\udfff", "facts": fact}, "namespace"),
        ("remember", {"user_id": "u", "namespace": "n", "facts": [{"content": "a\udc00"}]},
         "facts.0.content"),
        ("remember", {"user_id": "u", "namespace": "n", "facts": [{"content": "a\x00b"}]},
         "facts.0.content"),
        ("record_steps", {"agent": "a", "domain": "d", "request_id": "r",
                          "steps": [{"action": "kubectl\x00"}]}, "steps.0.action"),
        ("record_steps", {"agent": "a", "domain": "d", "request_id": "r",
                          "steps": [{"action": "x", "response": "\ud83d"}]}, "steps.0.response"),
        ("planning_context", {"agent": "a", "domain": "d", "request_id": "r",
                              "entity_type": "   ", "entity_id": "w"}, "entity_type"),
        ("search_memories", {"user_id": "u", "query": "tea\ud800"}, "query"),
    ]  # fmt: skip
    bodies = asyncio.run(_errors([(tool, args) for tool, args, _ in cases]))
    for (tool, _args, field), body in zip(cases, bodies, strict=True):
        refused = _refused(body, field)
        assert "\ud800" not in refused["message"], (tool, refused)
        if field in ("user_id", "namespace", "query", "facts.0.content", "steps.0.response"):
            assert "surrogate" in refused["message"] or "NUL" in refused["message"], refused
    recalled = asyncio.run(_errors([("recall", {"user_id": "u", "namespace": "n"})]))
    assert recalled == [None]


ident = st.text(alphabet="abxyz-_ é", min_size=1, max_size=8).filter(str.strip)
BAD: list[Any] = [None, 7, True, "", "   ", "a\x00b", "\ud800", "x" * 1025, "é" * 300, [], {}]
VALID: dict[str, dict[str, Any]] = {
    "remember": {"user_id": ident, "namespace": ident,
                 "facts": st.lists(st.fixed_dictionaries({"content": ident}), max_size=2)},
    "recall": {"user_id": ident, "namespace": ident, "request": ident},
    "forget": {"user_id": ident, "namespace": ident, "fact_id": ident},
    "search_memories": {"user_id": ident, "query": ident, "limit": st.integers(1, 20)},
    "record_steps": {"agent": ident, "domain": ident, "request_id": ident,
                     "steps": st.lists(st.fixed_dictionaries({"action": ident}), max_size=2),
                     "user_id": ident},
    "planning_context": {"agent": ident, "domain": ident, "request_id": ident,
                         "entity_type": ident, "entity_id": ident, "doing": ident},
}  # fmt: skip


def _unstorable(value: Any) -> bool:
    """Whether a string in `value` holds NUL or a lone surrogate."""
    if isinstance(value, str):
        return "\x00" in value or any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(_unstorable(v) for v in value.values())
    if isinstance(value, list):
        return any(_unstorable(v) for v in value)
    return False


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    tool = draw(st.sampled_from(sorted(VALID)))
    args = {
        name: draw(strategy)
        for name, strategy in VALID[tool].items()
        if draw(st.integers(0, 3)) > 0  # mostly present
    }
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(sorted(VALID[tool])))
        value = args.get(name)
        if isinstance(value, list) and value and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(value[0])))
            value[0][key] = draw(st.sampled_from(BAD))
        else:
            args[name] = draw(st.sampled_from(BAD))
    return tool, args


@settings(max_examples=60)
@given(call=calls())
@example(call=("planning_context", {"agent": "a", "domain": "d", "request_id": "r",
                                    "entity_id": "w"}))  # fmt: skip
@example(call=("forget", {"user_id": "u", "namespace": "n", "fact_id": "f"}))
@example(call=("remember", {"user_id": "u", "namespace": "n", "facts": [{"content": "\x00"}]}))
@example(call=("forget", {"user_id": "\ud800"}))
def test_every_invalid_input_names_a_parameter_of_the_tool(
    call: tuple[str, dict[str, Any]],
) -> None:
    tool, args = call
    (body,) = asyncio.run(_errors([(tool, args)]))
    if _unstorable(args):  # never accepted, never a fail-open success
        assert body is not None, (tool, args)
        assert body["type"] == "InvalidInput", body
    if body is None or body["type"] != "InvalidInput":
        return
    field = body.get("field")
    assert isinstance(field, str), body
    assert field, body
    assert field.split(".")[0] in TOOLS[tool], (tool, body)


def test_an_unexpected_failure_tells_the_client_no_internals() -> None:
    """An exception the library did not raise on purpose (here a store method
    that fails with a message holding stored text and a path) reaches the
    client as `InternalError`, with no word of its message; the server log has
    it. Before, the client got `{"type": "RuntimeError", "message": ...}`
    verbatim, unlike the HTTP service's `internal-error`."""

    async def run() -> dict[str, Any]:
        url = f"memory://mcp-unexpected-{uuid.uuid4().hex}"
        async with agent_memory.connect(url, embedder=HashingEmbedder(16)) as memory:
            store = memory.users.store

            async def broken(*_args: Any, **_kwargs: Any) -> Any:
                raise RuntimeError("SELECT secret-fact-text FROM /var/lib/agent-memory/x.db")

            store.search = broken  # type: ignore[method-assign]
            async with Client(build_server(memory=memory)) as client:
                result = await client.call_tool(
                    "search_memories", {"user_id": "u", "query": "coffee"}
                )
        assert result.is_error
        text = " ".join(getattr(c, "text", "") for c in result.content)
        return dict(json.loads(text[text.index("{") :])["error"])

    body = asyncio.run(run())
    assert body["type"] == "InternalError", body
    assert "secret-fact-text" not in json.dumps(body)
    assert "/var/lib" not in json.dumps(body)

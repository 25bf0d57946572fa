"""Over stdio every request gets an answer, malformed ones included.

A client that sends a request with an id waits for a message with that id.
The SDK's stdio transport answered nothing for a line it could not read as a
JSON-RPC message (not JSON, a `method` that is not a string, `params` that is
not an object, a lone surrogate in the text, a batch, an id that is neither a
string nor an integer): the client hung. These tests drive the real
`agent-memory mcp` process over its stdin and stdout."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_memory.entrypoints.mcp.envelopes import envelope_error

from .test_mcp_keys import McpServer, _initialize

SERVER = [sys.executable, "-m", "agent_memory.entrypoints.cli", "mcp", "--url"]
ROOT = Path(__file__).resolve().parents[2]


class _Wire:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def send(self, message: object) -> None:
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float = 20.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, "no answer within the timeout: the client would wait forever"
        answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return answer


@pytest.fixture
def wire(tmp_path: Path) -> Iterator[_Wire]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with open(tmp_path / "stderr.log", "wb") as err:
        proc = subprocess.Popen(
            [*SERVER, f"sqlite:///{tmp_path}/m.db"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
        )
        w = _Wire(proc)
        try:
            w.send(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "test", "version": "1"},
                    },
                }
            )
            assert w.receive(60)["id"] == 0
            w.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            yield w
        finally:
            proc.kill()
            proc.wait()


SURROGATE = (
    b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"remember",'
    b'"arguments":{"user_id":"u","facts":[{"text":"\\ud800","category":"preference"}]}}}'
)
CASES: list[tuple[str, object, object, int]] = [
    ("method not a string", {"jsonrpc": "2.0", "id": 1, "method": 123}, 1, types.INVALID_REQUEST),
    ("method a boolean", {"jsonrpc": "2.0", "id": "b", "method": True}, "b", types.INVALID_REQUEST),
    (
        "params not an object",
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": "oops"},
        3,
        types.INVALID_REQUEST,
    ),
    ("a lone surrogate", SURROGATE, 6, types.INVALID_PARAMS),
    ("not JSON", b'{"jsonrpc":"2.0","id":7,', None, types.PARSE_ERROR),
    ("no jsonrpc", {"id": 8, "method": "tools/list"}, 8, types.INVALID_REQUEST),
    ("a fractional id", {"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}, None, -32600),
    ("an object id", {"jsonrpc": "2.0", "id": {}, "method": "tools/list"}, None, -32600),
    ("a null id", {"jsonrpc": "2.0", "id": None, "method": "tools/list"}, None, -32600),
    ("a batch", [{"jsonrpc": "2.0", "id": 11, "method": "tools/list"}], None, -32600),
    ("a string", "tools/list", None, types.INVALID_REQUEST),
]


def test_every_malformed_request_is_answered_and_the_server_goes_on(wire: _Wire) -> None:
    """When this fails, the server read a malformed request and answered
    nothing (the receive times out): the client that sent it hangs."""
    for name, message, want_id, code in CASES:
        wire.send(message)
        got = wire.receive()
        assert got.get("id") == want_id, (name, got)
        assert got["error"]["code"] == code, (name, got)
    wire.send({"jsonrpc": "2.0", "id": 12, "method": "tools/list"})
    got = wire.receive()
    assert got["id"] == 12
    assert any(t["name"] == "remember" for t in got["result"]["tools"])


def test_a_lone_surrogate_is_named_by_its_path(wire: _Wire) -> None:
    wire.send(SURROGATE)
    got = wire.receive()
    assert "params.arguments.facts.0.text" in got["error"]["message"], got


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0"]) | _JSON,
        "id": st.integers() | st.text() | _JSON,
        "method": st.sampled_from(["tools/list", "ping", "tools/call"]) | _JSON,
        "params": st.dictionaries(st.text(max_size=5), _JSON, max_size=3) | _JSON,
        "result": _JSON,
        "error": _JSON,
    },
)


@given(message=_FIELDS | _JSON)
def test_a_request_with_an_id_is_either_read_or_answered_with_that_id(message: object) -> None:
    """For any message: refused, the answer carries the request's id when it is
    a valid one; not refused, the SDK reads it, and a message with an id and a
    method reads as a request (which the session answers), not as a notification."""
    line = json.dumps(message)
    refused = envelope_error(line)
    valid_id = isinstance(message, dict) and (
        isinstance(message.get("id"), str)
        or (isinstance(message.get("id"), int) and not isinstance(message.get("id"), bool))
    )
    if refused is not None:
        want = message["id"] if isinstance(message, dict) and valid_id else None
        if refused.error.code == types.PARSE_ERROR:
            want = None
        assert refused.id == want
        return
    if isinstance(message, dict) and "method" not in message and {"result", "error"} & set(message):
        return  # a response to the server's own request: never answered, even when malformed
    parsed = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    if isinstance(message, dict) and "id" in message and "method" in message:
        assert isinstance(parsed, types.JSONRPCRequest)


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    server = McpServer(tmp_path_factory.mktemp("mcp-envelopes"))
    try:
        yield server
    finally:
        server.stop()


def test_over_http_a_malformed_request_is_answered_behind_the_key_check(
    http_server: McpServer,
) -> None:
    """When this fails with 202, the SDK took a request whose id is neither a
    string nor an integer for a notification and never answered it; a 400
    without a key would mean the body was read before the key was checked."""
    r = _initialize(http_server, http_server.key["A"])
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Mcp-Session-Id": r.headers["mcp-session-id"],
        "Mcp-Protocol-Version": "2025-06-18",
        "Authorization": f"Bearer {http_server.key['A']}",
    }
    for name, message, want_id, code in CASES:
        body = message if isinstance(message, bytes) else json.dumps(message).encode()
        got = httpx.post(http_server.url, content=body, headers=headers, timeout=30)
        assert got.status_code == 400, (name, got.status_code, got.text)
        assert got.json()["id"] == want_id, (name, got.text)
        assert got.json()["error"]["code"] == code, (name, got.text)
    anonymous = {k: v for k, v in headers.items() if k != "Authorization"}
    body = json.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"})
    assert httpx.post(http_server.url, content=body, headers=anonymous).status_code == 401


_READABLE = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": st.sampled_from(["tools/list", "ping", "x/y"])},
    optional={
        "id": st.integers(-(2**31), 2**31) | st.text(max_size=8),
        "params": st.none() | st.dictionaries(st.text(max_size=5), _JSON, max_size=3),
    },
)


@given(message=_READABLE | _FIELDS)
def test_a_message_the_sdk_reads_is_never_refused(message: dict[str, Any]) -> None:
    """The converse: a line the SDK reads as a request or a notification (an id
    that is a string or an integer, or none) whose text holds no lone surrogate
    goes on to the SDK untouched. When this fails, a client the SDK serves (one
    sending `"params": null`, say) gets an error instead."""
    line = json.dumps(message)
    try:
        parsed = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        return
    if not isinstance(parsed, types.JSONRPCRequest | types.JSONRPCNotification):
        return
    if "id" in message and not isinstance(parsed, types.JSONRPCRequest):
        return  # an id the SDK dropped (a float, say): refused on purpose
    if any(0xD800 <= ord(c) <= 0xDFFF for c in line.encode().decode("unicode_escape", "replace")):
        return
    assert envelope_error(line) is None, (message, envelope_error(line))


def test_params_null_is_read_as_the_sdk_reads_it() -> None:
    for line in (
        '{"jsonrpc":"2.0","method":"notifications/initialized","params":null}',
        '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":null}',
    ):
        assert envelope_error(line) is None

"""MCP where every request gets an answer, over stdio and streamable HTTP.

The SDK's stdio transport hands a line it cannot read as a JSON-RPC message to
the session as an exception, and the session answers nothing: a client that
sent an id (a request whose `method` is not a string, whose `params` is not an
object, whose text holds a lone surrogate, or a line that is not JSON at all)
waits for it forever. A request whose id is neither a string nor an integer
is read as a notification, which also gets no answer. JSON-RPC 2.0 and MCP say
such a message gets an error: `-32700` (parse error) for a line that is not
JSON, `-32600` (invalid request) for a message that is not a valid request,
`-32602` (invalid params) for text that cannot be carried as UTF-8, with the
request's id when it has a valid one and `null` otherwise.

`envelope_error(line)` decides that for one line (None: the SDK reads it);
`serve_stdio(run)` runs a server's session loop on the process's stdin and
stdout with the lines it refuses answered on stdout, and passes every other
line on to the SDK unchanged. While serving, fd 0 reads the null device (a
child process or a stray read cannot take the protocol's bytes), as the SDK's
own transport does. Over streamable HTTP, where the SDK answers most such
bodies itself, `EnvelopeCheck` answers the rest (a request with a fractional
id was taken for a notification: `202`, and no answer ever came).
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from http import HTTPStatus
from typing import IO, Any, cast

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.shared.message import SessionMessage

__all__ = ["EnvelopeCheck", "envelope_error", "serve_stdio"]

_MAX_PATH_PARTS = 8
_STATUSES = frozenset(HTTPStatus)


def _valid_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _surrogate_path(value: object) -> tuple[str, ...] | None:
    """Where in `value` a string (or a key) holds a lone surrogate, if anywhere."""
    stack: list[tuple[object, tuple[str, ...]]] = [(value, ())]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if any(0xD800 <= ord(c) <= 0xDFFF for c in item):
                return where
        elif isinstance(item, dict):
            for key, inner in item.items():
                if any(0xD800 <= ord(c) <= 0xDFFF for c in key):
                    return (*where, "<key>")
                stack.append((inner, (*where, key)))
        elif isinstance(item, list):
            stack.extend((inner, (*where, str(i))) for i, inner in enumerate(item))
    return None


def _error(id: str | int | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=id, error=types.ErrorData(code=code, message=message)
    )


def envelope_error(line: str) -> types.JSONRPCError | None:
    """The error answering `line` (one JSON-RPC message as read from stdin), or
    None when the SDK can read it as a message it will handle."""
    if not line.strip():
        return None  # a blank line carries no message: nothing to answer
    try:
        obj: Any = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as exc:
        return _error(None, types.PARSE_ERROR, f"Parse error: {exc}"[:300])
    if isinstance(obj, list):
        return _error(None, types.INVALID_REQUEST, "Invalid request: batches are not supported")
    if not isinstance(obj, dict):
        return _error(None, types.INVALID_REQUEST, "Invalid request: a message is a JSON object")
    if "method" not in obj and ("result" in obj or "error" in obj):
        return None  # a response to one of the server's requests: never answered
    has_id = "id" in obj
    if has_id and not _valid_id(obj["id"]):
        return _error(
            None, types.INVALID_REQUEST, "Invalid request: id must be a string or an integer"
        )
    id = obj["id"] if has_id else None
    if obj.get("jsonrpc") != "2.0":
        return _error(id, types.INVALID_REQUEST, 'Invalid request: jsonrpc must be "2.0"')
    if "method" in obj and not isinstance(obj["method"], str):
        return _error(id, types.INVALID_REQUEST, "Invalid request: method must be a string")
    if obj.get("params") is not None and not isinstance(obj["params"], dict):
        return _error(id, types.INVALID_REQUEST, "Invalid request: params must be an object")
    where = _surrogate_path(obj)
    if where is not None:
        path = ".".join(where[:_MAX_PATH_PARTS]) or "message"
        return _error(
            id,
            types.INVALID_PARAMS,
            f"Invalid params: {path} holds a lone surrogate (not valid Unicode text)",
        )
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return _error(id, types.INVALID_REQUEST, f"Invalid request: {first}"[:300])
    if has_id and isinstance(message, types.JSONRPCNotification):
        return _error(id, types.INVALID_REQUEST, "Invalid request: a request needs a method")
    return None


class _Lines:
    """The lines of stdin the SDK may read; the others are answered here."""

    def __init__(self, wire: IO[bytes]) -> None:
        self._file = anyio.wrap_file(io.TextIOWrapper(wire, encoding="utf-8", errors="replace"))
        self._answers: Callable[[SessionMessage], Any] | None = None
        self._ready = anyio.Event()

    def answer_with(self, send: Callable[[SessionMessage], Any]) -> None:
        self._answers = send
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._read()

    async def _read(self) -> AsyncIterator[str]:
        async for line in self._file:
            refused = envelope_error(line)
            if refused is None:
                yield line
                continue
            await self._ready.wait()
            assert self._answers is not None
            await self._answers(SessionMessage(refused))


def _claim_stdin() -> tuple[IO[bytes], Callable[[], None]]:
    """The protocol's stdin, with fd 0 pointed at the null device meanwhile
    (restored by the callable); in place when stdin has no descriptor."""
    try:
        fd = sys.stdin.fileno()
        wire = os.dup(fd)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return sys.stdin.buffer, lambda: None
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)

    def restore() -> None:
        os.dup2(wire, fd)  # `wire` stays open: a worker thread may still block on it

    return os.fdopen(wire, "rb", closefd=False), restore


async def serve_stdio(run: Callable[[Any, Any], Any]) -> None:
    """Serve over stdin/stdout: `run(read_stream, write_stream)` is the server's
    session loop; malformed lines are answered before they reach it."""
    wire, restore = _claim_stdin()
    try:
        lines = _Lines(wire)
        stdin = cast("anyio.AsyncFile[str]", lines)  # the SDK only iterates it
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):
            lines.answer_with(write_stream.send)
            await run(read_stream, write_stream)
    finally:
        restore()


class EnvelopeCheck:
    """ASGI middleware giving streamable HTTP the same answers: a POSTed message
    `envelope_error` refuses is answered `400` with that JSON-RPC error (the SDK
    accepted a request whose id is neither a string nor an integer as a
    notification, `202`, and never answered it). Bodies over `max_body` bytes
    go on unread: the SDK refuses them itself (`413`). Every error the SDK's
    transport answers in plain text (that `413`, a wrong content type `400`,
    a refused Host `421` or Origin `403`, a method `405`) is sent as a JSON-RPC
    error body instead, with the same status (`_json_errors`)."""

    def __init__(self, app: Any, max_body: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _json_errors(send, self.max_body)
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            event = await receive()
            if event["type"] != "http.request":  # the client went away
                await self.app(scope, _replay(chunks, receive, complete=False, last=event), send)
                return
            chunks.append(event.get("body", b""))
            size += len(chunks[-1])
            more = event.get("more_body", False)
            if size > self.max_body:
                await self.app(scope, _replay(chunks, receive, complete=not more), send)
                return
        refused = envelope_error(b"".join(chunks).decode("utf-8", errors="replace"))
        if refused is None:
            await self.app(scope, _replay(chunks, receive, complete=True), send)
            return
        body = refused.model_dump_json(by_alias=True, exclude_unset=True).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 400,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _replay(chunks: list[bytes], receive: Any, *, complete: bool, last: Any = None) -> Any:
    """A `receive` that gives the body read so far again (the last chunk ends
    the body when `complete`), then `last` (the event that ended the reading),
    then whatever the original `receive` gives (a disconnect, in time)."""
    pending = [{"type": "http.request", "body": chunk, "more_body": True} for chunk in chunks]
    if complete:
        pending = pending or [{"type": "http.request", "body": b"", "more_body": True}]
        pending[-1]["more_body"] = False
    if last is not None:
        pending.append(last)

    async def replayed() -> Any:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


def _json_errors(send: Any, max_body: int) -> Any:
    """`send` with every error response that is not JSON (the SDK's transport
    answers "Request body too large" or "Invalid Content-Type header" as plain
    text, which a JSON-RPC client cannot read as an answer) turned into a
    JSON-RPC error body: `id` null (the request was not read), code -32600
    (invalid request), the SDK's text as the message (a 413 also says the
    limit), the status and other headers kept."""
    held: dict[str, Any] = {}

    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            headers = message.get("headers", [])
            media = b""
            for name, value in headers:
                if name.lower() == b"content-type":
                    media = value.split(b";", 1)[0].strip().lower()
            if message["status"] >= 400 and not media.endswith(b"json"):
                held.update(start=message, body=b"")
                return
        elif message["type"] == "http.response.body" and "start" in held:
            held["body"] += message.get("body", b"")
            if message.get("more_body", False):
                return
            start = held.pop("start")
            status = start["status"]
            text = held.pop("body").decode("utf-8", "replace").strip()[:300]
            if not text:
                text = HTTPStatus(status).phrase if status in _STATUSES else "refused"
            if status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE:
                text = f"{text}: at most {max_body} bytes"
            payload = _error(None, types.INVALID_REQUEST, text).model_dump_json(
                by_alias=True, exclude_unset=True
            )
            kept = [
                (name, value)
                for name, value in start.get("headers", [])
                if name.lower() not in (b"content-type", b"content-length")
            ]
            body = payload.encode()
            kept += [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
            await send({**start, "headers": kept})
            await send({"type": "http.response.body", "body": body})
            return
        await send(message)

    return sending

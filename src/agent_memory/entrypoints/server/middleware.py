"""The outermost ASGI layer: request ids, body limits, content type, the
last-resort error barrier and structured access logs.

Access log lines are JSON objects on the `agent_memory.server.access` logger:
method, route template (`/v1/users/facts`, never the query string), status,
duration, bytes in and out, key id and tenant. No ids, no bodies, no user
content. An exception nobody handled becomes a 500 problem document; its
traceback goes to the server log only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any
from urllib.parse import unquote_to_bytes

from agent_memory.domain.errors import ConfigurationError
from agent_memory.entrypoints.server.problems import Problem

__all__ = ["Guard"]

_access = logging.getLogger("agent_memory.server.access")
_log = logging.getLogger("agent_memory.server")

Scope = dict[str, Any]
Message = dict[str, Any]
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _undecodable_parameter(query: bytes) -> str | None:
    """The name of the first query parameter whose name or value is not UTF-8
    once percent-decoded (Starlette reads such bytes as U+FFFD, so `%FF` and
    `%FE` would name the same user), or None."""
    for pair in query.split(b"&"):
        name, _, value = pair.partition(b"=")
        for part in (name, value):
            try:
                unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError:
                return unquote_to_bytes(name).decode("utf-8", "replace")
    return None


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    json_suffix = media.startswith("application/") and media.endswith("+json")
    return media == "application/json" or json_suffix


class Guard:
    """Wraps the app; `app` is the FastAPI app (for its OpenAPI schema)."""

    def __init__(self, app: Any, *, max_body_bytes: int, request_timeout: float = 30.0) -> None:
        if not request_timeout > 0:
            raise ConfigurationError(
                f"request_timeout must be > 0 seconds, got {request_timeout!r}"
            )
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.request_timeout = request_timeout
        #: handlers past their deadline, still being cancelled (kept referenced)
        self._abandoned: set[asyncio.Future[None]] = set()

    def openapi(self) -> dict[str, Any]:
        schema: dict[str, Any] = self.app.openapi()
        return schema

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = uuid.uuid4().hex[:16]
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        sent: dict[str, Any] = {"status": 0, "bytes": 0, "bytes_in": 0, "started": False}
        # The deadline bounds the time to the response's start (reading the body,
        # the handler, the backend). The handler runs as its own task: at the
        # deadline the client gets its 503 at once, even when cancelling the
        # handler takes longer (a driver cancelling a query on a server that does
        # not answer); the abandoned handler's own answer goes nowhere. A started
        # response (a stream) is no longer bound by the deadline.
        responded = asyncio.Event()
        abandoned = False

        async def answer(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent["status"] = message["status"]
                sent["started"] = True
                responded.set()
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                # every answer may hold private data (facts, events, audit
                # entries, problems naming them): no cache keeps a copy, a
                # browser's disk cache included, unless the route said otherwise
                if not any(k.lower() == b"cache-control" for k, _ in headers):
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body":
                sent["bytes"] += len(message.get("body", b""))
            await send(message)

        async def send_wrapper(message: Message) -> None:
            if not abandoned:
                await answer(message)

        try:
            handler = asyncio.ensure_future(
                self._handle(scope, receive, send_wrapper, request_id, sent)
            )
            starting = asyncio.ensure_future(responded.wait())
            try:
                await asyncio.wait(
                    (handler, starting),
                    timeout=self.request_timeout,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            except BaseException:  # this request was cancelled: so is its handler
                handler.cancel()
                raise
            finally:
                starting.cancel()
            if handler.done() or responded.is_set():
                await handler
            else:
                abandoned = True
                handler.cancel()
                self._abandoned.add(handler)
                handler.add_done_callback(self._settled)
                _log.warning(
                    "request %s passed its deadline (%.1f s)", request_id, self.request_timeout
                )
                await self._problem(
                    answer,
                    Problem(
                        "deadline-exceeded",
                        f"no answer within {self.request_timeout:g} s; retrying is safe "
                        "(writes are idempotent by id, facts are reconciled)",
                        headers={"Retry-After": "1"},
                    ),
                    request_id,
                )
        except Exception as exc:
            _log.error("unhandled %s (request %s)", type(exc).__name__, request_id, exc_info=exc)
            if not sent["started"]:
                await self._problem(send_wrapper, Problem("internal-error"), request_id)
        finally:
            route = scope.get("route")
            _access.info(
                json.dumps(
                    {
                        "event": "access",
                        "request_id": request_id,
                        "method": scope.get("method"),
                        "route": getattr(route, "path", None) or "unmatched",
                        "status": sent["status"],
                        "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                        "bytes_in": sent["bytes_in"],
                        "bytes_out": sent["bytes"],
                        "key_id": state.get("key_id"),
                        "tenant": state.get("tenant"),
                    }
                )
            )

    def _settled(self, handler: asyncio.Future[None]) -> None:
        """An abandoned handler finished: drop it, and log what it raised."""
        self._abandoned.discard(handler)
        if not handler.cancelled() and (exc := handler.exception()) is not None:
            _log.warning("an abandoned request ended with %s", type(exc).__name__)

    async def _handle(
        self, scope: Scope, receive: Any, send: Any, request_id: str, sent: dict[str, Any]
    ) -> None:
        """Read the body (its size into `sent`), then answer its problem or run the app."""
        problem, body = await self._read(scope, receive)
        sent["bytes_in"] = len(body)
        bad = _undecodable_parameter(scope.get("query_string", b""))
        if problem is None and bad is not None:
            problem = Problem(
                "invalid-input",
                f"{bad}: the query parameter is not UTF-8 once percent-decoded",
                field=bad,
            )
        if problem is not None:
            await self._problem(send, problem, request_id)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            message: Message = await receive()  # http.disconnect
            return message

        await self.app(scope, replay, send)

    async def _read(self, scope: Scope, receive: Any) -> tuple[Problem | None, bytes]:
        """The whole body (at most the limit), or the problem that refuses it."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            return Problem("payload-too-large", f"at most {self.max_body_bytes} bytes"), b""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return Problem("payload-too-large", f"at most {self.max_body_bytes} bytes"), b""
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if scope.get("method") in _BODY_METHODS and not _is_json(headers.get("content-type", "")):
            return Problem("unsupported-media-type"), body
        return None, body

    @staticmethod
    async def _problem(send: Any, problem: Problem, request_id: str) -> None:
        payload = json.dumps(problem.body(request_id)).encode()
        headers = [
            (b"content-type", b"application/problem+json"),
            (b"content-length", str(len(payload)).encode()),
            *((k.lower().encode(), v.encode()) for k, v in problem.headers.items()),
        ]
        await send({"type": "http.response.start", "status": problem.status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

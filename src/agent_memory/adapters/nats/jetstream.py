"""JetStream transport: connection, streams, durable pull consumers, key-value
buckets and their watches, publishing. No event semantics here: whoever drives
it (the processor entry point) decides what a message means and whether to
acknowledge, retry or give up.

Every failure of the server or the connection is raised as `BackendUnavailable`
("nats"), so callers never handle nats-py's own exceptions. A fetch that finds
nothing returns an empty list.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

import nats
import nats.errors
import nats.js.errors
from attrs import frozen
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, StreamConfig
from nats.js.kv import KeyValue

from agent_memory.domain.errors import BackendUnavailable

__all__ = [
    "Delivery",
    "JetStreamBus",
    "KeyValueBucket",
    "KeyValueChange",
    "PullConsumer",
    "subject_token",
]

_SAFE_TOKEN = re.compile(r"[A-Za-z0-9_\-]")
_TRANSPORT_ERRORS = (nats.errors.Error, OSError, TimeoutError)


def subject_token(value: str) -> str:
    """`value` as one NATS subject token: letters, digits, `_` and `-` stay, every
    other character becomes `~` plus its UTF-8 bytes in hex (`loop.1` -> `loop~2e1`)."""
    out: list[str] = []
    for char in value:
        if _SAFE_TOKEN.match(char):
            out.append(char)
        else:
            out.append("".join(f"~{b:02x}" for b in char.encode("utf-8")))
    return "".join(out) or "~"


def _unavailable(exc: BaseException) -> BackendUnavailable:
    return BackendUnavailable("nats", f"{type(exc).__name__}: {exc}")


class Delivery:
    """One message delivered by a durable consumer, with its stream position."""

    def __init__(self, msg: Msg) -> None:
        self._msg = msg
        meta = msg.metadata
        self.subject: str = msg.subject
        self.data: bytes = msg.data
        self.headers: dict[str, str] = dict(msg.headers or {})
        self.stream: str = meta.stream
        self.stream_sequence: int = meta.sequence.stream
        self.num_delivered: int = meta.num_delivered

    async def ack(self, timeout: float = 5.0) -> None:
        """Acknowledge and wait for the server to confirm."""
        try:
            await self._msg.ack_sync(timeout=timeout)
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc

    async def nak(self, delay: float) -> None:
        """Ask for a redelivery after `delay` seconds."""
        try:
            await self._msg.nak(delay=delay)
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc

    async def term(self) -> None:
        """Never deliver this message again."""
        try:
            await self._msg.term()
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc

    async def in_progress(self) -> None:
        """Reset the ack timer: still working on it."""
        try:
            await self._msg.in_progress()
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc


class PullConsumer:
    """A durable pull consumer (see `JetStreamBus.pull`)."""

    def __init__(self, sub: JetStreamContext.PullSubscription, durable: str) -> None:
        self._sub = sub
        self.durable = durable

    async def fetch(self, batch: int, timeout: float) -> list[Delivery]:
        """Up to `batch` messages, waiting at most `timeout` seconds ([] when none)."""
        try:
            msgs = await self._sub.fetch(batch, timeout=timeout)
        except (nats.errors.TimeoutError, TimeoutError):
            return []
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc
        return [Delivery(m) for m in msgs]

    async def leftovers(self) -> list[Delivery]:
        """Messages the server delivered for the last pull request after `fetch`
        returned (call once the request has expired, before stopping)."""
        out: list[Delivery] = []
        while self._sub.pending_msgs > 0:
            try:
                msg = await self._sub._sub.next_msg(timeout=0.1)
            except (nats.errors.TimeoutError, TimeoutError):
                break
            if not JetStreamContext.is_status_msg(msg):
                out.append(Delivery(msg))
        return out


@frozen
class KeyValueChange:
    """One update seen by a watch: `value` is None when the key was deleted or purged."""

    key: str
    value: bytes | None
    revision: int


class KeyValueBucket:
    """A JetStream key-value bucket."""

    def __init__(self, kv: KeyValue, name: str, client: Client) -> None:
        self._kv = kv
        self._nc = client
        self.name = name

    async def get(self, key: str) -> bytes | None:
        try:
            entry = await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc
        return entry.value

    async def put(self, key: str, value: bytes) -> int:
        """Store `value`; the new revision."""
        try:
            return int(await self._kv.put(key, value))
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc

    async def delete(self, key: str) -> None:
        try:
            await self._kv.delete(key)
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc

    async def keys(self, prefix: str = "") -> list[str]:
        """Every key starting with `prefix` that the bucket's stream holds a message
        for: a value, or a delete's marker (`get` reads that as None).

        Read from the stream's per-subject state, paged: not from a watch, as
        nats-py's `KeyValue.keys()` does, which decides it has seen every key from
        a consumer count that races with delivery (so it can answer without a key
        just written) and creates a consumer on the server per call."""
        base = f"$KV.{self.name}."
        head = prefix[: prefix.rfind(".") + 1]  # whole tokens only in a filter
        found: list[str] = []
        offset = 0
        while True:
            page = await self._stream_info({"subjects_filter": f"{base}{head}>", "offset": offset})
            subjects = (page.get("state") or {}).get("subjects") or {}
            found.extend(k for k in (s[len(base) :] for s in subjects) if k.startswith(prefix))
            offset += len(subjects)
            if not subjects or offset >= int(page.get("total") or 0):
                return found

    async def ping(self) -> None:
        """Raises `BackendUnavailable` unless the bucket's stream answers."""
        await self._stream_info({})

    async def _stream_info(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            msg = await self._nc.request(
                f"$JS.API.STREAM.INFO.KV_{self.name}", json.dumps(request).encode(), timeout=5.0
            )
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc
        reply: dict[str, Any] = json.loads(msg.data)
        error = reply.get("error")
        if error:
            raise BackendUnavailable(
                "nats", f"bucket {self.name}: {error.get('description', error)}"
            )
        return reply

    async def watch(self) -> AsyncIterator[KeyValueChange]:
        """The latest value of every key, then every change as it happens
        (until the caller stops iterating)."""
        try:
            watcher = await self._kv.watchall()
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc
        try:
            async for entry in watcher:
                if entry is None:  # the initial values have all been seen
                    continue
                deleted = entry.operation in ("DEL", "PURGE")
                yield KeyValueChange(
                    key=entry.key,
                    value=None if deleted else entry.value,
                    revision=int(entry.revision or 0),
                )
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()  # type: ignore[no-untyped-call]


class JetStreamBus:
    """One connection to a NATS server with JetStream (`connect`, then the rest)."""

    def __init__(
        self, url: str, *, client: Client | None = None, name: str = "agent-memory"
    ) -> None:
        self._url = url
        self._name = name
        self._nc = client
        self._owns_client = client is None
        self._js: JetStreamContext | None = client.jetstream() if client is not None else None

    async def connect(self, timeout: float = 5.0) -> None:
        if self._js is not None:
            return
        try:
            self._nc = await nats.connect(self._url, name=self._name, connect_timeout=timeout)
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc
        self._js = self._nc.jetstream()

    @property
    def _jetstream(self) -> JetStreamContext:
        return self._connected[1]

    @property
    def _connected(self) -> tuple[Client, JetStreamContext]:
        if self._nc is None or self._js is None:
            raise BackendUnavailable("nats", "not connected")
        return self._nc, self._js

    async def close(self) -> None:
        """Flush what was published and acknowledged, then close (a client passed
        in by the caller stays open)."""
        nc, self._nc = self._nc, None
        self._js = None
        if nc is not None and self._owns_client:
            # drain() would wait on the pull inboxes: flush, then close.
            with contextlib.suppress(Exception):
                await nc.flush(timeout=2)
            with contextlib.suppress(Exception):
                await nc.close()

    async def ensure_stream(self, name: str, subjects: Sequence[str], *, create: bool) -> None:
        """Make sure stream `name` exists; create it on `subjects` when `create`."""
        js = self._jetstream
        try:
            await js.stream_info(name)
            return
        except nats.js.errors.NotFoundError:
            if not create:
                raise BackendUnavailable("nats", f"stream {name!r} does not exist") from None
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc
        try:
            await js.add_stream(StreamConfig(name=name, subjects=list(subjects)))
        except nats.js.errors.BadRequestError:  # created meanwhile
            pass
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc

    async def pull(
        self, stream: str, subject: str, durable: str, *, ack_wait: float, max_deliver: int
    ) -> PullConsumer:
        """A durable pull consumer on `subject`, delivering from the stream's start."""
        config = ConsumerConfig(
            ack_wait=ack_wait, max_deliver=max_deliver, deliver_policy=DeliverPolicy.ALL
        )
        try:
            sub = await self._jetstream.pull_subscribe(
                subject, durable=durable, stream=stream, config=config
            )
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc
        return PullConsumer(sub, durable)

    async def key_value(
        self,
        bucket: str,
        *,
        create: bool = True,
        ttl_seconds: float | None = None,
        history: int = 1,
        description: str = "",
    ) -> KeyValueBucket | None:
        """The bucket; created when missing and `create` (else None)."""
        nc, js = self._connected
        try:
            return KeyValueBucket(await js.key_value(bucket), bucket, nc)
        except nats.js.errors.BucketNotFoundError:
            if not create:
                return None
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc
        options: dict[str, Any] = {"bucket": bucket, "history": history}
        if ttl_seconds is not None:
            options["ttl"] = ttl_seconds
        if description:
            options["description"] = description
        try:
            kv = await js.create_key_value(**options)
        except nats.js.errors.BadRequestError:  # created meanwhile
            kv = await js.key_value(bucket)
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc
        return KeyValueBucket(kv, bucket, nc)

    async def publish(self, subject: str, data: bytes, *, msg_id: str | None = None) -> None:
        """Publish to the stream that stores `subject` (deduplicated by `msg_id`
        within the stream's window); plain NATS when no stream stores it."""
        headers = {"Nats-Msg-Id": msg_id} if msg_id is not None else None
        try:
            await self._jetstream.publish(subject, data, headers=headers)
        except nats.js.errors.NoStreamResponseError:
            await self.publish_plain(subject, data)
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc

    async def publish_plain(self, subject: str, data: bytes) -> None:
        """Publish on core NATS (no stream acknowledgement)."""
        if self._nc is None:
            raise BackendUnavailable("nats", "not connected")
        try:
            await self._nc.publish(subject, data)
        except _TRANSPORT_ERRORS as exc:
            raise _unavailable(exc) from exc

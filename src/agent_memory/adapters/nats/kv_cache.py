"""`Cache` on a JetStream key-value bucket (the processor's checkpoint storage
when `checkpoint.storage_bucket` names a bucket).

Key layout: `c.<scope>.k<key>`, where scope and key keep letters, digits, `_`,
`-` and `/`, and every other character becomes `=` plus its UTF-8 bytes in hex.
The encoding works character by character and is prefix-free, so a key prefix
stays a prefix of the encoded key and nothing else: `delete_prefix` and
`entries` read the keys under the encoded prefix from the bucket stream's
subject state (`KeyValueBucket.keys`) and get each.
A value is stored as `AMC1` + its expiry (milliseconds since the epoch, 0 for
none; 8 bytes big-endian) + the bytes; an expired entry reads as missing. Give
the bucket a max age (`JetStreamBus.key_value(ttl_seconds=...)`) so expired
entries are also removed from the server.
"""

from __future__ import annotations

import re
import struct
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.adapters._common.validation import (
    check_cache_ttl,
    check_cache_value,
    check_prefix,
)
from agent_memory.adapters.nats.jetstream import KeyValueBucket
from agent_memory.domain.validation import require_id, require_scope
from agent_memory.ports.models import Clock
from agent_memory.ports.storage import CacheEntry

__all__ = ["KeyValueCache", "decode_key_part", "encode_key_part"]

_MAGIC = b"AMC1"
_HEADER = struct.Struct(">Q")
_KEEP = re.compile(r"[A-Za-z0-9_\-/]")
_ENCODED = re.compile(r"(?:=[0-9a-f]{2})+")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def encode_key_part(text: str) -> str:
    """`text` in the characters a key-value key allows (see module doc)."""
    out: list[str] = []
    for char in text:
        if _KEEP.match(char):
            out.append(char)
        else:
            out.append("".join(f"={b:02x}" for b in char.encode("utf-8")))
    return "".join(out)


def decode_key_part(text: str) -> str:
    """The text `encode_key_part` encoded."""
    return _ENCODED.sub(lambda m: bytes.fromhex(m.group(0).replace("=", "")).decode("utf-8"), text)


def _key(scope: str, key: str) -> str:
    return f"c.{encode_key_part(scope)}.k{encode_key_part(key)}"


class KeyValueCache:
    """`Cache` on one key-value bucket (every scope in the same bucket)."""

    def __init__(self, bucket: KeyValueBucket, *, clock: Clock | None = None) -> None:
        self._bucket = bucket
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._life = Lifecycle(f"key-value cache {bucket.name}")

    @property
    def bucket(self) -> str:
        return self._bucket.name

    def _now_ms(self) -> int:
        return (self._clock.now() - _EPOCH) // timedelta(milliseconds=1)

    def _live(self, raw: bytes | None) -> bytes | None:
        found = self._unpack(raw)
        return None if found is None else found[0]

    def _unpack(self, raw: bytes | None) -> tuple[bytes, int] | None:
        """(value, expiry in ms since the epoch, 0 for none) of a stored entry; None
        when it is missing, not ours, or expired."""
        if raw is None or not raw.startswith(_MAGIC):
            return None
        (expires,) = _HEADER.unpack_from(raw, len(_MAGIC))
        if expires and expires <= self._now_ms():
            return None
        return raw[len(_MAGIC) + _HEADER.size :], expires

    async def _stored(self, start: str) -> AsyncIterator[tuple[str, bytes]]:
        """(name, stored bytes) of every key under the encoded prefix `start` that
        holds a value, expired or not (a deleted key keeps only its marker)."""
        for name in await self._bucket.keys(start):
            raw = await self._bucket.get(name)
            if raw is not None:
                yield name, raw

    async def get(self, scope: str, key: str) -> bytes | None:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            return self._live(await self._bucket.get(_key(scope, key)))

    async def put(self, scope: str, key: str, value: bytes, ttl: timedelta | None = None) -> None:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            data = check_cache_value(value)
            check_cache_ttl(ttl)
            expires = (
                0 if ttl is None else self._now_ms() + max(ttl // timedelta(milliseconds=1), 1)
            )
            await self._bucket.put(_key(scope, key), _MAGIC + _HEADER.pack(expires) + data)

    async def delete(self, scope: str, key: str) -> bool:
        async with self._life.op():
            require_scope(scope, "scope")
            require_id(key, "key")
            name = _key(scope, key)
            present = self._live(await self._bucket.get(name)) is not None
            await self._bucket.delete(name)
            return present

    async def delete_prefix(self, scope: str, prefix: str) -> int:
        async with self._life.op():
            require_scope(scope, "scope")
            prefix = check_prefix(prefix)
            removed = 0
            async for name, raw in self._stored(_key(scope, prefix)):
                if self._live(raw) is not None:
                    removed += 1
                await self._bucket.delete(name)  # an expired one too
            return removed

    async def entries(self, scope: str, prefix: str = "") -> list[CacheEntry]:
        """Live entries of the scope whose key starts with `prefix`, by key
        (`CacheListing`): the bucket's keys under the encoded prefix (the encoding
        is prefix-free, character by character), then a get per key."""
        async with self._life.op():
            require_scope(scope, "scope")
            prefix = check_prefix(prefix)
            head = len(_key(scope, ""))
            out: list[CacheEntry] = []
            async for name, raw in self._stored(_key(scope, prefix)):
                found = self._unpack(raw)
                if found is not None:
                    value, expires = found
                    at = _EPOCH + timedelta(milliseconds=expires) if expires else None
                    out.append(CacheEntry(decode_key_part(name[head:]), value, at))
            out.sort(key=lambda e: e.key)
            return out

    async def ping(self) -> None:
        async with self._life.op():
            await self._bucket.ping()

    async def close(self) -> None:
        """Closes this handle; the connection belongs to whoever opened the bucket."""
        await self._life.begin_close()

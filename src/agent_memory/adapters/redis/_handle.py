"""Base of the Redis adapters: a client (closed by the handle that owns it),
the deployment's key schema, and the close rule."""

from __future__ import annotations

from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.adapters.redis._client import Client
from agent_memory.adapters.redis._errors import translate
from agent_memory.adapters.redis._keys import KeySchema

__all__ = ["RedisHandle"]


class RedisHandle:
    def __init__(
        self, client: Client, what: str, *, prefix: str, deployment: str, owns_client: bool
    ) -> None:
        self._r = client
        self._keys = KeySchema(prefix, deployment)
        self._owns = owns_client
        self._life = Lifecycle(what)

    async def ping(self) -> None:
        async with self._life.op():
            with translate("ping"):
                await self._r.ping()

    async def close(self) -> None:
        if await self._life.begin_close() and self._owns:
            await self._r.aclose()

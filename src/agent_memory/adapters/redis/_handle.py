"""Base of the Redis adapters: a client (closed by the handle that owns it),
the deployment's key schema, and the close rule."""

from __future__ import annotations

from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.adapters.redis._client import Client
from agent_memory.adapters.redis._errors import translate
from agent_memory.adapters.redis._keys import KeySchema

__all__ = ["RedisHandle", "SharedClient"]


class SharedClient:
    """One client (one connection pool) for several handles; closed when the last
    handle that took it closes."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._refs = 0

    def retain(self) -> None:
        self._refs += 1

    async def release(self) -> None:
        self._refs -= 1
        if self._refs <= 0:
            await self.client.aclose()


class RedisHandle:
    """Takes a plain client (closed on close only with `owns_client`) or a
    `SharedClient` (released on close)."""

    def __init__(
        self,
        client: Client | SharedClient,
        what: str,
        *,
        prefix: str,
        deployment: str,
        owns_client: bool,
    ) -> None:
        self._shared = client if isinstance(client, SharedClient) else None
        if self._shared is not None:
            self._shared.retain()
        self._r = client.client if isinstance(client, SharedClient) else client
        self._keys = KeySchema(prefix, deployment)
        self._owns = owns_client
        self._life = Lifecycle(what)

    async def ping(self) -> None:
        async with self._life.op():
            with translate("ping"):
                await self._r.ping()

    async def close(self) -> None:
        if not await self._life.begin_close():
            return
        if self._shared is not None:
            await self._shared.release()
        elif self._owns:
            await self._r.aclose()

"""What the embedder and the chat model share: argument checks, the JSON client
under the API root, and the close rule (also as an async context manager)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Self

from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.adapters.openai.endpoint import api_root
from agent_memory.adapters.openai.retry import RetryPolicy
from agent_memory.adapters.openai.transport import JsonClient
from agent_memory.domain.errors import InvalidInput

if TYPE_CHECKING:
    from types import TracebackType

    import httpx

__all__ = ["HttpProvider", "require_api_key"]


def require_api_key(api_key: object) -> None:
    if api_key is not None and not isinstance(api_key, str):
        raise InvalidInput("api_key", f"a string or None is required, got {type(api_key)}")


class HttpProvider:
    """Base of the providers: `_connect` builds the JSON client and the
    lifecycle; `aclose` (alias `close`, also on leaving `async with`) closes the
    HTTP client once, after which calls raise `StoreClosed`."""

    _http: JsonClient
    _life: Lifecycle

    def _connect(
        self,
        *,
        what: str,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str] | None,
        retry: RetryPolicy | None,
        http_client: httpx.AsyncClient | None,
        rng: random.Random | None,
    ) -> None:
        self._http = JsonClient(
            root=api_root(base_url),
            what=what,
            api_key=api_key,
            headers=headers,
            retry=retry if retry is not None else RetryPolicy(),
            http_client=http_client,
            rng=rng,
        )
        self._life = Lifecycle(what)

    @property
    def base_url(self) -> str:
        """The normalised API root (ends in `/v1`)."""
        return self._http.root

    async def aclose(self) -> None:
        """Close the HTTP client (idempotent); later calls raise `StoreClosed`."""
        if await self._life.begin_close():
            await self._http.aclose()

    close = aclose

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

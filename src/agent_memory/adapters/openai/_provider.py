"""What the embedder and the chat model share: argument checks, the JSON client
under the API root, and the close rule (also as an async context manager)."""

from __future__ import annotations

import random
import re
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

__all__ = ["HttpProvider", "require_api_key", "require_headers"]


# What an HTTP header can carry as is: a key of visible ASCII; header names are
# tokens, values visible ASCII with inner spaces. Anything else fails only when
# sent, in an error that quotes the value (the key), so it is refused up front,
# without echoing it.
_KEY = re.compile(r"[\x21-\x7e]+")
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"(?:[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?")


def require_api_key(api_key: object) -> None:
    if api_key is not None and not isinstance(api_key, str):
        raise InvalidInput("api_key", f"a string or None is required, got {type(api_key)}")
    if api_key and not _KEY.fullmatch(api_key):
        raise InvalidInput(
            "api_key",
            "only visible ASCII characters are allowed: no whitespace (a trailing "
            "newline?), control or non-ASCII characters (the key is not shown)",
        )


def require_headers(headers: Mapping[str, str] | None) -> None:
    """Extra headers that HTTP can carry; `InvalidInput` on `headers` without their values."""
    if headers is None:
        return
    if not isinstance(headers, Mapping):
        raise InvalidInput("headers", f"a mapping or None is required, got {type(headers)}")
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(str(name)):
            raise InvalidInput("headers", f"{name!r} is not a valid HTTP header name")
        if not _HEADER_VALUE.fullmatch(str(value)):
            raise InvalidInput(
                "headers",
                f"the value of {name!r} must be visible ASCII characters "
                "(inner spaces allowed; the value is not shown)",
            )


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
        require_headers(headers)
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

"""Building and owning the redis.asyncio client (never at import time).

`redis://` and `rediss://` URLs give a single-server client; `redis+cluster://`
and `rediss+cluster://host:port,host:port/` a Redis Cluster client (redis-py's
async `RedisCluster`, seeded with every listed node).
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import redis.asyncio as aioredis
from redis._parsers.commands import AsyncCommandsParser
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from agent_memory.domain.errors import InvalidInput
from redis import exceptions as rexc

__all__ = ["CLUSTER_SCHEMES", "Client", "connect", "is_cluster", "is_cluster_url"]

Client = aioredis.Redis | RedisCluster

CLUSTER_SCHEMES = frozenset({"redis+cluster", "rediss+cluster"})


def is_cluster_url(url: str) -> bool:
    return urlsplit(url).scheme.lower() in CLUSTER_SCHEMES


def is_cluster(client: object) -> bool:
    return isinstance(client, RedisCluster)


# Addresses ("host:port") that did not answer a read within the socket timeout,
# with the instant (monotonic) until which commands to them fail at once.
_QUIET: dict[str, float] = {}


class _FailFast:
    """Mixed into a single server's connection class: after a read got no answer
    within `socket_timeout` (a server that accepts and never answers: stopped,
    frozen, partitioned), commands to that address fail at once with
    `ConnectionError` for one bound (`socket_timeout`, at most
    `socket_connect_timeout`) instead of each waiting the timeout again, so an
    agent's request fails open in about one timeout, not one per command. Any
    answer from the address ends it; a refused connection never starts it."""

    host: str
    port: int
    socket_timeout: float | None
    socket_connect_timeout: float | None

    def _address(self) -> str:
        return f"{self.host}:{self.port}"

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if _QUIET:
            until = _QUIET.get(self._address())
            if until is not None:
                left = until - time.monotonic()
                if left > 0:
                    raise rexc.ConnectionError(
                        f"{self._address()} did not answer within {self.socket_timeout:g} s; "
                        f"calls fail at once for {left:.1f} s more"
                    )
        await super().send_packed_command(command, check_health)  # type: ignore[misc]

    async def read_response(
        self, disable_decoding: bool = False, timeout: float | None = None, **kwargs: Any
    ) -> Any:
        try:
            response = await super().read_response(  # type: ignore[misc]
                disable_decoding, timeout, **kwargs
            )
        except rexc.TimeoutError:
            if timeout is None:  # the socket timeout, not a caller's own wait
                bound = min(self.socket_timeout or 2.0, self.socket_connect_timeout or 2.0)
                _QUIET[self._address()] = time.monotonic() + bound
            raise
        if _QUIET:
            _QUIET.pop(self._address(), None)
        return response


class _FailFastConnection(_FailFast, aioredis.Connection):
    pass


class _FailFastSSLConnection(_FailFast, aioredis.SSLConnection):
    pass


def _defaults(options: dict[str, Any]) -> None:
    options.setdefault("encoding_errors", "surrogatepass")  # lone surrogates round-trip
    options.setdefault("socket_timeout", 30.0)
    options.setdefault("socket_connect_timeout", 2.0)
    options.setdefault("retry", Retry(NoBackoff(), 0))
    options.setdefault("health_check_interval", 0)


def connect(url: str, **options: Any) -> Client:
    """A client for `url` speaking RESP2 with bytes replies and bounded timeouts.

    No automatic command retries: a retried script could run twice (a batch add
    would then report its own records as duplicates). A dead pooled connection is
    detected and replaced when it is taken from the pool, so a restarted server is
    picked up again without rebuilding the adapter. On a cluster, redirections
    (MOVED, ASK) are followed (the command did not run), and a connection error
    makes the next command re-read the slot map, so a promoted replica is found
    without rebuilding the adapter.
    """
    _defaults(options)
    if is_cluster_url(url):
        return connect_cluster(url, **options)
    scheme = urlsplit(url).scheme.lower()
    if "connection_class" not in options and scheme in ("redis", "rediss"):
        options["connection_class"] = (
            _FailFastSSLConnection if scheme == "rediss" else _FailFastConnection
        )
    path = urlsplit(url).path if scheme in ("redis", "rediss") else ""
    if path.strip("/") and not path.strip("/").isdigit():
        # redis-py would silently use database 0 for `/cache` or `/-1`
        raise InvalidInput("url", f"the path names a database number, got {path!r}")
    try:
        client: aioredis.Redis = aioredis.Redis.from_url(
            url, protocol=2, decode_responses=False, **options
        )
    except ValueError as exc:  # redis-py's URL parser: a bad option value, no host
        raise InvalidInput("url", str(exc)) from None
    return client


# COMMAND's reply per node address, parsed once per process: a client reads the
# whole command table (key positions) when it starts, about 0.1 s of parsing.
_COMMAND_TABLES: dict[str, dict[str, Any]] = {}


class _Commands(AsyncCommandsParser):
    """The key-position table, read from a node once per process and address."""

    async def initialize(self, node: ClusterNode | None = None) -> None:
        if node is not None:
            self.node = node
        table = _COMMAND_TABLES.get(self.node.name)
        if table is None:
            await super().initialize()
            table = _COMMAND_TABLES[self.node.name] = self.commands
        self.commands = table


class _Cluster(RedisCluster):
    """`RedisCluster` that reads the slot map before routing a command. (redis-py
    routes commands issued concurrently while the map is unread, on first use or
    after a connection error, to arbitrary nodes; they then fail.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands_parser = _Commands()
        _fail_fast_nodes(self)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self._initialize:
            await self.initialize()
        return await super().execute_command(*args, **kwargs)


def _fail_fast_nodes(client: RedisCluster) -> None:
    """Give every node connection of `client` the fail-fast behaviour (`_FailFast`):
    `RedisCluster` takes no connection class, but builds each node from one shared
    `connection_kwargs` mapping (nodes found later too) and the seed nodes before
    that. Against a silent node a command then fails in one socket timeout and the
    ones after it at once, so the client re-reads the slot map (a promoted replica
    is found) and an agent's request fails open, instead of every command waiting
    its own timeout."""
    shared = client.nodes_manager.connection_kwargs
    current = shared.get("connection_class", aioredis.Connection)
    if issubclass(current, _FailFast):
        return
    chosen = (
        _FailFastSSLConnection
        if issubclass(current, aioredis.SSLConnection)
        else _FailFastConnection
    )
    shared["connection_class"] = chosen
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = chosen


def _seed_nodes(url: str) -> list[ClusterNode]:
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    nodes = []
    for item in hosts.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidInput("url", f"cluster nodes are host:port[,host:port...], got {item!r}")
        nodes.append(ClusterNode(host.strip("[]"), int(port)))
    return nodes


def connect_cluster(url: str, **options: Any) -> RedisCluster:
    """A `RedisCluster` client for `redis+cluster://[user:pass@]h:p[,h:p...]/`.
    The path names no database (a cluster has only db 0); query parameters are
    not client options (the adapters strip their own before connecting)."""
    _defaults(options)
    parts = urlsplit(url)
    if parts.path not in ("", "/", "/0"):
        raise InvalidInput("url", f"a cluster has only database 0, got path {parts.path!r}")
    leftover = [name for name, _ in parse_qsl(parts.query)]
    if leftover:
        raise InvalidInput("url", f"unknown cluster URL parameter(s): {', '.join(leftover)}")
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo:
        user, _, password = userinfo.partition(":")
        options.setdefault("username", unquote(user) or None)
        options.setdefault("password", unquote(password) or None)
    if parts.scheme.lower() == "rediss+cluster":
        options.setdefault("ssl", True)
    return _Cluster(
        startup_nodes=_seed_nodes(url),
        protocol=2,
        decode_responses=False,
        require_full_coverage=False,
        **options,
    )

"""Building and owning the redis.asyncio client (never at import time).

`redis://` and `rediss://` URLs give a single-server client; `redis+cluster://`
and `rediss+cluster://host:port,host:port/` a Redis Cluster client (redis-py's
async `RedisCluster`, seeded with every listed node).
"""

from __future__ import annotations

import re
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


# Redis numbers databases with a C int; a server has `databases` of them (16 by
# default), which only the server knows: a number it lacks is refused when the
# adapters first connect (`check_database`).
_MAX_DB = 2**31 - 1
_ASCII_INT = re.compile(r"[0-9]+", re.ASCII)
_ASCII_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_BOOL = frozenset({"0", "1", "true", "false", "yes", "no", "t", "f", "y", "n", "on", "off"})

# The client options a single-server URL may carry -> what their value must be.
# Anything else would reach the connection as an unexpected keyword (a
# TypeError at the first call), or override what the adapters rely on
# (`protocol`, `decode_responses`, `encoding_errors`).
_URL_OPTIONS: dict[str, str] = {
    "db": "database",
    "socket_timeout": "seconds",
    "socket_connect_timeout": "seconds",
    "health_check_interval": "count",
    "max_connections": "positive",
    "socket_read_size": "positive",
    "socket_keepalive": "bool",
    "retry_on_timeout": "bool",
    "client_name": "text",
    "lib_name": "text",
    "lib_version": "text",
    "username": "text",
    "password": "text",
}
_TLS_OPTIONS: dict[str, str] = {
    "ssl_check_hostname": "bool",
    "ssl_keyfile": "text",
    "ssl_certfile": "text",
    "ssl_cert_reqs": "text",
    "ssl_ca_certs": "text",
    "ssl_ca_path": "text",
    "ssl_ciphers": "text",
    "ssl_password": "text",
    "ssl_min_version": "positive",
}
_WANTS = {
    "database": "a database number (ASCII digits)",
    "seconds": "a positive finite number of seconds (ASCII decimal)",
    "count": "a whole number (ASCII digits)",
    "positive": "a positive whole number (ASCII digits)",
    "bool": "true or false",
    "text": "a value",
}


def _valid(kind: str, value: str) -> bool:
    if kind == "database":
        return bool(_ASCII_INT.fullmatch(value)) and int(value) <= _MAX_DB
    if kind == "seconds":
        return bool(_ASCII_NUMBER.fullmatch(value)) and 0 < float(value) < float("inf")
    if kind == "count":
        return bool(_ASCII_INT.fullmatch(value)) and int(value) <= _MAX_DB
    if kind == "positive":
        return bool(_ASCII_INT.fullmatch(value)) and 0 < int(value) <= _MAX_DB
    if kind == "bool":
        return value.lower() in _BOOL
    return bool(value)


def _check_url(url: str, *, tls: bool) -> None:
    """`InvalidInput` naming the parameter for what redis-py would take and fail
    on only at the first call, or silently read otherwise: a path that is no
    database number (`/cache`, `/-1`, `/٣`) or out of range, a database named
    twice (path and `?db=`), an option given twice (redis-py keeps the first),
    an unknown option, a timeout that is not a positive finite number
    (`socket_timeout=-1`), a negative or zero count. The error is on `url` and
    names the parameter; values are not quoted (`password`, `ssl_password`)."""
    parts = urlsplit(url)
    if "@" in parts.path:
        raise InvalidInput(
            "url",
            "an '@' follows the host: percent-encode a '/', '?' or '#' of the password "
            "('/' as %2F, '?' as %3F, '#' as %23)",
        )
    path = unquote(parts.path).strip("/")
    if path and not _valid("database", path):
        raise InvalidInput(
            "url", f"the path names a database number in 0..{_MAX_DB} (/0, /3), got {path!r}"
        )
    allowed = {**_URL_OPTIONS, **(_TLS_OPTIONS if tls else {})}
    seen: set[str] = set()
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        kind = allowed.get(name)
        if kind is None:
            raise InvalidInput(
                "url",
                f"{name!r} is not an option of a Redis URL; known: {', '.join(sorted(allowed))}",
            )
        if name in seen or (name == "db" and path):
            raise InvalidInput(
                "url",
                f"{name} is given twice (the path names the database too)"
                if name == "db" and path
                else f"{name} is given twice",
            )
        seen.add(name)
        if value and not _valid(kind, value):
            raise InvalidInput("url", f"{name}: {_WANTS[kind]} is required")


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
    if scheme in ("redis", "rediss"):
        _check_url(url, tls=scheme == "rediss")
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

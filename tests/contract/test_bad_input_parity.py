"""Every backend rejects the same bad input with the same typed error, before any I/O.

Each port method (MemoryStore with search_text, EventLog, LeaseStore, Cache) is
called with wrong types, NaN/inf/zero-norm-free vectors, wrong dimensions, huge
strings, NUL bytes, out-of-range limits and ttls and bad cursors, on every
backend that serves the port: memory, sqlite, redis, postgres, qdrant. Each case
names the exact error type and the argument its message must name.

The same cases run against Redis and PostgreSQL URLs where no server listens:
a check made before I/O still raises `InvalidInput` there, where one made by
the server would surface as `BackendUnavailable`.
"""

from __future__ import annotations

import math
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agent_memory.adapters.memory import (
    InMemoryCache,
    InMemoryEventLog,
    InMemoryLeaseStore,
    InMemoryMemoryStore,
)
from agent_memory.domain.errors import (
    AgentMemoryError,
    DimensionMismatch,
    InvalidInput,
    ScopeRequired,
)
from agent_memory.domain.ranking import encode_cursor
from agent_memory.domain.records import EmbeddingSpace, Event, MemoryRecord
from agent_memory.domain.validation import MAX_LIMIT, MAX_QUERY_BYTES, MAX_TTL, MAX_VALUE_BYTES
from agent_memory.ports.storage import VersionedWrites

SPACE = EmbeddingSpace("parity", 4)
NOW = datetime(2024, 5, 1, tzinfo=UTC)
RETENTION = timedelta(days=30)
Ports = dict[str, Any]
BACKENDS = ["memory", "sqlite", "redis", "postgres", "qdrant"]
DEAD = ["redis-down", "postgres-down"]


def _record(**changes: Any) -> MemoryRecord:
    base = MemoryRecord(
        id="r",
        owner="o",
        namespace="n",
        kind="k",
        content="c",
        vector=np.ones(4),
        created_at=NOW,
        updated_at=NOW,
    )
    return attrs.evolve(base, **changes) if changes else base


def _unchecked(record: MemoryRecord, **fields: Any) -> MemoryRecord:
    """A record whose fields bypass the record's own validators (as a record built
    with validators disabled would), to prove the store checks them itself."""
    out = attrs.evolve(record)
    for name, value in fields.items():
        object.__setattr__(out, name, value)
    return out


def _event(**changes: Any) -> Event:
    base = Event(
        id="e",
        domain="d",
        agent="a",
        action="x",
        outcome="ok",
        summary="s",
        occurred_at=NOW,
        recorded_at=NOW,
    )
    return attrs.evolve(base, **changes) if changes else base


def _cursor(created: str, rid: object) -> str:
    import base64
    import json

    return base64.urlsafe_b64encode(json.dumps([created, rid]).encode()).decode()


HUGE = "x" * (MAX_QUERY_BYTES + 1)
VEC = np.ones(4, np.float32)
TTL = timedelta(seconds=30)


@dataclass(frozen=True)
class Case:
    port: str  # store, events, leases, cache
    name: str
    call: Callable[[Any], Awaitable[object]]
    field: str  # the argument the message names ("" for DimensionMismatch)
    error: type[AgentMemoryError] = InvalidInput


def _scope_cases(port: str, arg: str, make: Callable[[object], Callable[[Any], Any]]) -> list[Case]:
    return [
        Case(port, f"{arg}=''", make(""), arg, ScopeRequired),
        Case(port, f"{arg}=blank", make(" \t"), arg, ScopeRequired),
        Case(port, f"{arg}=int", make(7), arg, ScopeRequired),
        Case(port, f"{arg}=None", make(None), arg, ScopeRequired),
        Case(port, f"{arg}=NUL", make("a\x00b"), arg),
        Case(port, f"{arg}=surrogate", make("a\ud800"), arg),
    ]


def _id_cases(port: str, arg: str, make: Callable[[object], Callable[[Any], Any]]) -> list[Case]:
    return [
        Case(port, f"{arg}=''", make(""), arg),
        Case(port, f"{arg}=int", make(7), arg),
        Case(port, f"{arg}=bytes", make(b"k"), arg),
        Case(port, f"{arg}=NUL", make("k\x00"), arg),
        Case(port, f"{arg}=surrogate", make("\udfff"), arg),
    ]


def _limit_cases(
    port: str, method: str, make: Callable[[object], Callable[[Any], Any]]
) -> list[Case]:
    bad = {
        "0": 0,
        "-1": -1,
        "max+1": MAX_LIMIT + 1,
        "2**63": 2**63,
        "2**64": 2**64,
        "True": True,
        "1.5": 1.5,
        "'10'": "10",
        "None": None,
        "nan": math.nan,
    }
    return [Case(port, f"{method} limit={k}", make(v), "limit") for k, v in bad.items()]


def _ttl_cases(
    port: str, method: str, make: Callable[[object], Callable[[Any], Any]]
) -> list[Case]:
    bad = {
        "0": timedelta(0),
        "-1s": timedelta(seconds=-1),
        "max+1us": MAX_TTL + timedelta(microseconds=1),
        "999999999d": timedelta(days=999_999_999),
        "int": 30,
        "float": 1.5,
        "str": "30s",
    }
    return [Case(port, f"{method} ttl={k}", make(v), "ttl") for k, v in bad.items()]


def _store_cases() -> list[Case]:
    s = "store"
    cases: list[Case] = []
    for method in ("get", "delete"):
        cases += _scope_cases(
            s, f"{method} owner", lambda v, m=method: lambda p: getattr(p, m)(v, "r")
        )
        cases += _id_cases(s, f"{method} id", lambda v, m=method: lambda p: getattr(p, m)("o", v))
    # Field names: the scope/id helpers prefix the method; fix them up below.
    cases = [attrs_field(c, c.field.split(" ")[-1]) for c in cases]
    for method, call in {
        "search": lambda p, **kw: p.search("o", VEC, **kw),
        "search_text": lambda p, **kw: p.search_text("o", "zebra", **kw),
        "list": lambda p, **kw: p.list("o", **kw),
    }.items():
        cases += _limit_cases(s, method, lambda v, c=call: lambda p: c(p, limit=v))
        cases += [
            Case(
                s,
                f"{method} namespace=''",
                lambda p, c=call: c(p, namespace=""),
                "namespace",
                ScopeRequired,
            ),
            Case(
                s, f"{method} namespace=NUL", lambda p, c=call: c(p, namespace="n\x00"), "namespace"
            ),
            Case(s, f"{method} kinds=str", lambda p, c=call: c(p, kinds="k"), "kinds"),
            Case(s, f"{method} kinds=[NUL]", lambda p, c=call: c(p, kinds=["k\x00"]), "kinds"),
            Case(s, f"{method} kinds=[int]", lambda p, c=call: c(p, kinds=[3]), "kinds"),
            Case(s, f"{method} kinds=['']", lambda p, c=call: c(p, kinds=[""]), "kinds"),
        ]
    cases += [
        Case(s, "search owner=NUL", lambda p: p.search("o\x00", VEC), "owner"),
        Case(s, "search owner=''", lambda p: p.search("", VEC), "owner", ScopeRequired),
        Case(
            s,
            "search vector=NaN",
            lambda p: p.search("o", np.array([1, np.nan, 0, 0])),
            "query vector",
        ),
        Case(
            s,
            "search vector=inf",
            lambda p: p.search("o", np.array([1, np.inf, 0, 0])),
            "query vector",
        ),
        Case(
            s,
            "search vector=-inf",
            lambda p: p.search("o", np.array([-np.inf, 1, 0, 0])),
            "query vector",
        ),
        Case(
            s,
            "search vector=float32 overflow",
            lambda p: p.search("o", [1e39, 0, 0, 0]),
            "query vector",
        ),
        Case(s, "search vector=str", lambda p: p.search("o", "abcd"), "query vector"),
        Case(s, "search vector=None", lambda p: p.search("o", None), "query vector"),
        Case(s, "search vector=[]", lambda p: p.search("o", []), "query vector"),
        Case(s, "search vector=2-D", lambda p: p.search("o", np.ones((2, 4))), "query vector"),
        Case(s, "search vector=dim 3", lambda p: p.search("o", np.ones(3)), "", DimensionMismatch),
        Case(s, "search vector=dim 5", lambda p: p.search("o", np.ones(5)), "", DimensionMismatch),
        Case(s, "search min_score=str", lambda p: p.search("o", VEC, min_score="x"), "min_score"),
        Case(s, "search min_score=True", lambda p: p.search("o", VEC, min_score=True), "min_score"),
        # Two bad arguments: every backend names the same one (filters before min_score).
        Case(
            s,
            "search kinds=str and min_score=str",
            lambda p: p.search("o", VEC, kinds="k", min_score="x"),
            "kinds",
        ),
        Case(
            s, "search min_score=nan", lambda p: p.search("o", VEC, min_score=math.nan), "min_score"
        ),
        Case(
            s, "search min_score=inf", lambda p: p.search("o", VEC, min_score=math.inf), "min_score"
        ),
        Case(s, "search_text owner=NUL", lambda p: p.search_text("o\x00", "zebra"), "owner"),
        Case(s, "search_text query=int", lambda p: p.search_text("o", 3), "query"),
        Case(s, "search_text query=None", lambda p: p.search_text("o", None), "query"),
        Case(s, "search_text query=bytes", lambda p: p.search_text("o", b"zebra"), "query"),
        Case(s, "search_text query=NUL", lambda p: p.search_text("o", "zebra\x00"), "query"),
        Case(
            s, "search_text query=surrogate", lambda p: p.search_text("o", "zebra \ud800"), "query"
        ),
        Case(s, "search_text query=max+1 bytes", lambda p: p.search_text("o", HUGE), "query"),
        Case(
            s,
            "search_text query=10 MB",
            lambda p: p.search_text("o", "zebra " * 2_000_000),
            "query",
        ),
        Case(s, "list owner=NUL", lambda p: p.list("o\x00"), "owner"),
        Case(s, "list cursor=int", lambda p: p.list("o", cursor=123), "cursor"),
        Case(s, "list cursor=bytes", lambda p: p.list("o", cursor=b"abc"), "cursor"),
        Case(s, "list cursor=list", lambda p: p.list("o", cursor=["x"]), "cursor"),
        Case(s, "list cursor=garbage", lambda p: p.list("o", cursor="not a cursor!"), "cursor"),
        Case(s, "list cursor=''", lambda p: p.list("o", cursor=""), "cursor"),
        Case(s, "list cursor=wrong shape", lambda p: p.list("o", cursor=_cursor("x", 1)), "cursor"),
        Case(
            s,
            "list cursor=naive time",
            lambda p: p.list("o", cursor=_cursor("2024-01-01T00:00:00", "r")),
            "cursor",
        ),
        Case(
            s,
            "list cursor=out of range",
            lambda p: p.list("o", cursor=_cursor("9999-12-31T23:00:00-05:00", "r")),
            "cursor",
        ),
        Case(
            s,
            "list cursor=NUL id",
            lambda p: p.list("o", cursor=encode_cursor(NOW, "r\x00")),
            "cursor",
        ),
        Case(
            s,
            "list cursor=int id",
            lambda p: p.list("o", cursor=_cursor(NOW.isoformat(), 5)),
            "cursor",
        ),
        Case(s, "list cursor=huge", lambda p: p.list("o", cursor="A" * 1_000_000), "cursor"),
        Case(s, "delete_scope owner=NUL", lambda p: p.delete_scope("o\x00"), "owner"),
        Case(s, "delete_scope owner=''", lambda p: p.delete_scope(""), "owner", ScopeRequired),
        Case(
            s,
            "delete_scope namespace=NUL",
            lambda p: p.delete_scope("o", namespace="\x00"),
            "namespace",
        ),
        Case(s, "delete_scope kinds=str", lambda p: p.delete_scope("o", kinds="k"), "kinds"),
        Case(s, "add single record", lambda p: p.add(_record()), "records"),
        Case(s, "add [int]", lambda p: p.add([1]), "records"),
        Case(s, "add content=NUL", lambda p: p.add([_record(content="a\x00b")]), "record.content"),
        Case(s, "add context=NUL", lambda p: p.add([_record(context="\x00")]), "record.context"),
        Case(
            s,
            "add attributes key=NUL",
            lambda p: p.add([_record(attributes={"a\x00": 1})]),
            "record.attributes",
        ),
        Case(
            s,
            "add attributes value=NUL",
            lambda p: p.add([_record(attributes={"a": ["x", {"b": "\x00"}]})]),
            "record.attributes",
        ),
        Case(
            s,
            "add attributes value=surrogate",
            lambda p: p.add([_record(attributes={"a": ["x", {"b": "\ud800"}]})]),
            "record.attributes",
        ),
        Case(
            s,
            "add unchecked id=NUL",
            lambda p: p.add([_unchecked(_record(), id="r\x00")]),
            "record.id",
        ),
        Case(
            s,
            "add unchecked owner=NUL",
            lambda p: p.add([_unchecked(_record(), owner="\x00")]),
            "record.owner",
        ),
        Case(
            s,
            "add unchecked kind=''",
            lambda p: p.add([_unchecked(_record(), kind="")]),
            "record.kind",
        ),
        Case(
            s,
            "add unchecked vector=list",
            lambda p: p.add([_unchecked(_record(), vector=[1.0] * 4)]),
            "record.vector",
        ),
        Case(
            s,
            "add vector dim 5",
            lambda p: p.add([_record(vector=np.ones(5))]),
            "",
            DimensionMismatch,
        ),
        Case(
            s,
            "add 2nd of batch dim 3",
            lambda p: p.add([_record(), _record(id="r2", vector=np.ones(3))]),
            "",
            DimensionMismatch,
        ),
        Case(s, "update record=None", lambda p: p.update(None), "record"),
        Case(
            s, "update content=NUL", lambda p: p.update(_record(content="\x00")), "record.content"
        ),
        Case(
            s,
            "update attributes NUL",
            lambda p: p.update(_record(attributes={"k": "v\x00"})),
            "record.attributes",
        ),
        Case(
            s,
            "update vector dim 3",
            lambda p: p.update(_record(vector=np.ones(3))),
            "",
            DimensionMismatch,
        ),
    ]
    return cases


def _versioned_cases() -> list[Case]:
    """`VersionedWrites` (every backend here but Qdrant): the same checks as
    `update` and `delete`, plus the version."""
    v = "versioned"
    cases = [
        Case(v, "update_if_older record=None", lambda p: p.update_if_older(None), "record"),
        Case(
            v,
            "update_if_older content=NUL",
            lambda p: p.update_if_older(_record(content="\x00")),
            "record.content",
        ),
        Case(
            v,
            "update_if_older vector dim 3",
            lambda p: p.update_if_older(_record(vector=np.ones(3))),
            "",
            DimensionMismatch,
        ),
    ]
    cases += _scope_cases(v, "owner", lambda x: lambda p: p.delete_if_unchanged(x, "r", NOW))
    cases += _id_cases(v, "id", lambda x: lambda p: p.delete_if_unchanged("o", x, NOW))
    for name, value in {
        "naive": NOW.replace(tzinfo=None),
        "str": NOW.isoformat(),
        "None": None,
        "int": 1714521600,
        "date": NOW.date(),
    }.items():
        cases.append(
            Case(
                v,
                f"delete_if_unchanged updated_at={name}",
                lambda p, x=value: p.delete_if_unchanged("o", "r", x),
                "updated_at",
            )
        )
    return cases


def attrs_field(case: Case, field: str) -> Case:
    return Case(case.port, case.name, case.call, field, case.error)


def _events_cases() -> list[Case]:
    e = "events"
    since = NOW - timedelta(days=1)
    cases = _scope_cases(e, "domain", lambda v: lambda p: p.window(v, since=since, limit=5))
    cases += _limit_cases(e, "window", lambda v: lambda p: p.window("d", since=since, limit=v))
    cases += _id_cases(e, "user_id", lambda v: lambda p: p.erase_user(v))
    cases += [
        Case(
            e,
            "window since=naive",
            lambda p: p.window("d", since=datetime(2024, 1, 1), limit=5),
            "since",
        ),
        Case(e, "window since=str", lambda p: p.window("d", since="2024-01-01", limit=5), "since"),
        Case(
            e,
            "window since=out of range",
            lambda p: p.window(
                "d", since=datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))), limit=5
            ),
            "since",
        ),
        Case(
            e,
            "window entity=tuple",
            lambda p: p.window("d", since=since, limit=5, entity=("pod", "x")),
            "entity",
        ),
        Case(e, "append single event", lambda p: p.append(_event()), "events"),
        Case(e, "append [str]", lambda p: p.append(["e"]), "events"),
        Case(
            e, "append summary=NUL", lambda p: p.append([_event(summary="a\x00")]), "event.summary"
        ),
        Case(e, "append action=NUL", lambda p: p.append([_event(action="\x00")]), "event.action"),
        Case(
            e, "append outcome=NUL", lambda p: p.append([_event(outcome="ok\x00")]), "event.outcome"
        ),
        Case(
            e,
            "append fallback_reason=NUL",
            lambda p: p.append([_event(fallback_reason="\x00")]),
            "event.fallback_reason",
        ),
        Case(
            e,
            "append fallback_reason=int",
            lambda p: p.append([_event(fallback_reason=3)]),
            "event.fallback_reason",
        ),
        Case(
            e,
            "append metadata NUL key",
            lambda p: p.append([_event(metadata={"\x00": 1})]),
            "event.metadata",
        ),
        Case(
            e,
            "append metadata NUL value",
            lambda p: p.append([_event(metadata={"a": {"b": ["\x00"]}})]),
            "event.metadata",
        ),
        Case(
            e,
            "append metadata surrogate key",
            lambda p: p.append([_event(metadata={"\udfff": 1})]),
            "event.metadata",
        ),
    ]
    return cases


def _lease_cases() -> list[Case]:
    l_ = "leases"
    cases: list[Case] = []
    for method in ("acquire", "renew"):
        call = lambda p, m=method, **kw: getattr(p, m)(  # noqa: E731
            kw.get("scope", "s"),
            kw.get("key", "k"),
            kw.get("owner", "w"),
            kw.get("ttl", TTL),
            **({"payload": kw["payload"]} if "payload" in kw else {}),
        )
        cases += _ttl_cases(l_, method, lambda v, c=call: lambda p: c(p, ttl=v))
        cases += [
            attrs_field(c, "scope")
            for c in _scope_cases(l_, f"{method} scope", lambda v, c=call: lambda p: c(p, scope=v))
        ]
        cases += [
            attrs_field(c, "key")
            for c in _id_cases(l_, f"{method} key", lambda v, c=call: lambda p: c(p, key=v))
        ]
        cases += [
            attrs_field(c, "owner")
            for c in _id_cases(l_, f"{method} owner", lambda v, c=call: lambda p: c(p, owner=v))
        ]
        cases += [
            Case(
                l_, f"{method} payload=str", lambda p, c=call: c(p, payload="text"), "lease.payload"
            ),
            Case(l_, f"{method} payload=int", lambda p, c=call: c(p, payload=5), "lease.payload"),
            Case(
                l_,
                f"{method} payload over MAX_VALUE_BYTES",
                lambda p, c=call: c(p, payload=b"x" * (MAX_VALUE_BYTES + 1)),
                "lease.payload",
            ),
        ]
    cases += [
        Case(
            l_,
            "acquire payload=None",
            lambda p: p.acquire("s", "k", "w", TTL, None),
            "lease.payload",
        )
    ]
    cases += [
        attrs_field(c, "scope")
        for c in _scope_cases(l_, "release scope", lambda v: lambda p: p.release(v, "k", "w"))
    ]
    cases += [
        attrs_field(c, "key")
        for c in _id_cases(l_, "release key", lambda v: lambda p: p.release("s", v, "w"))
    ]
    cases += [
        attrs_field(c, "owner")
        for c in _id_cases(l_, "release owner", lambda v: lambda p: p.release("s", "k", v))
    ]
    cases += [
        attrs_field(c, "scope")
        for c in _scope_cases(l_, "get scope", lambda v: lambda p: p.get(v, "k"))
    ]
    cases += [
        attrs_field(c, "key") for c in _id_cases(l_, "get key", lambda v: lambda p: p.get("s", v))
    ]
    cases += [
        attrs_field(c, "scope")
        for c in _scope_cases(l_, "scan scope", lambda v: lambda p: p.scan(v))
    ]
    cases += [
        Case(l_, "scan prefix=int", lambda p: p.scan("s", 5), "prefix"),
        Case(l_, "scan prefix=None", lambda p: p.scan("s", None), "prefix"),
        Case(l_, "scan prefix=bytes", lambda p: p.scan("s", b"k"), "prefix"),
        Case(l_, "scan prefix=NUL", lambda p: p.scan("s", "k\x00"), "prefix"),
        Case(l_, "scan prefix=surrogate", lambda p: p.scan("s", "\ud800"), "prefix"),
    ]
    return cases


def _cache_cases() -> list[Case]:
    c_ = "cache"
    cases = _ttl_cases(c_, "put", lambda v: lambda p: p.put("s", "k", b"v", v))
    for method, call in {
        "get": lambda p, scope="s", key="k": p.get(scope, key),
        "put": lambda p, scope="s", key="k": p.put(scope, key, b"v"),
        "delete": lambda p, scope="s", key="k": p.delete(scope, key),
    }.items():
        cases += [
            attrs_field(c, "scope")
            for c in _scope_cases(c_, f"{method} scope", lambda v, f=call: lambda p: f(p, scope=v))
        ]
        cases += [
            attrs_field(c, "key")
            for c in _id_cases(c_, f"{method} key", lambda v, f=call: lambda p: f(p, key=v))
        ]
    cases += [
        attrs_field(c, "scope")
        for c in _scope_cases(
            c_, "delete_prefix scope", lambda v: lambda p: p.delete_prefix(v, "k")
        )
    ]
    cases += [
        Case(c_, "put value=str", lambda p: p.put("s", "k", "text"), "value"),
        Case(c_, "put value=None", lambda p: p.put("s", "k", None), "value"),
        Case(c_, "put value=int", lambda p: p.put("s", "k", 5), "value"),
        Case(
            c_,
            "put value over MAX_VALUE_BYTES",
            lambda p: p.put("s", "k", b"x" * (MAX_VALUE_BYTES + 1)),
            "value",
        ),
        Case(c_, "delete_prefix prefix=int", lambda p: p.delete_prefix("s", 5), "prefix"),
        Case(c_, "delete_prefix prefix=None", lambda p: p.delete_prefix("s", None), "prefix"),
        Case(c_, "delete_prefix prefix=NUL", lambda p: p.delete_prefix("s", "\x00"), "prefix"),
    ]
    return cases


CASES = {
    "store": _store_cases(),
    "events": _events_cases(),
    "leases": _lease_cases(),
    "cache": _cache_cases(),
}
VERSIONED_CASES = _versioned_cases()


async def _expect(ports: Ports, case: Case) -> str | None:
    """None when the call raised exactly `case.error` naming `case.field`, else what happened."""
    try:
        got = await case.call(ports[case.port])
    except AgentMemoryError as exc:
        if type(exc) is not case.error:
            return f"{case.name}: expected {case.error.__name__}, got {type(exc).__name__}: {exc}"
        if isinstance(exc, InvalidInput) and (
            exc.field != case.field or case.field not in str(exc)
        ):
            return (
                f"{case.name}: the message must name {case.field!r}, got field {exc.field!r}: {exc}"
            )
        return None
    except Exception as exc:  # a builtin escaping is exactly the bug this catches
        return (
            f"{case.name}: expected {case.error.__name__}, got builtin {type(exc).__name__}: {exc}"
        )
    return f"{case.name}: expected {case.error.__name__}, the call returned {got!r:.100}"


# ------------------------------------------------------------------ backends


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _open(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Ports:
    deployment = "p" + uuid.uuid4().hex[:10]
    if backend == "memory":
        return {
            "store": InMemoryMemoryStore(SPACE),
            "events": InMemoryEventLog(retention=RETENTION),
            "leases": InMemoryLeaseStore(),
            "cache": InMemoryCache(),
        }
    if backend == "sqlite":
        from agent_memory.adapters.sqlite import open_sqlite

        s = open_sqlite(tmp_path / "parity.db", space=SPACE, retention=RETENTION)
        return {"store": s.store, "events": s.events, "leases": s.leases, "cache": s.cache}
    if backend in ("redis", "redis-down"):
        from agent_memory.adapters.redis import (
            RedisCache,
            RedisEventLog,
            RedisLeaseStore,
            RedisMemoryStore,
            connect,
        )
        from agent_memory.adapters.redis._handle import SharedClient

        url = (
            request.getfixturevalue("redis_url")
            if backend == "redis"
            else f"redis://127.0.0.1:{_dead_port()}/0"
        )
        shared = SharedClient(connect(url))
        return {
            "store": RedisMemoryStore(shared, SPACE, deployment=deployment),
            "events": RedisEventLog(shared, deployment=deployment, retention=RETENTION),
            "leases": RedisLeaseStore(shared, deployment=deployment),
            "cache": RedisCache(shared, deployment=deployment),
        }
    if backend in ("postgres", "postgres-down"):
        from agent_memory.adapters.postgres import (
            PostgresCache,
            PostgresDatabase,
            PostgresEventLog,
            PostgresLeaseStore,
            PostgresMemoryStore,
        )

        if backend == "postgres":
            url = request.getfixturevalue("postgres_url")
        else:
            url = f"postgresql://nobody@127.0.0.1:{_dead_port()}/none?connect_timeout=1"
        db = PostgresDatabase(
            url, schema="t_bad_input_parity", min_size=1, max_size=2, connect_timeout=1.0
        )
        return {
            "store": PostgresMemoryStore(db, SPACE, owns_database=True),
            "events": PostgresEventLog(db, retention=RETENTION, owns_database=True),
            "leases": PostgresLeaseStore(db, owns_database=True),
            "cache": PostgresCache(db, owns_database=True),
        }
    assert backend == "qdrant"
    from qdrant_client import AsyncQdrantClient

    from agent_memory.adapters.qdrant import QdrantMemoryStore

    client = AsyncQdrantClient(location=":memory:")
    return {"store": QdrantMemoryStore(client, SPACE, owns_client=True)}


@pytest.fixture
async def ports(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Ports]:
    opened = await _open(request.param, tmp_path, request)
    try:
        yield opened
    finally:
        for port in opened.values():
            await port.close()


def _params(backends: list[str], port: str) -> list[Any]:
    served = [b for b in backends if port == "store" or not b.startswith("qdrant")]
    return [pytest.param(b, id=b) for b in served]


@pytest.mark.parametrize("port", list(CASES))
@pytest.mark.parametrize("ports", BACKENDS + DEAD, indirect=True)
async def test_every_bad_input_raises_the_same_typed_error(ports: Ports, port: str) -> None:
    """Every case on every backend serving the port: the exact error type, naming
    the argument; the dead-server variants prove the check runs before any I/O."""
    if port not in ports:
        pytest.skip("this backend does not serve the port (Qdrant serves MemoryStore only)")
    failures = [f for case in CASES[port] if (f := await _expect(ports, case)) is not None]
    assert not failures, f"{len(failures)} of {len(CASES[port])} cases:\n" + "\n".join(failures)


@pytest.mark.parametrize("ports", [b for b in BACKENDS + DEAD if b != "qdrant"], indirect=True)
async def test_every_bad_conditional_write_raises_the_same_typed_error(ports: Ports) -> None:
    """`update_if_older` and `delete_if_unchanged` (every backend with
    `VersionedWrites`; Qdrant has none): the exact error type, naming the
    argument, before any I/O."""
    store = ports["store"]
    assert isinstance(store, VersionedWrites)
    with_port = {**ports, "versioned": store}
    failures = [f for case in VERSIONED_CASES if (f := await _expect(with_port, case)) is not None]
    assert not failures, f"{len(failures)} of {len(VERSIONED_CASES)} cases:\n" + "\n".join(failures)


# ------------------------------------------------------------ converged rules


@pytest.mark.parametrize("ports", BACKENDS, indirect=True)
async def test_the_maximum_limit_is_accepted_everywhere(ports: Ports) -> None:
    store, tag = ports["store"], uuid.uuid4().hex  # PostgreSQL keeps one schema across runs
    await store.add([_record(owner=tag)])
    assert [h.record.id for h in await store.search(tag, VEC, limit=MAX_LIMIT)] == ["r"]
    assert [r.id for r in (await store.list(tag, limit=MAX_LIMIT)).records] == ["r"]
    if "events" in ports:
        now = datetime.now(UTC)
        await ports["events"].append([_event(domain=tag, occurred_at=now, recorded_at=now)])
        since = datetime.now(UTC) - timedelta(hours=1)
        window = await ports["events"].window(tag, since=since, limit=MAX_LIMIT)
        assert [e.id for e in window.events] == ["e"]
    if "leases" in ports:
        assert await ports["leases"].acquire("s", "k", "w", MAX_TTL) is not None
        await ports["cache"].put("s", "k", b"v", MAX_TTL)
        assert await ports["cache"].get("s", "k") == b"v"
        largest = bytes(range(256)) * (MAX_VALUE_BYTES // 256)  # exactly MAX_VALUE_BYTES
        await ports["cache"].put(tag, "big", largest)
        assert await ports["cache"].get(tag, "big") == largest
        held = await ports["leases"].acquire(tag, "big", "w", MAX_TTL, largest)
        assert held is not None
        assert held.payload == largest


@pytest.mark.parametrize("ports", BACKENDS, indirect=True)
async def test_a_query_at_the_maximum_size_honours_every_word(ports: Ports) -> None:
    """4,000 distinct words then the one word that matches, padded to exactly
    MAX_QUERY_BYTES: every backend finds the record (none caps the words), and
    a word longer than the maximum word size matches nowhere."""
    store = ports["store"]
    await store.delete_scope("o")  # PostgreSQL keeps one schema across runs
    await store.add([_record(content="zebra crossing"), _record(id="long", content="y" * 100)])
    words = " ".join(f"q{i}x" for i in range(4000))
    pad = MAX_QUERY_BYTES - len(words.encode()) - len(" zebra")
    query = words + " " * pad + " zebra"
    assert len(query.encode()) == MAX_QUERY_BYTES
    assert [h.record.id for h in await store.search_text("o", query)] == ["r"]
    assert await store.search_text("o", "y" * 100) == []


# ------------------------------------------------------------------ hypothesis

_WRONG = st.one_of(
    st.integers(),
    st.floats(),
    st.binary(max_size=4),
    st.none(),
    st.booleans(),
    st.lists(st.text(max_size=2), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)


@pytest.mark.parametrize(
    "ports", ["memory", "sqlite", "postgres-down", "redis-down"], indirect=True
)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=_WRONG,
    slot=st.sampled_from(["scope", "key", "owner", "limit", "ttl", "cursor", "query", "prefix"]),
)
async def test_any_wrong_type_is_invalid_input_naming_the_argument(
    ports: Ports, value: object, slot: str
) -> None:
    assume(not (slot == "cursor" and value is None))  # no cursor: the first page
    in_range = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_LIMIT
    assume(not (slot == "limit" and in_range))
    calls: dict[str, Callable[[Ports], Awaitable[object]]] = {
        "scope": lambda p: p["cache"].get(value, "k"),
        "key": lambda p: p["leases"].get("s", value),
        "owner": lambda p: p["leases"].release("s", "k", value),
        "limit": lambda p: p["store"].list("o", limit=value),
        "ttl": lambda p: p["leases"].acquire("s", "k", "w", value),
        "cursor": lambda p: p["store"].list("o", cursor=value),
        "query": lambda p: p["store"].search_text("o", value),
        "prefix": lambda p: p["cache"].delete_prefix("s", value),
    }
    with pytest.raises(InvalidInput) as caught:
        await calls[slot](ports)
    assert caught.value.field == slot, caught.value


@pytest.mark.parametrize("ports", ["memory", "sqlite"], indirect=True)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(limit=st.integers(), days=st.integers(min_value=-999_999_999, max_value=999_999_999))
async def test_limits_and_ttls_in_range_pass_and_all_others_are_invalid(
    ports: Ports, limit: int, days: int
) -> None:
    ok_limit = 1 <= limit <= MAX_LIMIT
    ttl = timedelta(days=days)
    ok_ttl = timedelta(0) < ttl <= MAX_TTL
    for call, ok, field in (
        (lambda: ports["store"].list("o", limit=limit), ok_limit, "limit"),
        (lambda: ports["events"].window("d", since=NOW, limit=limit), ok_limit, "limit"),
        (lambda: ports["cache"].put("s", "k", b"v", ttl), ok_ttl, "ttl"),
        (lambda: ports["leases"].acquire("s", f"k{uuid.uuid4().hex}", "w", ttl), ok_ttl, "ttl"),
    ):
        if ok:
            await call()
        else:
            with pytest.raises(InvalidInput, match=field):
                await call()


# ------------------------------------------------------ the checks can fail


def test_the_harness_reports_a_builtin_or_an_unnamed_field() -> None:
    """`_expect` itself: a builtin, a wrong field and no error are each reported."""
    import asyncio

    async def raise_(exc: BaseException) -> None:
        raise exc

    async def fine() -> int:
        return 1

    ports = {"store": None}
    assert "builtin AttributeError" in str(
        asyncio.run(
            _expect(ports, Case("store", "x", lambda _p: raise_(AttributeError("a")), "cursor"))
        )
    )
    assert "must name" in str(
        asyncio.run(
            _expect(
                ports, Case("store", "x", lambda _p: raise_(InvalidInput("other", "bad")), "cursor")
            )
        )
    )
    assert "ScopeRequired, got InvalidInput" in str(
        asyncio.run(
            _expect(
                ports,
                Case(
                    "store",
                    "x",
                    lambda _p: raise_(InvalidInput("owner", "bad")),
                    "owner",
                    ScopeRequired,
                ),
            )
        )
    )
    assert "returned" in str(
        asyncio.run(_expect(ports, Case("store", "x", lambda _p: fine(), "cursor")))
    )
    assert (
        asyncio.run(
            _expect(
                ports,
                Case("store", "x", lambda _p: raise_(InvalidInput("cursor", "bad")), "cursor"),
            )
        )
        is None
    )

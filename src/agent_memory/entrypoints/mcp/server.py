"""The MCP server (`agent-memory mcp`, extra `mcp`), on the official SDK's `MCPServer`.

One server serves one store URL. Tools are thin calls into the services:

| tool | service call | key |
| --- | --- | --- |
| `remember` | `memory.users.reconcile` (ADD / UPDATE / CONTRADICT / DUPLICATE) | writes |
| `recall` | `memory.users.recall` | reads |
| `forget` | `memory.users.forget` / `forget_fact` (returns the receipt) | writes |
| `search_memories` | `memory.store.search` on the user's facts | reads |
| `record_steps` | `memory.agents.request(...).record(steps)` | writes |
| `planning_context` | `memory.agents.request(...).planning_context()` (signal, claims) | writes |

Resource `user-profile://{user_id}/{namespace}`: the `<user_profile>` view.

Identity. Over stdio (and over HTTP with `--no-auth`, loopback only) the
server has one local user: `user_id` and `domain` are used as given, and the
server trusts them. Built with `keys` (the HTTP service's `KeyRing`: one key
file, one format), every HTTP request carries `Authorization: Bearer <key>`,
checked by the SDK's own bearer middleware (`TokenVerifier`; a missing,
unknown or revoked key is a 401 before any tool runs, and a session is bound
to the key that opened it). The tenant comes from the key: user ids and
domains are mapped through the key's tenant exactly as `agent-memory serve`
does (`t/<tenant>/u/<user>`, `t/<tenant>/d/<domain>`), so no id can reach
another tenant's data; a key bound to one user refuses any other `user_id`
(`PermissionDenied`, field `user_id`), and a read-only key refuses the writing
tools. `_identity()` is the one place a call's key id and tenant are known.

Errors come back as a tool result with `is_error` and a JSON body
`{"error": {"type", "message", "field"}}`; arguments outside the HTTP schema's
bounds (ids <= 1,024 characters, a fact <= 100,000, a request text <=
1,000,000, <= 100 facts or steps) or of the wrong type are an `InvalidInput`
body naming the field, like the service's own checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import secrets
import types
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal, Protocol, TypeVar

from attrs import frozen
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resources.templates import ResourceSecurity
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, ValidationError

from agent_memory.bootstrap import Memory, Settings, connect
from agent_memory.domain.errors import (
    AgentMemoryError,
    AuditNotRecorded,
    BackendUnavailable,
    ConfigurationError,
    DimensionMismatch,
    InvalidInput,
    ModelError,
    ModelTimeout,
    NotFound,
    PermissionDenied,
    StorageCorrupted,
    StoreClosed,
)
from agent_memory.domain.records import Entity
from agent_memory.domain.steps import Step
from agent_memory.domain.user_facts import FactCandidate
from agent_memory.domain.validation import (
    MAX_ID_BYTES,
    require_id,
    require_limit,
    require_scope,
)
from agent_memory.domain.views.encoding import encode_text
from agent_memory.entrypoints.bounds import (
    MAX_BATCH,
    Action,
    Doing,
    FactContent,
    Id,
    Limit,
    Outcome,
    Query,
    Text,
    Unit,
    describe,
)
from agent_memory.services.audit import acting_as

__all__ = ["ApiKeys", "Identity", "build_server"]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

UserId = Annotated[
    Id,
    Field(
        description="The user the facts belong to: the host's stable id for its "
        "authenticated user (never chosen by the model). With a key bound to one "
        "user, that user's id; any other is refused.",
    ),
]
Namespace = Annotated[
    Id,
    Field(
        description="The agent type whose memory this is (e.g. 'support-bot'); cross-agent "
        "facts (name, language, time zone) go to 'universal' automatically.",
    ),
]
# the HTTP service's categories: a session summary is a fact like any other
Category = Literal["identity", "preference", "constraint", "relationship", "context", "summary"]


class FactIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: FactContent = Field(description="The fact, e.g. 'User prefers dark roast'.")
    category: Category = Field(default="preference", description="What kind of fact it is.")
    confidence: Unit = Field(default=0.9, description="How sure, from 0 to 1.")


class StepIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Action = Field(min_length=1, description="What the agent did, e.g. 'kubectl get pods'.")
    outcome: Outcome = Field(default="success", description="success, failure, ...")
    response: Text = Field(default="", description="What the action returned (shortened).")
    failure_cause: Text | None = Field(default=None, description="Why it failed, if it did.")


class InternalError(Exception):
    """What a client is told of an exception the library did not raise on
    purpose (a bug, a driver error that escaped): its message may hold
    internals (a query, a path, stored text), so only the server log has it."""

    def __init__(self) -> None:
        super().__init__("the tool failed unexpectedly; the server log has the details")


def _message(exc: BaseException) -> str:
    """What the client is told of an error. The caller's own mistakes (bad
    input, a refused key, a deadline) keep their message; an error of the
    backend or a model keeps its type but not its message, which may hold
    internals (a driver's host and role, a server file path, stored scopes):
    the server log has it, as with the HTTP service's problem documents."""
    if isinstance(exc, InvalidInput | PermissionDenied | DeadlineExceeded | InternalError):
        return str(exc)
    if isinstance(exc, NotFound):  # its scope may be a stored one: the id the caller sent
        return f"{exc.field}: no such record {exc.id!r}" if exc.field else "no such record"
    if isinstance(exc, AuditNotRecorded):
        return (
            f"{exc.entry.operation} completed; audit entry {exc.entry.id} not recorded "
            "(the server log has the details)"
        )
    if isinstance(exc, BackendUnavailable | StoreClosed):
        return "the storage backend is unavailable; retrying is safe (the server log has why)"
    if isinstance(exc, StorageCorrupted):
        return "the storage is damaged; the server log has the details"
    if isinstance(exc, ModelTimeout):
        return "the language model or embedder timed out"
    if isinstance(exc, ModelError):
        return "the language model or embedder failed"
    if isinstance(exc, DimensionMismatch):
        return "the embedder and the store disagree on the dimension"
    return f"{type(exc).__name__}: the server log has the details"


def _body(exc: BaseException) -> dict[str, Any]:
    body: dict[str, Any] = {"type": type(exc).__name__, "message": _message(exc)}
    field = getattr(exc, "field", None)
    if isinstance(field, str):
        body["field"] = field
    return {"error": body}


def _error(exc: BaseException) -> ToolError:
    return ToolError(json.dumps(_body(exc), ensure_ascii=False))


def _resource_error(exc: BaseException) -> MCPError:
    """A resource read that fails: a JSON-RPC error whose message is the typed
    body (and `data` the same body); invalid params for the caller's mistakes."""
    code = INVALID_PARAMS if isinstance(exc, InvalidInput | PermissionDenied) else INTERNAL_ERROR
    body = _body(exc)
    return MCPError(code, json.dumps(body, ensure_ascii=False), data=body)


def _invalid(tool: str, exc: ValidationError) -> ToolError:
    """Arguments that fail the input schema: the `InvalidInput` body, naming the
    first bad field (`facts.0.content`), without the value (it may be megabytes).
    The field and message are the HTTP service's (`bounds.describe`): NUL, a lone
    surrogate, a blank or over-long id read as the library's own refusal."""
    errors = exc.errors(include_url=False, include_input=False)
    first: Mapping[str, Any] = errors[0] if errors else {"loc": (), "msg": "invalid arguments"}
    field, message, _refused = describe(first, whole="arguments")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    body = {"type": "InvalidInput", "field": field, "message": f"{field}: {message}{more}"}
    return ToolError(
        f"Error executing tool {tool}: " + json.dumps({"error": body}, ensure_ascii=False)
    )


def _takes_text(annotation: Any) -> bool:
    """Whether a parameter of this type accepts a string (`str`, `Id | None`)."""
    if annotation is str:
        return True
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _takes_text(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return any(_takes_text(arg) for arg in typing.get_args(annotation))
    return False


class _Arguments(FuncMetadata):
    """A tool's arguments taken as sent. The SDK decodes a string argument as
    JSON when the parameter's type is not plain `str` (for clients that send a
    list as JSON text): for `namespace: Id | None` the id "null" became None,
    and `forget(user_id, namespace="null")` forgot the whole user. A string
    stays a string for every parameter that takes one; a list (`facts`,
    `steps`) sent as JSON text is still read."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        parsed = super().pre_parse_json(data)
        fields = self.arg_model.model_fields
        for name, value in data.items():
            if isinstance(value, str) and name in fields and _takes_text(fields[name].annotation):
                parsed[name] = value
        return parsed


def _strict(metadata: FuncMetadata) -> FuncMetadata:
    """`metadata` with its arguments taken as sent and an unknown argument
    refused (`InvalidInput` naming it): a misspelt optional argument was dropped
    without a word, so `forget(user_id, factid=...)` forgot everything."""
    model = type(
        metadata.arg_model.__name__,
        (metadata.arg_model,),
        {"model_config": ConfigDict(extra="forbid", arbitrary_types_allowed=True)},
    )
    assert issubclass(model, ArgModelBase)
    return _Arguments(
        arg_model=model,
        output_schema=metadata.output_schema,
        output_model=metadata.output_model,
        wrap_output=metadata.wrap_output,
    )


class _Server(MCPServer[Any]):
    """`MCPServer` whose tools take their arguments as sent and refuse unknown
    ones (`_strict`), whose argument validation errors are typed `InvalidInput`
    bodies, and whose stdio transport answers every malformed request
    (`entrypoints.mcp.envelopes`)."""

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: Any = None,
        icons: Any = None,
        meta: dict[str, Any] | None = None,
        structured_output: bool | None = None,
    ) -> None:
        super().add_tool(fn, name, title, description, annotations, icons, meta, structured_output)
        tool = self._tool_manager.get_tool(name or fn.__name__)
        assert tool is not None
        tool.fn_metadata = _strict(tool.fn_metadata)
        tool.parameters = {**tool.parameters, "additionalProperties": False}

    async def run_stdio_async(self) -> None:
        from agent_memory.entrypoints.mcp.envelopes import serve_stdio

        lowlevel = self._lowlevel_server

        async def run(read_stream: Any, write_stream: Any) -> None:
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

        await serve_stdio(run)

    def streamable_http_app(self, **options: Any) -> Any:
        from agent_memory.entrypoints.mcp.envelopes import EnvelopeCheck

        app = super().streamable_http_app(**options)
        path = options.get("streamable_http_path", "/mcp")
        limit = options.get("max_request_body_size")
        options_ = {} if limit is None else {"max_body": limit}
        for route in app.routes:
            if getattr(route, "path", None) != path or not hasattr(route, "app"):
                continue
            # around the MCP endpoint itself, behind the key check (a request
            # without a valid key is still a 401, whatever its body)
            if isinstance(route.app, RequireAuthMiddleware):
                route.app.app = EnvelopeCheck(route.app.app, **options_)
            else:
                route.app = EnvelopeCheck(route.app, **options_)
        return app

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise _invalid(name, exc.__cause__) from None
            raise


class Scoping(Protocol):
    """How a caller's ids map to stored scopes: a key's tenant
    (`agent_memory.entrypoints.server.Tenant`), or the local identity."""

    @property
    def name(self) -> str: ...
    def owner(self, user_id: object) -> str: ...
    def domain(self, domain: object) -> str: ...
    def user_of(self, owner: str | None) -> str | None: ...
    def domain_of(self, stored: str) -> str | None: ...


class _Key(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def tenant(self) -> Scoping: ...
    @property
    def read_only(self) -> bool: ...


class ApiKeys(Protocol):
    """The accepted keys: `agent_memory.entrypoints.server.KeyRing` (the key file
    of `agent-memory serve`)."""

    def authenticate(self, token: str) -> _Key | None: ...


class _LocalScope:
    """One local user (stdio, `--no-auth`): ids are stored as given."""

    name = "local"

    def owner(self, user_id: object) -> str:
        return require_id(user_id, "user_id")

    def domain(self, domain: object) -> str:
        return require_scope(domain, "domain")

    def user_of(self, owner: str | None) -> str | None:
        return owner

    def domain_of(self, stored: str) -> str | None:
        return stored


@frozen
class Identity:
    """Who a tool call acts for: the key (None: the local user) and its tenant."""

    key_id: str | None
    tenant: Scoping
    read_only: bool = False


LOCAL = Identity(None, _LocalScope())


class _KeyToken(AccessToken):
    """The SDK's access token, carrying the key it was verified as."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    key: Any = Field(default=None, exclude=True, repr=False)


class _KeyVerifier:
    """The SDK's `TokenVerifier` over the API keys: the SDK's bearer middleware
    answers 401 for a missing, unknown or revoked key before any tool runs."""

    def __init__(self, keys: ApiKeys) -> None:
        self._keys = keys

    async def verify_token(self, token: str) -> AccessToken | None:
        key = self._keys.authenticate(token)
        if key is None:
            return None
        # client_id is the session owner: a session opened with one key is
        # "not found" for any other. The token itself is not kept.
        return _KeyToken(token="", client_id=key.id, scopes=[], key=key)


def _identity(local: Identity | None) -> Identity:
    """The identity of the current tool call: the API key of its HTTP request
    (the SDK carries the request's context into the tool), else the local user
    when the server has no keys. The one place a call's key id and tenant are
    known (see `_acting`)."""
    token = get_access_token()
    if isinstance(token, _KeyToken) and token.key is not None:
        key: _Key = token.key
        return Identity(key.id, key.tenant, key.read_only)
    if local is not None:
        return local
    raise PermissionDenied("an API key is required")  # keys configured, none presented


def _acting(who: Identity) -> contextlib.AbstractContextManager[Any]:
    """Around each tool call, with its identity known: audit entries written
    by the call (a forget) name the key and its tenant. Without a key (stdio,
    `--no-auth`) they name the caller "mcp" and no tenant, as the scopes are the
    caller's ids as given."""
    if who.key_id is None:
        return acting_as("mcp")
    return acting_as(who.key_id, who.tenant.name)


def _failures(failures: Iterable[Any]) -> list[dict[str, str]]:
    """Stage failures without their messages (they may quote stored scopes)."""
    return [{"operation": f.operation, "error": f.error_type} for f in failures]


class _Holder:
    memory: Memory | None = None

    def get(self) -> Memory:
        if self.memory is None:  # pragma: no cover - the lifespan opens it first
            raise ToolError(json.dumps({"error": {"type": "NotReady", "message": "starting"}}))
        return self.memory


# Tool calls still running after their deadline (cancelled, not yet settled):
# kept referenced until they finish, so none is collected mid-cancellation.
_ABANDONED: set[asyncio.Future[Any]] = set()


class DeadlineExceeded(Exception):
    """A tool call that passed its deadline (`call_timeout`): the store did not
    answer in time. Its body's `type` is `DeadlineExceeded`."""


def _deadline_error(seconds: float) -> DeadlineExceeded:
    return DeadlineExceeded(
        f"no answer within {seconds:g} s; retrying is safe "
        "(writes are idempotent by id, facts are reconciled)"
    )


async def _within(call: Awaitable[_T], seconds: float | None) -> _T:
    """`call` awaited for at most `seconds` (None: no deadline); past it, the
    call is cancelled and left to settle on its own, and `DeadlineExceeded` is
    raised at once (a backend whose cancellation is slow never holds the client)."""
    if seconds is None:
        return await call
    task = asyncio.ensure_future(call)
    try:
        await asyncio.wait((task,), timeout=seconds)
    except BaseException:  # this call was cancelled: so is its work
        task.cancel()
        raise
    if task.done():
        return task.result()
    task.cancel()
    _ABANDONED.add(task)
    task.add_done_callback(_settled)
    _log.warning("tool call passed its deadline (%.1f s)", seconds)
    raise _deadline_error(seconds)


def _settled(task: asyncio.Future[Any]) -> None:
    _ABANDONED.discard(task)
    if not task.cancelled() and task.exception() is not None:
        _log.warning("abandoned tool call ended with %s", type(task.exception()).__name__)


async def _guard(
    local: Identity | None,
    call: Callable[[Identity], Awaitable[_T]],
    *,
    writes: bool = False,
    resource: bool = False,
    deadline: float | None = None,
) -> _T:
    """Resolve the caller, refuse a read-only key on a writing tool, run the
    call within `deadline` seconds. Typed errors become structured tool errors
    (JSON-RPC errors for a resource); anything else too, without a traceback to
    the client."""
    wrap = _resource_error if resource else _error
    try:
        who = _identity(local)
        if writes and who.read_only:
            raise PermissionDenied("this API key may only read")
        with _acting(who):
            return await _within(call(who), deadline)
    except (ToolError, MCPError):
        raise
    except (AgentMemoryError, DeadlineExceeded) as exc:
        if not isinstance(exc, InvalidInput | PermissionDenied | NotFound | DeadlineExceeded):
            _log.warning("tool failed: %s: %s", type(exc).__name__, exc)  # not sent: _message
        raise wrap(exc) from None
    except Exception:
        _log.exception("tool failed")
        raise wrap(InternalError()) from None


def _check_timeout(call_timeout: object) -> float | None:
    if call_timeout is None:
        return None
    if (
        isinstance(call_timeout, bool)
        or not isinstance(call_timeout, int | float)
        or not math.isfinite(call_timeout)
        or call_timeout <= 0
    ):
        raise ConfigurationError(
            f"call_timeout must be a finite number of seconds > 0 (or None), got {call_timeout!r}"
        )
    return float(call_timeout)


# The SDK's bearer middleware needs an OAuth issuer URL in its settings; with a
# token verifier and no authorization server or resource metadata it is never
# used or published (the keys come from the key file, not from OAuth).
_UNUSED_ISSUER = "http://localhost"


def build_server(
    url: str | None = None,
    *,
    memory: Memory | None = None,
    keys: ApiKeys | None = None,
    settings: Settings | None = None,
    call_timeout: float | None = 30.0,
) -> MCPServer[Any]:
    """The MCP server for one store URL (opened on start with `settings`,
    closed on stop), or for an already connected `memory` (left open).

    Without `keys`: one local user (stdio), ids used as given. With `keys`
    (over streamable HTTP): every request needs a Bearer key; each call acts
    within the key's tenant, for its bound user if it has one.

    `call_timeout`: a tool call (or resource read) that has not answered after
    this many seconds answers a `DeadlineExceeded` tool error, and its work is
    cancelled (None: no deadline); a bad value is a `ConfigurationError`."""
    deadline = _check_timeout(call_timeout)
    holder = _Holder()
    local = None if keys is not None else LOCAL

    @asynccontextmanager
    async def lifespan(_server: MCPServer[Any]) -> AsyncIterator[None]:
        if memory is not None:
            holder.memory = memory
            try:
                yield
            finally:
                # forgets whose call the deadline cancelled run to their end
                await memory.users.drain()
            return
        async with connect(url, settings=settings) as opened:
            holder.memory = opened
            try:
                yield
            finally:  # closing drains the forgets whose call was cancelled
                holder.memory = None

    auth: dict[str, Any] = {}
    if keys is not None:
        auth = {
            "token_verifier": _KeyVerifier(keys),
            "auth": AuthSettings(issuer_url=AnyHttpUrl(_UNUSED_ISSUER), resource_server_url=None),
        }
    server: MCPServer[Any] = _Server(
        "agent-memory",
        instructions="Shared memory for agents: private user facts (remember, recall, "
        "forget, search_memories) and episodic agent memory (record_steps, planning_context). "
        "Pass the host's user id on every user tool.",
        lifespan=lifespan,
        **auth,
    )

    @server.tool(
        description="Store facts about a user. Each is reconciled with what is stored: "
        "added, merged into a similar fact (UPDATE), replacing a contradicted one "
        "(CONTRADICT) or dropped as a duplicate. Returns the operation counts."
    )
    async def remember(
        user_id: UserId,
        namespace: Namespace,
        facts: Annotated[list[FactIn], Field(max_length=MAX_BATCH)],
    ) -> dict[str, Any]:
        async def run(who: Identity) -> dict[str, Any]:
            owner = who.tenant.owner(user_id)
            require_scope(namespace, "namespace")
            if not facts:
                raise InvalidInput("facts", "at least one fact is required")
            candidates = [
                FactCandidate(content=f.content, category=f.category, confidence=f.confidence)
                for f in facts
            ]
            report = await holder.get().users.reconcile(
                user_id=owner, namespace=namespace, candidates=candidates
            )
            return {
                "operations": report.details.get("operations", {}),
                "failures": _failures(report.failures),
            }

        return await _guard(local, run, writes=True, deadline=deadline)

    @server.tool(
        description="Recall a user's facts relevant to a request: identity facts always, "
        "recent session summaries, then the most relevant preferences and constraints."
    )
    async def recall(
        user_id: UserId,
        namespace: Namespace,
        request: Annotated[Text, Field(description="The user's current request.")] = "",
    ) -> dict[str, Any]:
        async def run(who: Identity) -> dict[str, Any]:
            facts, report = await holder.get().users.recall(
                user_id=who.tenant.owner(user_id), namespace=namespace, request=request
            )
            return {
                "facts": [
                    {
                        "id": f.id,
                        "category": str(f.category),
                        "content": f.content,
                        "confidence": f.confidence,
                    }
                    for f in facts
                ],
                "failures": _failures(report.failures),
            }

        return await _guard(local, run, deadline=deadline)

    @server.tool(
        description="Forget a user: everything (no namespace, no fact_id), one namespace, "
        "or one fact. Returns the receipt: what was removed from each store (a fact_id "
        "the user does not have is a NotFound error)."
    )
    async def forget(
        user_id: UserId,
        namespace: Annotated[Id | None, Field(description="Only this namespace.")] = None,
        fact_id: Annotated[Id | None, Field(description="Only this fact (its id).")] = None,
    ) -> dict[str, Any]:
        async def run(who: Identity) -> dict[str, Any]:
            users, scope = holder.get().users, who.tenant
            owner = scope.owner(user_id)
            if fact_id is not None and namespace is not None:
                raise InvalidInput("fact_id", "give namespace or fact_id, not both")
            if fact_id is not None:
                receipt = await users.forget_fact(owner, fact_id)
                if receipt.complete and receipt.facts == 0:  # as HTTP's 404
                    raise NotFound(user_id, fact_id, "fact_id")
            else:
                receipt = await users.forget(owner, namespace)
            return {
                "user_id": user_id,
                "namespace": receipt.namespace,
                "facts": receipt.facts,
                "events": receipt.events,
                "cache_entries": receipt.cache_entries,
                "derived": [
                    {
                        "kind": d.kind,
                        "scope": scope.domain_of(d.scope) or scope.user_of(d.scope) or "",
                        "key": d.key,
                        "count": d.count,
                    }
                    for d in receipt.derived
                ],
                # what failed and its error type; the message may quote stored scopes
                "failures": [":".join(f.split(":")[:2]) for f in receipt.failures],
                "complete": receipt.complete,
            }

        return await _guard(local, run, writes=True, deadline=deadline)

    @server.tool(
        description="Search a user's stored facts by meaning (cosine similarity), best first."
    )
    async def search_memories(
        user_id: UserId,
        query: Annotated[Query, Field(description="What to look for.")],
        namespace: Annotated[Id | None, Field(description="Only this namespace.")] = None,
        limit: Annotated[Limit, Field(description="At most this many facts.")] = 10,
    ) -> dict[str, Any]:
        async def run(who: Identity) -> dict[str, Any]:
            owner = who.tenant.owner(user_id)
            require_limit(limit)
            memory = holder.get()
            (vector,) = await memory.embedder.embed([query])
            hits = await memory.store.search(owner, vector, limit=limit, namespace=namespace)
            return {
                "results": [
                    {
                        "id": h.record.id,
                        "namespace": h.record.namespace,
                        "category": h.record.kind,
                        "content": h.record.content,
                        "score": round(float(h.score), 6),
                    }
                    for h in hits
                ]
            }

        return await _guard(local, run, deadline=deadline)

    @server.tool(
        description="Record the steps an agent executed for a request, as episodic events "
        "other agents of the domain will see in their planning context."
    )
    async def record_steps(
        agent: Annotated[Id, Field(description="The agent's name.")],
        domain: Annotated[Id, Field(description="The shared domain, e.g. 'k8s'.")],
        request_id: Annotated[Id, Field(description="The request's id.")],
        steps: Annotated[list[StepIn], Field(min_length=1, max_length=MAX_BATCH)],
        user_id: Annotated[Id | None, Field(description="The user the request served.")] = None,
    ) -> dict[str, Any]:
        async def run(who: Identity) -> dict[str, Any]:
            scope = who.tenant
            owner = None if user_id is None else scope.owner(user_id)
            parsed = [
                Step(
                    action=s.action,
                    outcome=s.outcome,
                    response=s.response,
                    failure_cause=s.failure_cause,
                    id=step_id,
                )
                for s, step_id in zip(steps, _step_ids(request_id, len(steps)), strict=True)
            ]
            async with holder.get().agents.request(
                agent=agent, domain=scope.domain(domain), request_id=request_id, user_id=owner
            ) as req:
                report = await req.record(parsed)
            return {
                "recorded": int(report.details.get("events_written", 0)),
                "steps": int(report.details.get("steps", len(parsed))),
                "failures": _failures(report.failures),
            }

        return await _guard(local, run, writes=True, deadline=deadline)

    @server.tool(
        description="The planning context for an agent about to act in a domain: the "
        "<agent_memory> view (recent events, digest, knowledge, an entity's history) and the "
        "<agent_coordination> view (who else is working on what). Announces the agent's "
        "activity and claims the entity while it is built."
    )
    async def planning_context(
        agent: Annotated[Id, Field(description="The agent's name.")],
        domain: Annotated[Id, Field(description="The shared domain.")],
        request_id: Annotated[Id, Field(description="The request's id.")],
        entity_type: Annotated[Id | None, Field(description="e.g. 'pod'")] = None,
        entity_id: Annotated[Id | None, Field(description="e.g. 'web-1'")] = None,
        doing: Annotated[Doing, Field(description="What the agent is about to do.")] = "",
    ) -> dict[str, Any]:
        async def run(who: Identity) -> dict[str, Any]:
            if (entity_type is None) != (entity_id is None):
                missing = "entity_id" if entity_id is None else "entity_type"
                raise InvalidInput(missing, "give both entity_type and entity_id, or neither")
            entities = [Entity(entity_type, entity_id)] if entity_type and entity_id else []
            stored = who.tenant.domain(domain)
            async with holder.get().agents.request(
                agent=agent, domain=stored, request_id=request_id, entities=entities, doing=doing
            ) as req:
                context = await req.planning_context()
            views = _unscoped(
                {"agent_memory": context.agent_memory, "coordination": context.coordination},
                {encode_text(stored): encode_text(domain)},
            )
            return {
                "agent_memory": views["agent_memory"],
                "agent_coordination": views["coordination"],
                "failures": _failures(context.report.failures),
            }

        return await _guard(local, run, writes=True, deadline=deadline)

    @server.resource(
        "user-profile://{user_id}/{namespace}",
        name="user_profile",
        description="The <user_profile> view of a user for an agent type (budgeted text).",
        mime_type="text/plain",
        # ids are opaque strings, never file paths: "u:42", ".." or "/x" are
        # ids like any other (the SDK's path checks answered "Unknown
        # resource"); NUL and blank ids are refused below, naming the argument
        security=ResourceSecurity(exempt_params={"user_id", "namespace"}),
    )
    async def user_profile(user_id: str, namespace: str) -> str:
        async def run(who: Identity) -> str:
            owner = who.tenant.owner(user_id)
            require_id(namespace, "namespace")
            view = await holder.get().users.profile(user_id=owner, namespace=namespace, request="")
            return view.text

        return await _guard(local, run, resource=True, deadline=deadline)

    return server


def _step_ids(request_id: str, count: int) -> list[str]:
    """The event ids of one `record_steps` call: `<request>#<call>-<n>`, where
    `<call>` is drawn at random for the call. Each call opens its own library
    request, whose numbering (`<request>#<n>`) starts at 0 again, so the
    idempotent event log dropped every later call's steps of the same request.
    Random rather than a digest of the steps: an agent that does the same
    thing twice (polls a status) made two steps, and both are kept; a client
    that re-sends a call it saw no answer to records it twice."""
    call = secrets.token_hex(8)
    head = request_id
    if len(request_id.encode("utf-8", "surrogatepass")) + 24 > MAX_ID_BYTES:  # an id's bound
        head = hashlib.sha256(request_id.encode("utf-8", "surrogatepass")).hexdigest()
    return [f"{head}#{call}-{i}" for i in range(count)]


def _unscoped(texts: Mapping[str, str], stored_to_plain: Mapping[str, str]) -> dict[str, str]:
    """Views as the caller sees them: the stored (tenant-prefixed) domain
    replaced by the caller's own, as the HTTP service does."""
    out = {}
    for name, text in texts.items():
        for stored, plain in stored_to_plain.items():
            if stored != plain:
                text = text.replace(stored, plain)
        out[name] = text
    return out

"""The MCP server (`agent-memory mcp`, extra `mcp`), on the official SDK's `MCPServer`.

One server serves one store URL. Tools are thin calls into the services:

| tool | service call |
| --- | --- |
| `remember` | `memory.users.reconcile` (ADD / UPDATE / CONTRADICT / DUPLICATE) |
| `recall` | `memory.users.recall` |
| `forget` | `memory.users.forget` / `forget_fact` (returns the receipt) |
| `search_memories` | `memory.store.search` on the user's facts |
| `record_steps` | `memory.agents.request(...).record(steps)` |
| `planning_context` | `memory.agents.request(...).planning_context()` |

Resource `user-profile://{user_id}/{namespace}`: the `<user_profile>` view.

Scoping: every user tool requires `user_id`, the owner of the facts; the server
trusts it. A host serving several users maps each of its authenticated users
to one stable id and passes it on every call (never the model's choice), or
starts one server per user. Errors come back as a tool result with
`is_error` and a JSON body `{"error": {"type", "message", "field"}}`; arguments
outside the HTTP schema's bounds (ids <= 1,024 characters, a fact <= 100,000,
a request text <= 1,000,000, <= 100 facts or steps) or of the wrong type are
an `InvalidInput` body naming the field, like the service's own checks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field, ValidationError

from agent_memory.bootstrap import Memory, connect
from agent_memory.domain.errors import AgentMemoryError, InvalidInput
from agent_memory.domain.records import Entity
from agent_memory.domain.steps import Step
from agent_memory.domain.user_facts import FactCandidate
from agent_memory.domain.validation import require_id, require_limit, require_scope
from agent_memory.entrypoints.bounds import (
    MAX_BATCH,
    Action,
    Doing,
    FactContent,
    Id,
    Outcome,
    Query,
    Text,
)

__all__ = ["build_server"]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

UserId = Annotated[
    Id,
    Field(
        description="The user the facts belong to: the host's stable id for its "
        "authenticated user (never chosen by the model).",
    ),
]
Namespace = Annotated[
    Id,
    Field(
        description="The agent type whose memory this is (e.g. 'support-bot'); cross-agent "
        "facts (name, language, time zone) go to 'universal' automatically.",
    ),
]
Category = Literal["identity", "preference", "constraint", "relationship", "context"]


class FactIn(BaseModel):
    content: FactContent = Field(description="The fact, e.g. 'User prefers dark roast'.")
    category: Category = Field(default="preference", description="What kind of fact it is.")
    confidence: float = Field(default=0.9, ge=0.0, le=1.0)


class StepIn(BaseModel):
    action: Action = Field(min_length=1, description="What the agent did, e.g. 'kubectl get pods'.")
    outcome: Outcome = Field(default="success", description="success, failure, ...")
    response: Text = Field(default="", description="What the action returned (shortened).")
    failure_cause: Text | None = Field(default=None, description="Why it failed, if it did.")


def _error(exc: BaseException) -> ToolError:
    body: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    field = getattr(exc, "field", None)
    if isinstance(field, str):
        body["field"] = field
    return ToolError(json.dumps({"error": body}, ensure_ascii=False))


def _invalid(tool: str, exc: ValidationError) -> ToolError:
    """Arguments that fail the input schema: the `InvalidInput` body, naming the
    first bad field (`facts.0.content`), without the value (it may be megabytes)."""
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0] if errors else {"loc": (), "msg": "invalid arguments"}
    field = ".".join(str(part) for part in first["loc"]) or "arguments"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    body = {"type": "InvalidInput", "field": field, "message": f"{field}: {first['msg']}{more}"}
    return ToolError(
        f"Error executing tool {tool}: " + json.dumps({"error": body}, ensure_ascii=False)
    )


class _Server(MCPServer[Any]):
    """`MCPServer` whose argument validation errors are typed `InvalidInput` bodies."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise _invalid(name, exc.__cause__) from None
            raise


class _Holder:
    memory: Memory | None = None

    def get(self) -> Memory:
        if self.memory is None:  # pragma: no cover - the lifespan opens it first
            raise ToolError(json.dumps({"error": {"type": "NotReady", "message": "starting"}}))
        return self.memory


async def _guard(call: Callable[[], Awaitable[_T]]) -> _T:
    """Typed errors become structured tool errors; anything else too, without a traceback."""
    try:
        return await call()
    except ToolError:
        raise
    except AgentMemoryError as exc:
        raise _error(exc) from None
    except Exception as exc:
        _log.exception("tool failed")
        raise _error(exc) from None


def build_server(url: str | None = None, *, memory: Memory | None = None) -> MCPServer[Any]:
    """The MCP server for one store URL (opened on start, closed on stop), or
    for an already connected `memory` (left open)."""
    holder = _Holder()

    @asynccontextmanager
    async def lifespan(_server: MCPServer[Any]) -> AsyncIterator[None]:
        if memory is not None:
            holder.memory = memory
            yield
            return
        async with connect(url) as opened:
            holder.memory = opened
            try:
                yield
            finally:
                holder.memory = None

    server: MCPServer[Any] = _Server(
        "agent-memory",
        instructions="Shared memory for agents: private user facts (remember, recall, "
        "forget, search_memories) and episodic agent memory (record_steps, planning_context). "
        "Pass the host's user id on every user tool.",
        lifespan=lifespan,
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
        async def run() -> dict[str, Any]:
            require_id(user_id, "user_id")
            require_scope(namespace, "namespace")
            if not facts:
                raise InvalidInput("facts", "at least one fact is required")
            candidates = [
                FactCandidate(content=f.content, category=f.category, confidence=f.confidence)
                for f in facts
            ]
            report = await holder.get().users.reconcile(
                user_id=user_id, namespace=namespace, candidates=candidates
            )
            return {
                "operations": report.details.get("operations", {}),
                "failures": list(report.failures),
            }

        return await _guard(run)

    @server.tool(
        description="Recall a user's facts relevant to a request: identity facts always, "
        "recent session summaries, then the most relevant preferences and constraints."
    )
    async def recall(
        user_id: UserId,
        namespace: Namespace,
        request: Annotated[Text, Field(description="The user's current request.")] = "",
    ) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            facts, report = await holder.get().users.recall(
                user_id=user_id, namespace=namespace, request=request
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
                "failures": list(report.failures),
            }

        return await _guard(run)

    @server.tool(
        description="Forget a user: everything (no namespace, no fact_id), one namespace, "
        "or one fact. Returns the receipt: what was removed from each store."
    )
    async def forget(
        user_id: UserId,
        namespace: Annotated[Id | None, Field(description="Only this namespace.")] = None,
        fact_id: Annotated[Id | None, Field(description="Only this fact (its id).")] = None,
    ) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            users = holder.get().users
            if fact_id is not None and namespace is not None:
                raise InvalidInput("fact_id", "give namespace or fact_id, not both")
            if fact_id is not None:
                receipt = await users.forget_fact(user_id, fact_id)
            else:
                receipt = await users.forget(user_id, namespace)
            return {
                "user_id": receipt.user_id,
                "namespace": receipt.namespace,
                "facts": receipt.facts,
                "events": receipt.events,
                "cache_entries": receipt.cache_entries,
                "derived": [
                    {"kind": d.kind, "scope": d.scope, "key": d.key, "count": d.count}
                    for d in receipt.derived
                ],
                "failures": list(receipt.failures),
                "complete": receipt.complete,
            }

        return await _guard(run)

    @server.tool(
        description="Search a user's stored facts by meaning (cosine similarity), best first."
    )
    async def search_memories(
        user_id: UserId,
        query: Annotated[Query, Field(min_length=1, description="What to look for.")],
        namespace: Annotated[Id | None, Field(description="Only this namespace.")] = None,
        limit: Annotated[int, Field(strict=True, ge=1, le=100)] = 10,
    ) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            require_id(user_id, "user_id")
            require_limit(limit)
            memory = holder.get()
            (vector,) = await memory.embedder.embed([query])
            hits = await memory.store.search(user_id, vector, limit=limit, namespace=namespace)
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

        return await _guard(run)

    @server.tool(
        description="Record the steps an agent executed for a request, as episodic events "
        "other agents of the domain will see in their planning context."
    )
    async def record_steps(
        agent: Annotated[Id, Field(description="The agent's name.")],
        domain: Annotated[Id, Field(description="The shared domain, e.g. 'k8s'.")],
        request_id: Annotated[Id, Field(description="The request's id.")],
        steps: Annotated[list[StepIn], Field(max_length=MAX_BATCH)],
        user_id: Annotated[Id | None, Field(description="The user the request served.")] = None,
    ) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            parsed = [
                Step(
                    action=s.action,
                    outcome=s.outcome,
                    response=s.response,
                    failure_cause=s.failure_cause,
                )
                for s in steps
            ]
            async with holder.get().agents.request(
                agent=agent, domain=domain, request_id=request_id, user_id=user_id
            ) as req:
                report = await req.record(parsed)
            return {
                "recorded": int(report.details.get("events_written", 0)),
                "steps": int(report.details.get("steps", len(parsed))),
                "failures": list(report.failures),
            }

        return await _guard(run)

    @server.tool(
        description="The planning context for an agent about to act in a domain: the "
        "<agent_memory> view (recent events, digest, knowledge, an entity's history) and the "
        "<agent_coordination> view (who else is working on what)."
    )
    async def planning_context(
        agent: Annotated[Id, Field(description="The agent's name.")],
        domain: Annotated[Id, Field(description="The shared domain.")],
        request_id: Annotated[Id, Field(description="The request's id.")],
        entity_type: Annotated[Id | None, Field(description="e.g. 'pod'")] = None,
        entity_id: Annotated[Id | None, Field(description="e.g. 'web-1'")] = None,
        doing: Annotated[Doing, Field(description="What the agent is about to do.")] = "",
    ) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            if (entity_type is None) != (entity_id is None):
                raise InvalidInput("entity_id", "give both entity_type and entity_id, or neither")
            entities = [Entity(entity_type, entity_id)] if entity_type and entity_id else []
            async with holder.get().agents.request(
                agent=agent, domain=domain, request_id=request_id, entities=entities, doing=doing
            ) as req:
                context = await req.planning_context()
            return {
                "agent_memory": context.agent_memory,
                "agent_coordination": context.coordination,
                "failures": list(context.report.failures),
            }

        return await _guard(run)

    @server.resource(
        "user-profile://{user_id}/{namespace}",
        name="user_profile",
        description="The <user_profile> view of a user for an agent type (budgeted text).",
        mime_type="text/plain",
    )
    async def user_profile(user_id: str, namespace: str) -> str:
        async def run() -> str:
            view = await holder.get().users.profile(
                user_id=require_id(user_id, "user_id"), namespace=namespace, request=""
            )
            return view.text

        return await _guard(run)

    return server

"""The HTTP service: an ASGI app (FastAPI) over `memory.users` and `memory.agents`.

Each handler maps a body to one service call and the result back to JSON; no
memory rule lives here. What the HTTP layer adds: API keys bound to tenants
(every owner and domain is rewritten under the tenant's prefix, see
`tenancy`), read-only keys, per-key rate limits, body size limits, problem
documents for every error, structured access logs and agent requests that span
calls (`sessions`).
"""

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Annotated, Any

import attrs
from attrs import frozen
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from agent_memory.bootstrap import Memory, connect
from agent_memory.domain.audit import AuditEntry, AuditPage, encode_audit_cursor
from agent_memory.domain.errors import AgentMemoryError, InvalidInput
from agent_memory.domain.records import Entity, MemoryRecord
from agent_memory.domain.steps import Step
from agent_memory.domain.user_facts import FactCandidate
from agent_memory.domain.views import FactSource, KnowledgeItem
from agent_memory.domain.views.encoding import encode_text
from agent_memory.entrypoints.bounds import IdChecks, Instant, describe
from agent_memory.entrypoints.server import schemas as s
from agent_memory.entrypoints.server.cursors import bind, unbind
from agent_memory.entrypoints.server.keys import ApiKey, KeyRing
from agent_memory.entrypoints.server.middleware import Guard
from agent_memory.entrypoints.server.problems import Problem, from_library_error
from agent_memory.entrypoints.server.ratelimit import RateLimiter
from agent_memory.entrypoints.server.sessions import Sessions, finish
from agent_memory.entrypoints.server.tenancy import Tenant
from agent_memory.services.audit import AuditTrail, acting_as
from agent_memory.services.coordination import Coordinator
from agent_memory.services.reports import StageReport
from agent_memory.services.retrieval import HybridRetriever
from agent_memory.services.user_memory import ForgetReceipt

__all__ = ["ServerConfig", "create_app"]

_log = logging.getLogger("agent_memory.server")


@frozen
class ServerConfig:
    """Limits of the HTTP service (the CLI flags)."""

    url: str | None = None
    max_body_bytes: int = 1024 * 1024
    rate: float = 50.0
    """Requests per second per API key, on average."""
    burst: int = 100
    idle_timeout: float = 600.0
    """An agent request untouched this long is finished (claims released)."""
    max_open_requests: int = 1000
    """Open agent requests per tenant."""
    ui: bool = False
    """Serve the inspector page at /ui (`serve --ui`)."""
    request_timeout: float = 30.0
    """Seconds a request may take until its response starts (`serve --request-timeout`);
    past it the answer is `503 deadline-exceeded`."""


_PROBLEM = {"model": s.ProblemOut, "content": {"application/problem+json": {}}}
_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {**_PROBLEM, "description": desc}
    for code, desc in (
        (400, "Malformed body (not JSON, not UTF-8)"),
        (401, "Missing, unknown or revoked API key"),
        (403, "A read-only key tried to write, or a user-bound key named another user"),
        (413, "Body over the size limit"),
        (415, "Body not application/json"),
        (422, "Body or query does not match the schema, or a value the library refuses"),
        (429, "Rate limit (see Retry-After)"),
        (503, "Backend unavailable or shutting down"),
    )
}

_bearer = HTTPBearer(auto_error=False, description="An API key bound to one tenant")


@frozen
class Caller:
    key: ApiKey

    @property
    def tenant(self) -> Tenant:
        return self.key.tenant


def create_app(
    config: ServerConfig,
    keys: KeyRing,
    *,
    open_memory: Callable[[], Awaitable[Memory]] | None = None,
) -> Guard:
    """The ASGI application. `open_memory` (default: `connect(config.url)`) runs
    at startup; the memory is closed at shutdown, after every open agent
    request is finished."""
    limiter = RateLimiter(config.rate, config.burst)
    sessions = Sessions(idle_timeout=config.idle_timeout, max_per_tenant=config.max_open_requests)
    state: dict[str, Any] = {"draining": False}

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        opener = open_memory or (lambda: connect(config.url).__aenter__())
        state["memory"] = await opener()
        sessions.start_reaper()
        _log.info("agent-memory server ready (backend %s)", state["memory"].stores.backend)
        try:
            yield
        finally:
            state["draining"] = True
            finished = await sessions.close()
            # closing drains: forgets whose handler the deadline or the drain
            # timeout cancelled run to their end and audit entry first
            await state["memory"].close()
            _log.info("agent-memory server stopped (%d open agent requests finished)", finished)

    app = FastAPI(
        title="agent-memory",
        summary="Shared memory for LLM agents over HTTP",
        version="1",
        lifespan=lifespan,
        responses=_RESPONSES,
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
    )

    def memory() -> Memory:
        mem: Memory | None = state.get("memory")
        if mem is None or state["draining"]:
            raise Problem("shutting-down", headers={"Retry-After": "1"})
        return mem

    async def caller(
        request: Request,
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> AsyncIterator[Caller]:
        key = keys.authenticate(creds.credentials) if creds is not None else None
        if key is None:
            raise Problem("unauthenticated", headers={"WWW-Authenticate": "Bearer"})
        request.state.key_id = key.id
        request.state.tenant = key.tenant.name
        wait = limiter.take(key.id, key.rate, key.burst)
        if wait is not None:
            raise Problem("rate-limited", headers={"Retry-After": limiter.retry_after(wait)})
        # Audit entries written while this request runs name its key and tenant.
        with acting_as(key.id, key.tenant.name):
            yield Caller(key)

    async def writer(who: Annotated[Caller, Depends(caller)]) -> Caller:
        if who.key.read_only:
            raise Problem("read-only-key")
        return who

    async def admin(who: Annotated[Caller, Depends(caller)]) -> Caller:
        if not who.key.admin:
            raise Problem("admin-required")
        return who

    Reader = Annotated[Caller, Depends(caller)]
    Writer = Annotated[Caller, Depends(writer)]
    Admin = Annotated[Caller, Depends(admin)]

    # -- errors -----------------------------------------------------------------
    def problem_response(request: Request, problem: Problem) -> JSONResponse:
        return JSONResponse(
            problem.body(getattr(request.state, "request_id", None)),
            status_code=problem.status,
            headers=problem.headers,
            media_type="application/problem+json",
        )

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(request, exc)

    @app.exception_handler(AgentMemoryError)
    async def _library(request: Request, exc: AgentMemoryError) -> JSONResponse:
        return problem_response(request, from_library_error(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        found = exc.errors()
        if any(e.get("type") == "json_invalid" for e in found):
            return problem_response(request, Problem("malformed-body"))
        return problem_response(request, _validation_problem(found))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        slug = {400: "malformed-body", 404: "not-found", 405: "method-not-allowed"}.get(
            exc.status_code, "internal-error" if exc.status_code >= 500 else "malformed-body"
        )
        return problem_response(request, Problem(slug))

    # -- health ---------------------------------------------------------------------
    @app.get("/v1/health", tags=["health"], summary="Liveness: the process answers")
    async def health() -> s.Health:
        return s.Health(status="ok")

    @app.get("/v1/ready", tags=["health"], summary="Readiness: the backend answers a ping")
    async def ready() -> s.Health:
        mem = memory()
        try:
            await mem.store.ping()
        except Exception as exc:
            _log.warning("readiness ping failed: %s", type(exc).__name__)
            raise Problem("backend-unavailable", headers={"Retry-After": "1"}) from None
        return s.Health(status="ready", backend=mem.stores.backend)

    # -- users ------------------------------------------------------------------------
    @app.post("/v1/users/extract", tags=["users"], summary="Extract and reconcile facts")
    async def extract(body: s.ExtractBody, who: Writer) -> s.ReportOut:
        """Facts (and a session summary, with a model) from a conversation,
        reconciled with the stored ones (ADD / UPDATE / CONTRADICT / DUPLICATE)."""
        report = await memory().users.extract(
            user_id=who.tenant.owner(body.user_id),
            namespace=body.namespace,
            conversation=body.conversation,
            wait=True,
        )
        return s.ReportOut(report=_report(_stored(report), who.tenant))

    @app.post("/v1/users/remember", tags=["users"], summary="Remember given facts")
    async def remember(body: s.RememberBody, who: Writer) -> s.ReportOut:
        """Reconcile facts the caller already extracted with the stored ones."""
        candidates = [
            FactCandidate(
                content=f.content,
                category=f.category,
                confidence=f.confidence,
                source=FactSource.EXPLICIT if f.explicit else FactSource.DERIVED,
                universal=f.universal,
            )
            for f in body.facts
        ]
        report = await memory().users.reconcile(
            user_id=who.tenant.owner(body.user_id),
            namespace=body.namespace,
            candidates=candidates,
        )
        return s.ReportOut(report=_report(_stored(report), who.tenant))

    @app.post("/v1/users/profile", tags=["users"], summary="The <user_profile> view")
    async def profile(body: s.ProfileBody, who: Reader) -> s.ProfileOut:
        """Recall for a request, rendered within the view budget."""
        view = await memory().users.profile(
            user_id=who.tenant.owner(body.user_id), namespace=body.namespace, request=body.request
        )
        report = attrs.asdict(view.report, value_serializer=_plain)
        return s.ProfileOut(text=view.text, report=report)

    @app.get("/v1/users/facts", tags=["users"], summary="List a user's facts")
    async def list_facts(
        who: Reader,
        user_id: Annotated[IdChecks, Query(min_length=1, max_length=1024)],
        namespace: Annotated[IdChecks | None, Query(min_length=1, max_length=1024)] = None,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        cursor: Annotated[str | None, Query(max_length=4096)] = None,
    ) -> s.FactPage:
        """Newest first; pass `next_cursor` back as `cursor` for the next page."""
        users = memory().users
        owner = who.tenant.owner(user_id)
        # a cursor of this listing only: the library's is a bare position
        after = unbind(cursor, "cursor", owner, namespace)
        page = await users.store.list(owner, namespace=namespace, limit=limit, cursor=after)
        return s.FactPage(
            facts=[_fact(r) for r in page.records],
            next_cursor=bind(page.next_cursor, owner, namespace),
        )

    @app.post("/v1/users/search", tags=["users"], summary="Search a user's facts")
    async def search(body: s.SearchBody, who: Reader) -> s.SearchOut:
        """Facts best first: by cosine similarity to the query (`mode: vector`),
        or by lexical and vector rankings fused (`hybrid`, see docs/retrieval.md)."""
        users = memory().users
        owner = who.tenant.owner(body.user_id)
        if body.mode != "vector":
            if body.min_score is not None:
                raise _mismatch("min_score", "applies to mode 'vector' only")
            found = await HybridRetriever(users.store, users.embedder).retrieve(
                owner, body.query, limit=body.limit, mode=body.mode, namespace=body.namespace
            )
            return s.SearchOut(
                results=[s.ScoredFact(score=h.score, fact=_fact(h.record)) for h in found.hits],
                mode=found.mode.value,
                fallback=found.fallback,
            )
        (vector,) = await users.embedder.embed([body.query])
        hits = await users.store.search(
            owner, vector, limit=body.limit, namespace=body.namespace, min_score=body.min_score
        )
        return s.SearchOut(
            results=[s.ScoredFact(score=h.score, fact=_fact(h.record)) for h in hits],
            mode="vector",
        )

    @app.post("/v1/users/forget", tags=["users"], summary="Forget a user, with a receipt")
    async def forget(body: s.ForgetBody, who: Writer) -> s.Receipt:
        """Everything about the user (or one namespace's facts): facts, events,
        caches and what was derived from them. The receipt lists what was
        removed and what failed (fail-open: the rest is still removed)."""
        receipt = await memory().users.forget(who.tenant.owner(body.user_id), body.namespace)
        return _receipt(receipt, body.user_id)

    @app.post("/v1/users/facts/forget", tags=["users"], summary="Forget one fact")
    async def forget_fact(body: s.ForgetFactBody, who: Writer) -> s.Receipt:
        receipt = await memory().users.forget_fact(who.tenant.owner(body.user_id), body.fact_id)
        if receipt.complete and receipt.facts == 0:
            raise Problem("not-found", "fact_id: the user has no such fact", field="fact_id")
        return _receipt(receipt, body.user_id)

    # -- audit trail ------------------------------------------------------------------------
    @app.get(
        "/v1/audit",
        tags=["audit"],
        summary="The tenant's audit trail (admin keys only)",
        responses={403: {**_PROBLEM, "description": "The key is not an admin key"}},
    )
    async def audit(
        who: Admin,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        before: Annotated[str | None, Query(min_length=1, max_length=4096)] = None,
    ) -> s.AuditOut:
        """Entries of the key's own tenant, newest first: every forget,
        delete_scope, import with replace, re-embed switch and migration, with
        counts and the caller's key id; never user content. `before` is the
        `next` of the previous page."""
        tenant, user = who.tenant.name, who.key.user
        # a cursor of this trail only (the tenant's, or its user's for a bound key)
        after = unbind(before, "before", tenant, user)
        try:
            if user is None:
                page = await memory().audit.page(tenant=tenant, limit=limit, cursor=after)
            else:  # a key bound to one user sees the entries about that user only
                page = await _entries_about(memory().audit, tenant, user, limit, after)
        except InvalidInput as exc:  # the library calls it `cursor`; here it is `before`
            if exc.field != "cursor":
                raise
            raise InvalidInput("before", exc.problem) from None
        return s.AuditOut(
            entries=[s.AuditEntryOut(**e.as_json()) for e in page.entries],
            next=bind(page.next_cursor, tenant, user),
        )

    # -- agent requests -------------------------------------------------------------------
    @app.post("/v1/requests", tags=["agents"], status_code=201, summary="Start an agent request")
    async def start(body: s.StartBody, who: Writer) -> s.StartOut:
        """Announce an activity signal and claim the entities; the request
        stays open (renewed) until `finish`, or until idle too long."""
        mem, tenant = memory(), who.tenant
        if sessions.has(tenant.name, body.request_id):
            raise Problem("conflict", "an agent request with this id is open")
        if sessions.count(tenant.name) >= sessions.max_per_tenant:
            raise Problem("too-many-open-requests", headers={"Retry-After": "1"})
        request = mem.agents.request(
            agent=body.agent,
            domain=tenant.domain(body.domain),
            request_id=body.request_id,
            user_id=None if body.user_id is None else tenant.owner(body.user_id),
            entities=[Entity(e.type, e.id) for e in body.entities],
            doing=body.doing,
        )
        entry = sessions.add(tenant.name, body.request_id, request)
        async with entry.lock:
            try:
                await request.__aenter__()
            except BaseException:
                sessions.discard(entry, body.request_id)
                raise
        claims = [
            s.ClaimOut(
                entity=s.EntityBody(type=c.entity.type, id=c.entity.id),
                acquired=c.acquired,
                holder_agent=c.holder_agent,
                holder_request_id=c.holder_request_id,
            )
            for c in request.claims
        ]
        report = request.reports["activity-announcement"]
        return s.StartOut(request_id=body.request_id, claims=claims, report=_report(report, tenant))

    def open_request(tenant: Tenant, request_id: str) -> Any:
        entry = sessions.get(tenant.name, request_id)
        if entry is None:
            raise Problem("not-found", "no open agent request with this id")
        return entry

    @app.post("/v1/requests/context", tags=["agents"], summary="The planning context views")
    async def context(body: s.ContextBody, who: Writer) -> s.ContextOut:
        """`<agent_memory>` (events, entity history, digest, knowledge) and
        `<agent_coordination>` (who else is active), each within its budget."""
        entry = open_request(who.tenant, body.request_id)
        knowledge = [
            KnowledgeItem(id=k.id, content=k.content, score=k.score) for k in body.knowledge
        ]
        async with entry.lock:
            ctx = await entry.request.planning_context(knowledge=knowledge, digest=body.digest)
        stored, plain = encode_text(entry.request.domain), encode_text(_domain(who, entry))
        agent_memory = ctx.agent_memory.replace(stored, plain)
        coordination = ctx.coordination.replace(stored, plain)
        return s.ContextOut(
            agent_memory=agent_memory,
            coordination=coordination,
            text="\n".join(p for p in (agent_memory, coordination) if p),
            report=_report(ctx.report, who.tenant),
        )

    @app.post("/v1/requests/steps", tags=["agents"], summary="Record executed steps")
    async def steps(body: s.StepsBody, who: Writer) -> s.ReportOut:
        """Each eligible step becomes an episodic event of the request's domain."""
        entry = open_request(who.tenant, body.request_id)
        parsed = [
            Step(
                action=x.action,
                outcome=x.outcome,
                response=x.response,
                failure_cause=x.failure_cause,
                started_at=x.started_at,
                ended_at=x.ended_at,
                metadata=x.metadata,
                importance=x.importance,
                eligible=x.eligible,
                id=x.id,
            )
            for x in body.steps
        ]
        async with entry.lock:
            report = await entry.request.record(parsed)
        return s.ReportOut(report=_report(_stored(report), who.tenant))

    @app.post("/v1/requests/finish", tags=["agents"], summary="Finish an agent request")
    async def finish_request(body: s.FinishBody, who: Writer) -> s.ReportOut:
        """Stop renewing and release the signal and the claims."""
        entry = sessions.pop(who.tenant.name, body.request_id)
        if entry is None:
            raise Problem("not-found", "no open agent request with this id")
        await finish(entry, failed=body.failed)
        report = entry.request.reports.get("cleanup", StageReport("cleanup"))
        return s.ReportOut(report=_report(report, who.tenant))

    # -- events and knowledge ------------------------------------------------------------
    @app.get("/v1/events", tags=["events"], summary="A domain's event window")
    async def events(
        who: Reader,
        domain: Annotated[IdChecks, Query(min_length=1, max_length=1024)],
        since: Instant | None = None,
        until: Instant | None = None,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        entity_type: Annotated[IdChecks | None, Query(min_length=1, max_length=1024)] = None,
        entity_id: Annotated[IdChecks | None, Query(min_length=1, max_length=1024)] = None,
    ) -> s.EventsOut:
        """Newest first by the event's own time; `since` defaults to the lookback
        (AGENT_MEMORY_LOOKBACK_HOURS); `entity_type` + `entity_id` narrow it."""
        mem, tenant = memory(), who.tenant
        if (entity_type is None) != (entity_id is None):
            missing = "entity_id" if entity_id is None else "entity_type"
            raise _mismatch(missing, "give both entity_type and entity_id, or neither", "query")
        entity = None if entity_type is None else Entity(entity_type, entity_id or "")
        start_at = since or (datetime.now().astimezone() - _lookback(mem))
        # the agents' log: its windows hold no other tenant's global events
        window = await mem.agents.events.window(
            tenant.domain(domain), since=start_at, limit=limit, entity=entity, until=until
        )
        out = []
        for e in window.events:
            own = tenant.domain_of(e.domain)
            if own is None:  # another tenant's global event: never shown
                continue
            out.append(
                s.EventOut(
                    id=e.id,
                    domain=own,
                    agent=e.agent,
                    action=e.action,
                    outcome=e.outcome,
                    summary=e.summary,
                    occurred_at=e.occurred_at,
                    recorded_at=e.recorded_at,
                    request_id=e.origin_request_id,
                    user_id=tenant.user_of(e.user_id),
                    entities=[s.EntityBody(type=x.type, id=x.id) for x in e.entities],
                    importance=e.importance,
                    metadata=e.metadata,
                )
            )
        return s.EventsOut(events=out, limited=window.limited)

    @app.post("/v1/knowledge/search", tags=["events"], summary="Search a domain's knowledge")
    async def knowledge(body: s.KnowledgeSearchBody, who: Reader) -> s.KnowledgeSearchOut:
        """Knowledge fragments distilled from the domain's requests and events."""
        service = memory().agents.knowledge
        if service is None:
            raise Problem("not-supported", "no knowledge service is configured")
        items = await service.recall(who.tenant.domain(body.domain), body.query, limit=body.limit)
        return s.KnowledgeSearchOut(
            results=[s.KnowledgeOut(id=k.id, content=k.content, score=k.score) for k in items]
        )

    # -- inspection (read-only; what the inspector page shows) ---------------------------
    @app.get("/v1/domains", tags=["inspect"], summary="Domains with open agent requests")
    async def domains(who: Reader) -> s.DomainsOut:
        """The caller's domains that have agent requests open on this server
        (the `/v1/requests` of this process), with how many; sorted by name."""
        counts: dict[str, int] = {}
        for entry in sessions.open_of(who.tenant.name):
            own = who.tenant.domain_of(entry.request.domain)
            if own is not None:
                counts[own] = counts.get(own, 0) + 1
        return s.DomainsOut(
            domains=[s.DomainOut(domain=d, open_requests=n) for d, n in sorted(counts.items())]
        )

    @app.get("/v1/activity", tags=["inspect"], summary="A domain's active agents and claims")
    async def activity(
        who: Reader, domain: Annotated[IdChecks, Query(min_length=1, max_length=1024)]
    ) -> s.ActivityOut:
        """Live activity signals and investigation claims of every agent in the
        domain (from the lease store: other servers' and library callers' too)."""
        mem = memory()
        ttl = mem.agents.options.signal_ttl
        coordinator = Coordinator(mem.leases, who.tenant.domain(domain), ttl)
        signals, claims = await coordinator.active_signals(), await coordinator.active_claims()
        return s.ActivityOut(
            signals=[
                s.SignalOut(
                    agent=x.agent,
                    request_id=x.request_id,
                    doing=x.doing,
                    status=x.status,
                    started_at=x.started_at,
                    entities=[s.EntityBody(type=e.type, id=e.id) for e in x.entities],
                )
                for x in signals
            ],
            claims=[
                s.HeldClaimOut(
                    entity=s.EntityBody(type=e.type, id=e.id),
                    holder_agent=agent,
                    holder_request_id=request_id,
                    since=since,
                )
                for e, agent, request_id, since in claims
            ],
        )

    @app.get("/v1/digest", tags=["inspect"], summary="A domain's digest")
    async def digest(
        who: Reader, domain: Annotated[IdChecks, Query(min_length=1, max_length=1024)]
    ) -> s.DigestOut:
        """The digest the planning view would show now (cached, or compacted
        from the event window), with its decision path and coverage."""
        compactor = memory().agents.compactor
        if compactor is None:
            raise Problem("not-supported", "digests are off on this server")
        stored = who.tenant.domain(domain)
        result = await compactor.digest(stored)
        text = result.digest
        if text is not None:
            text = text.replace(encode_text(stored), encode_text(domain))
        return s.DigestOut(
            digest=text,
            path=str(result.path.value),
            coverage=str(result.coverage.value),
            raw_events=len(result.raw_events),
        )

    if config.ui:
        from agent_memory.entrypoints.server.ui import mount

        mount(app)

    return Guard(app, max_body_bytes=config.max_body_bytes, request_timeout=config.request_timeout)


async def _entries_about(
    audit: AuditTrail, tenant: str, user: str, limit: int, cursor: str | None
) -> AuditPage:
    """A page of the tenant's trail holding only the entries about `user`
    (newest first; `next_cursor` after the last one when more may follow):
    the trail as a key bound to that user may see it."""
    found: list[AuditEntry] = []
    while len(found) <= limit:
        page = await audit.page(tenant=tenant, limit=200, cursor=cursor)
        found += [e for e in page.entries if e.subject == user]
        cursor = page.next_cursor
        if cursor is None:
            break
    if len(found) > limit:
        return AuditPage(tuple(found[:limit]), encode_audit_cursor(found[limit - 1]))
    return AuditPage(tuple(found), None)


def _validation_problem(errors: Sequence[Any]) -> Problem:
    """The problem for a body or query that fails the schema: `field` names the
    first offending argument (`facts.0.content`; `body` for the body as a
    whole), `errors` lists them all (where, kind, message; never the value). A
    value the library refuses (NUL, a lone surrogate, a blank or over-long id)
    is its `invalid-input`, as when the library itself refuses it."""
    field, message, refused = describe(errors[0], skip=("body", "query"))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if refused:
        return Problem("invalid-input", f"{field}: {message}{more}", field=field)
    listed = [
        {"loc": [str(p) for p in e.get("loc", ())], "type": e.get("type"), "msg": e.get("msg")}
        for e in errors[:20]
    ]
    return Problem("validation-failed", f"{field}: {message}{more}", field=field, errors=listed)


def _mismatch(field: str, message: str, where: str = "body") -> Problem:
    """A schema rule across arguments (one needs another, or excludes it):
    `field` names the argument that is missing or conflicts."""
    return Problem(
        "validation-failed",
        f"{field}: {message}",
        field=field,
        errors=[{"loc": [where, field], "type": "value_error", "msg": message}],
    )


def _domain(who: Caller, entry: Any) -> str:
    return who.tenant.domain_of(entry.request.domain) or ""


def _lookback(mem: Memory) -> timedelta:
    value: timedelta = mem.settings.lookback
    return value


def _plain(_inst: object, _field: object, value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "value") and isinstance(value.value, str):  # enums
        return value.value
    return value


def _stored(report: StageReport) -> StageReport:
    """The report of a write, when the write was stored. The services are
    fail-open: a stage that could not reach the backend reports the failure and
    returns. For a write that is no acknowledgement, so the answer is the
    `503 backend-unavailable` problem (retrying is safe: facts are reconciled
    with what was stored, steps are idempotent by id) and a `200` always means
    stored."""
    if any(f.unavailable for f in report.failures):
        raise Problem(
            "backend-unavailable",
            f"{report.stage}: the backend is unavailable; not stored",
            headers={"Retry-After": "1"},
        )
    return report


def _report(report: StageReport, tenant: Tenant) -> s.Report:
    """A stage report for the caller: no failure messages (they may quote
    backend internals) and no tenant prefixes."""
    text = json.dumps(report.details, default=str, ensure_ascii=False)
    for prefix in (f"t/{tenant.name}/u/", f"t/{tenant.name}/d/"):
        text = text.replace(prefix, "")
    return s.Report(
        stage=report.stage,
        ok=report.ok,
        details=json.loads(text),
        failures=[s.Failure(operation=f.operation, error=f.error_type) for f in report.failures],
    )


def _fact(record: MemoryRecord) -> s.FactOut:
    a = record.attributes
    return s.FactOut(
        id=record.id,
        namespace=record.namespace,
        category=record.kind,
        content=record.content,
        confidence=float(a.get("confidence", 0.8)),
        source=str(a.get("source", "explicit")),
        created_at=record.created_at,
        updated_at=record.updated_at,
    )


def _receipt(receipt: ForgetReceipt, user_id: str) -> s.Receipt:
    return s.Receipt(
        user_id=user_id,
        namespace=receipt.namespace,
        facts=receipt.facts,
        events=receipt.events,
        cache_entries=receipt.cache_entries,
        derived=[s.Derived(kind=d.kind, key=d.key, count=d.count) for d in receipt.derived],
        failures=[":".join(f.split(":")[:2]) for f in receipt.failures],
        complete=receipt.complete,
    )

"""Request and response bodies (pydantic models: validated in, documented in
the OpenAPI schema). Types are strict (a number is not a string, a string is
not a list); unknown fields are refused. Ids travel in bodies and query
strings, never in paths, so any string the library accepts is addressable."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, StrictBool

from agent_memory.entrypoints.bounds import (
    MAX_BATCH,
    Action,
    Doing,
    FactContent,
    Id,
    Instant,
    Limit,
    Outcome,
    Query,
    Text,
    Unit,
    storable_json,
)

Score = Annotated[float, Field(strict=True, ge=-1.0, le=1.0)]
Category = Literal["identity", "constraint", "preference", "relationship", "context", "summary"]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- shared ---------------------------------------------------------------------
class EntityBody(_In):
    type: Id
    id: Id


class Failure(_Out):
    """A stage part that failed (fail-open: the rest went ahead)."""

    operation: str
    error: str


class Report(_Out):
    """What a stage did: `details` (counts, decisions) and what failed."""

    stage: str
    ok: bool
    details: dict[str, Any]
    failures: list[Failure]


class Health(_Out):
    status: Literal["ok", "ready"]
    backend: str | None = None


# -- users ----------------------------------------------------------------------
class ExtractBody(_In):
    user_id: Id
    namespace: Id
    conversation: Text


class FactIn(_In):
    content: FactContent
    category: Category
    confidence: Unit = 0.9
    explicit: StrictBool = True
    universal: StrictBool = False


class RememberBody(_In):
    user_id: Id
    namespace: Id
    facts: Annotated[list[FactIn], Field(min_length=1, max_length=MAX_BATCH)]


class ProfileBody(_In):
    user_id: Id
    namespace: Id
    request: Text = ""


class ProfileOut(_Out):
    text: str
    report: dict[str, Any]
    """The view's budget report: bytes used, outcome, per-section counts."""


class FactOut(_Out):
    id: str
    namespace: str
    category: str
    content: str
    confidence: float
    source: str
    created_at: AwareDatetime
    updated_at: AwareDatetime


class FactPage(_Out):
    facts: list[FactOut]
    next_cursor: str | None


class SearchBody(_In):
    user_id: Id
    query: Query
    namespace: Id | None = None
    limit: Limit = 10
    min_score: Score | None = None
    """Vector mode only: the cosine similarity a fact needs."""
    mode: Literal["vector", "hybrid", "lexical"] = "vector"
    """`vector`: cosine similarity; `hybrid`: lexical (BM25) and vector rankings
    fused; `lexical`: keyword search only (backends with keyword search)."""


class ScoredFact(_Out):
    score: float
    fact: FactOut


class SearchOut(_Out):
    results: list[ScoredFact]
    mode: str
    """The mode used (hybrid falls back to vector without keyword search)."""
    fallback: str | None = None


class ForgetBody(_In):
    user_id: Id
    namespace: Id | None = None
    """Only this namespace's facts; omitted: everything about the user."""


class ForgetFactBody(_In):
    user_id: Id
    fact_id: Id


class Derived(_Out):
    kind: str
    key: str
    count: int


class Receipt(_Out):
    """What forgetting removed, per store, and what it invalidated."""

    user_id: str
    namespace: str | None
    facts: int
    events: int
    cache_entries: int
    derived: list[Derived]
    failures: list[str]
    complete: bool


# -- audit trail -----------------------------------------------------------------
class AuditEntryOut(_Out):
    """One audit entry: ids and counts, never user content."""

    id: str
    at: str
    """When, ISO-8601 in UTC (`...Z`)."""
    operation: str
    """forget_user, forget_namespace, forget_fact, delete_scope, import_replace,
    reembed_switch or migrate."""
    tenant: str
    subject: str | None
    """The data subject's user id as the tenant sends it (None: no single subject)."""
    counts: dict[str, int]
    caller: str
    """The API key id that asked, or "library"."""


class AuditOut(_Out):
    entries: list[AuditEntryOut]
    next: str | None
    """Pass as `before` for the next (older) page; None on the last page."""


# -- agent requests --------------------------------------------------------------
class StartBody(_In):
    agent: Id
    domain: Id
    request_id: Id
    user_id: Id | None = None
    entities: Annotated[list[EntityBody], Field(max_length=50)] = []
    doing: Doing = ""


class ClaimOut(_Out):
    entity: EntityBody
    acquired: bool
    holder_agent: str | None
    holder_request_id: str | None


class StartOut(_Out):
    request_id: str
    claims: list[ClaimOut]
    report: Report


class RequestRef(_In):
    request_id: Id


class KnowledgeIn(_In):
    id: Id
    content: Text
    score: Annotated[float, Field(strict=True, ge=0.0, le=1e6)] = 0.0


class ContextBody(_In):
    request_id: Id
    digest: Text | None = None
    knowledge: Annotated[list[KnowledgeIn], Field(max_length=MAX_BATCH)] = []


class ContextOut(_Out):
    agent_memory: str
    coordination: str
    text: str
    report: Report


class StepIn(_In):
    action: Action
    outcome: Outcome = "success"
    response: Text = ""
    failure_cause: Text | None = None
    started_at: Instant | None = None
    ended_at: Instant | None = None
    metadata: Annotated[dict[str, Any], AfterValidator(storable_json)] = {}
    importance: Unit = 0.5
    eligible: StrictBool = True
    id: Id | None = None


class StepsBody(_In):
    request_id: Id
    steps: Annotated[list[StepIn], Field(min_length=1, max_length=MAX_BATCH)]


class FinishBody(_In):
    request_id: Id
    failed: StrictBool = False
    """The request ended in an error (recorded on the cleanup report)."""


class ReportOut(_Out):
    report: Report


# -- events and knowledge -----------------------------------------------------------
class EventOut(_Out):
    id: str
    domain: str
    agent: str
    action: str
    outcome: str
    summary: str
    occurred_at: AwareDatetime
    recorded_at: AwareDatetime
    request_id: str | None
    user_id: str | None
    entities: list[EntityBody]
    importance: float
    metadata: dict[str, Any]


class EventsOut(_Out):
    events: list[EventOut]
    limited: bool
    """True when the limit cut the window (older events exist)."""


class KnowledgeSearchBody(_In):
    domain: Id
    query: Query
    limit: Limit = 5


class KnowledgeOut(_Out):
    id: str
    content: str
    score: float


class KnowledgeSearchOut(_Out):
    results: list[KnowledgeOut]


class ProblemOut(BaseModel):
    """An RFC 9457 problem document (`application/problem+json`)."""

    type: str
    title: str
    status: int
    detail: str
    request_id: str | None = None
    errors: list[dict[str, Any]] | None = None
    field: str | None = None


# -- inspection (what the inspector page reads) ----------------------------------
class DomainOut(_Out):
    domain: str
    open_requests: int


class DomainsOut(_Out):
    """Domains with agent requests open on this server, for the caller's tenant."""

    domains: list[DomainOut]


class SignalOut(_Out):
    agent: str
    request_id: str
    doing: str
    status: str
    started_at: AwareDatetime | None
    entities: list[EntityBody]


class HeldClaimOut(_Out):
    entity: EntityBody
    holder_agent: str
    holder_request_id: str
    since: AwareDatetime | None


class ActivityOut(_Out):
    """Active agents (activity signals) and investigation claims of a domain."""

    signals: list[SignalOut]
    claims: list[HeldClaimOut]


class DigestOut(_Out):
    """A domain's digest (null when compaction fell back to the raw events)."""

    digest: str | None
    path: str
    coverage: str
    raw_events: int

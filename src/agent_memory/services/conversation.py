"""Route-local conversation memory for chat-style callers.

`ConversationMemory.before_model(route, user_id, query)` finds the user's
relevant memories and returns the block to inject into the model's prompt,
trimmed best-first so that its estimated size (`domain.views.tokens`, the
script-aware estimate) never exceeds the route's `max_inject_tokens`;
`after_model(route, user_id, query, answer)` stores the exchange when the
route's policy says so, unless it is trivial (`domain.exchanges.is_trivial`:
only acknowledgements or greetings on the user's side, or too few content
words) or the same, after normalisation, as one already stored for that user,
route, project and type. Both fail open: a backend or embedder failure is logged
and counted, and the model call goes on without memory.

Policy is per route: a global default (`MemoryPolicy`) and per-route overrides
(`RouteOverride`), where every omitted field inherits the global value. A route
that is not listed, or whose policy is disabled, pays nothing: no embedding and
no store call.

Storage layout (on any `MemoryStore`): owner = the user id (required, never
widened), namespace = `conversation` or `conversation:<project>`, kind =
`conversation:<type>`. An exchange's record id is derived from the user, route,
namespace, kind and the normalised exchange, so the store itself rejects a
second copy (`DuplicateRecord`), even from a concurrent call. A project
narrows retrieval to that project's namespace; types narrow it to those
kinds; neither replaces the owner.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import cattrs
from attrs import field, frozen

from agent_memory.domain.errors import ConfigurationError, DuplicateRecord, InvalidInput
from agent_memory.domain.exchanges import exchange_key, exchange_record_id, is_trivial
from agent_memory.domain.records import MemoryRecord, ScoredRecord, require_dimension
from agent_memory.domain.time import SystemClock
from agent_memory.domain.validation import (
    MAX_LIMIT,
    as_vector,
    require_id,
    require_no_nul,
    require_scope,
    require_text,
)
from agent_memory.domain.views.encoding import encode_text
from agent_memory.domain.views.tokens import estimate_tokens, trim_to_token_budget
from agent_memory.ports.models import Clock, Embedder
from agent_memory.ports.storage import MemoryStore
from agent_memory.services.observability import Observability

__all__ = [
    "BLOCK_CLOSE",
    "BLOCK_OPEN",
    "NAMESPACE",
    "ConversationConfig",
    "ConversationMemory",
    "Injection",
    "MemoryPolicy",
    "RouteOverride",
    "StoreOutcome",
    "load_config",
    "render_block",
]

_log = logging.getLogger(__name__)

NAMESPACE = "conversation"
KIND_PREFIX = "conversation:"
BLOCK_OPEN = "<conversation_memory>"
BLOCK_CLOSE = "</conversation_memory>"
#: The metric `kind` label of conversation retrievals (result-count histogram).
RESULT_KIND = "conversation"
_SPAN_BEFORE = "conversation.before_model"
_SPAN_AFTER = "conversation.after_model"


# -- policy ---------------------------------------------------------------------


def _check_threshold(_i: object, _a: object, value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not -1.0 <= value <= 1.0
    ):
        raise InvalidInput("threshold", f"a cosine score in [-1, 1] is required, got {value!r}")


def _check_limit(_i: object, _a: object, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise InvalidInput(
            "retrieval_limit", f"an integer in [1, {MAX_LIMIT}] is required, got {value!r}"
        )


def _check_tokens(_i: object, _a: object, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(
            "max_inject_tokens", f"a non-negative integer is required, got {value!r}"
        )


def _check_words(_i: object, _a: object, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
        raise InvalidInput(
            "min_content_words", f"an integer in [0, {MAX_LIMIT}] is required, got {value!r}"
        )


def _check_bool(name: str) -> Any:
    def check(_i: object, _a: object, value: object) -> None:
        if not isinstance(value, bool):
            raise InvalidInput(name, f"true or false is required, got {value!r}")

    return check


def _types(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidInput("types", f"a list of memory type names is required, got {value!r}")
    out = tuple(require_id(t, "types") for t in value)
    if not out:
        raise InvalidInput("types", "at least one memory type is required")
    return tuple(dict.fromkeys(out))


def _optional(check: Any) -> Any:
    def run(instance: object, attribute: object, value: object) -> None:
        if value is not None:
            check(instance, attribute, value)

    return run


def _optional_types(value: object) -> tuple[str, ...] | None:
    return None if value is None else _types(value)


@frozen
class MemoryPolicy:
    """A route's effective memory policy (also the global default).

    - `enabled`: retrieve and store at all (a disabled route makes no call);
    - `threshold`: the lowest cosine score a retrieved memory may have;
    - `retrieval_limit`: how many memories a retrieval asks the store for;
    - `max_inject_tokens`: the injected block's budget, by `estimate_tokens`;
    - `auto_store`: store each exchange after the model answered;
    - `types`: the memory types retrieved, and stored (the first is the default);
    - `skip_trivial`: do not store a trivial exchange (`domain.exchanges`);
    - `min_content_words`: an exchange with fewer content words is trivial.
    """

    enabled: bool = field(default=True, validator=_check_bool("enabled"))
    threshold: float = field(default=0.3, validator=_check_threshold)
    retrieval_limit: int = field(default=5, validator=_check_limit)
    max_inject_tokens: int = field(default=512, validator=_check_tokens)
    auto_store: bool = field(default=False, validator=_check_bool("auto_store"))
    types: tuple[str, ...] = field(default=("episodic",), converter=_types)
    skip_trivial: bool = field(default=True, validator=_check_bool("skip_trivial"))
    min_content_words: int = field(default=3, validator=_check_words)


@frozen
class RouteOverride:
    """A route's overrides; a field left None inherits the global default."""

    enabled: bool | None = field(default=None, validator=_optional(_check_bool("enabled")))
    threshold: float | None = field(default=None, validator=_optional(_check_threshold))
    retrieval_limit: int | None = field(default=None, validator=_optional(_check_limit))
    max_inject_tokens: int | None = field(default=None, validator=_optional(_check_tokens))
    auto_store: bool | None = field(default=None, validator=_optional(_check_bool("auto_store")))
    types: tuple[str, ...] | None = field(default=None, converter=_optional_types)
    skip_trivial: bool | None = field(
        default=None, validator=_optional(_check_bool("skip_trivial"))
    )
    min_content_words: int | None = field(default=None, validator=_optional(_check_words))

    def apply(self, default: MemoryPolicy) -> MemoryPolicy:
        """`default` with every field this override sets replaced."""
        changes = {
            a.name: getattr(self, a.name)
            for a in attrs.fields(RouteOverride)
            if getattr(self, a.name) is not None
        }
        return attrs.evolve(default, **changes)


def _routes(value: object) -> dict[str, RouteOverride]:
    if not isinstance(value, Mapping):
        raise InvalidInput("routes", f"a mapping of route name to overrides, got {value!r}")
    out: dict[str, RouteOverride] = {}
    for name, override in value.items():
        require_id(name, "routes")
        if not isinstance(override, RouteOverride):
            raise InvalidInput(f"routes.{name}", "a RouteOverride is required")
        out[name] = override
    return out


@frozen
class ConversationConfig:
    """The global default and the routes that use memory. A route not listed
    has no memory (disabled); a listed one inherits every omitted field."""

    default: MemoryPolicy = field(factory=MemoryPolicy)
    routes: Mapping[str, RouteOverride] = field(factory=dict, converter=_routes)

    def policy(self, route: str) -> MemoryPolicy:
        """The effective policy of `route`."""
        override = self.routes.get(route)
        if override is None:
            return attrs.evolve(self.default, enabled=False)
        return override.apply(self.default)


_converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)


def _strict(kind: type, accepts: tuple[type, ...]) -> Any:
    """A structure hook taking only `accepts` (no `bool` as a number, no string
    as a bool): a config value of the wrong type is an error, never coerced."""

    def hook(value: object, _type: object) -> Any:
        if isinstance(value, bool) is not (kind is bool) or not isinstance(value, accepts):
            raise TypeError(f"{kind.__name__} required, got {type(value).__name__} {value!r}")
        return kind(value)

    return hook


_converter.register_structure_hook(bool, _strict(bool, (bool,)))
_converter.register_structure_hook(int, _strict(int, (int,)))
_converter.register_structure_hook(float, _strict(float, (int, float)))


def _structure_types(value: object, _type: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise TypeError(f"a list of type names is required, got {type(value).__name__} {value!r}")
    return _types(value)


_converter.register_structure_hook_func(lambda t: t == tuple[str, ...], _structure_types)


def _format(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, InvalidInput | TypeError):
        return str(exc)
    return cattrs.v.format_exception(exc, type_)


def config_from_mapping(data: object) -> ConversationConfig:
    """A `ConversationConfig` from plain data (parsed JSON or YAML):
    `{"default": {...}, "routes": {"name": {...}}}`. Unknown keys and bad values
    raise `ConfigurationError` naming their path (e.g. `$.routes.chat.limit`)."""
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"$: a mapping is required, got {type(data).__name__}")
    try:
        return _converter.structure(data, ConversationConfig)
    except cattrs.BaseValidationError as exc:
        problems = cattrs.transform_error(exc, path="$", format_exception=_format)
        raise ConfigurationError("; ".join(problems)) from None
    except InvalidInput as exc:
        raise ConfigurationError(str(exc)) from None


def load_config(path: str | Path) -> ConversationConfig:
    """Read a JSON (`.json`) or YAML (`.yaml`/`.yml`, when PyYAML is installed)
    config file; see `config_from_mapping`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}") from None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        try:
            import importlib

            yaml: Any = importlib.import_module("yaml")
        except ImportError:
            raise ConfigurationError(
                f"{path}: reading YAML needs PyYAML, which is not installed; use JSON"
            ) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigurationError(f"{path}: not valid YAML: {exc}") from None
    elif suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{path}: not valid JSON: {exc}") from None
    else:
        raise ConfigurationError(f"{path}: a .json, .yaml or .yml file is required")
    return config_from_mapping(data)


# -- results --------------------------------------------------------------------


@frozen
class Injection:
    """What `before_model` found: `text` is the block to inject ("" for none).

    `status` is `disabled` (the route has no memory: nothing was called), `hit`
    (relevant memories were found), `miss` (nothing relevant) or `error` (the
    retrieval failed: fail-open). `omitted` counts the relevant memories left
    out because they did not fit the budget: a hit whose every memory was
    omitted has an empty `text`. `tokens` is `estimate_tokens(text)`, at most
    the route's `max_inject_tokens`. `reason`, for an `error`, names what
    failed: `embedder: <error type>` or `store: <error type>`.
    """

    text: str
    memories: tuple[ScoredRecord, ...]
    omitted: int
    tokens: int
    status: str
    reason: str = ""


@frozen
class StoreOutcome:
    """What `after_model` did: `stored` (with the record id), `skipped` (and
    why: `disabled`, `auto_store off`, a type not in the policy, `empty
    exchange`, `trivial`, or `duplicate` with the stored copy's id), or `error`
    (`reason` names what failed: `embedder: <error type>` or `store: <error type>`)."""

    status: str
    record_id: str | None = None
    reason: str = ""


def _line(record: MemoryRecord) -> str:
    """One memory as one line of the block: line breaks folded to spaces, then
    written as a JSON string literal (`encode_text`), so a stored memory can
    neither close the block nor open a tag, even after NFKC normalisation."""
    return "- " + encode_text(" ".join(record.content.split()))


def render_block(memories: Sequence[ScoredRecord]) -> str:
    """The injected block: the kept memories, best first, one line each (`_line`)."""
    if not memories:
        return ""
    lines = [_line(m.record) for m in memories]
    return "\n".join([BLOCK_OPEN, *lines, BLOCK_CLOSE])


def _trim(hits: Sequence[ScoredRecord], budget: int) -> tuple[tuple[ScoredRecord, ...], int]:
    """The best-first memories whose block fits `budget` estimated tokens.

    The frame (open and close tags) is paid first; each memory's line is kept
    when it still fits (`trim_to_token_budget`). The estimate of lines joined by
    line breaks is at most the sum of theirs, and the block is re-checked, so
    the result never exceeds the budget.
    """
    frame = estimate_tokens(f"{BLOCK_OPEN}\n{BLOCK_CLOSE}")
    if budget < frame or not hits:
        return (), 0
    kept = list(trim_to_token_budget(hits, budget - frame, text=lambda h: _line(h.record)).kept)
    while kept and estimate_tokens(render_block(kept)) > budget:  # pragma: no cover - guard
        kept.pop()
    return tuple(kept), estimate_tokens(render_block(kept)) if kept else 0


# -- the service ------------------------------------------------------------------


def _project_namespace(project: str | None) -> str:
    if project is None:
        return NAMESPACE
    return f"{NAMESPACE}:{require_scope(project, 'project')}"


class ConversationMemory:
    """Route-local retrieve -> trim -> inject, and auto-store, on one store.

    `backend` is the metric label of the store (e.g. `memory.stores.backend`).
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        config: ConversationConfig | None = None,
        *,
        clock: Clock | None = None,
        observability: Observability | None = None,
        backend: str = "unknown",
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._config = config if config is not None else ConversationConfig()
        if not isinstance(self._config, ConversationConfig):
            raise InvalidInput("config", "a ConversationConfig is required")
        self._clock = clock or SystemClock()
        self._obs = observability or Observability()
        self._backend = backend

    @property
    def config(self) -> ConversationConfig:
        return self._config

    def policy(self, route: str) -> MemoryPolicy:
        return self._config.policy(require_id(route, "route"))

    async def before_model(
        self,
        route: str,
        user_id: str,
        query: str,
        project: str | None = None,
        *,
        types: Sequence[str] | None = None,
    ) -> Injection:
        """The user's memories relevant to `query`, as a block within the route's
        `max_inject_tokens`. `project` and `types` (a subset of the policy's
        types) narrow the search; the user filter always applies."""
        require_scope(user_id, "user_id")
        require_no_nul(require_text(query, "query"), "query")
        policy = self.policy(route)
        namespace = None if project is None else _project_namespace(project)
        wanted = policy.types if types is None else tuple(t for t in _types(types))
        if not policy.enabled:
            return Injection(text="", memories=(), omitted=0, tokens=0, status="disabled")
        kinds = [KIND_PREFIX + t for t in wanted if t in policy.types]
        with self._obs.span(_SPAN_BEFORE, route=route, backend=self._backend) as span:
            try:
                stage = "embedder"
                if not kinds or not query.strip():
                    hits: list[ScoredRecord] = []
                else:
                    vector = as_vector((await self._embedder.embed([query]))[0], "embedding")
                    require_dimension(self._store.space, vector)
                    stage = "store"
                    hits = await self._store.search(
                        user_id,
                        vector,
                        limit=policy.retrieval_limit,
                        namespace=namespace,
                        kinds=kinds,
                        min_score=policy.threshold,
                    )
            except Exception as exc:  # fail-open: the model call goes on without memory
                _log.warning("conversation memory retrieval failed (%s): %s", route, exc)
                self._obs.retrieval(self._backend, "error")
                span.set(status="error", error=type(exc).__name__)
                return Injection(
                    text="",
                    memories=(),
                    omitted=0,
                    tokens=0,
                    status="error",
                    reason=f"{stage}: {type(exc).__name__}",
                )
            kept, tokens = _trim(hits, policy.max_inject_tokens)
            omitted = len(hits) - len(kept)
            # every hit passed the threshold: one left out for the budget is
            # still a hit (counted as omitted), not a miss
            status = "hit" if hits else "miss"
            self._obs.retrieval(self._backend, status)
            self._obs.results(RESULT_KIND, len(kept))
            self._obs.conversation_omitted(self._backend, omitted)
            span.set(
                status=status,
                found=len(hits),
                injected=len(kept),
                omitted=omitted,
                tokens=tokens,
            )
            return Injection(
                text=render_block(kept),
                memories=kept,
                omitted=omitted,
                tokens=tokens,
                status=status,
            )

    async def after_model(
        self,
        route: str,
        user_id: str,
        query: str,
        answer: str,
        *,
        project: str | None = None,
        memory_type: str | None = None,
    ) -> StoreOutcome:
        """Store the exchange as one memory of `memory_type` (default: the
        policy's first type) when the route auto-stores that type, unless it is
        trivial (with `skip_trivial`) or a duplicate of a stored exchange."""
        require_scope(user_id, "user_id")
        require_no_nul(require_text(query, "query"), "query")
        require_no_nul(require_text(answer, "answer"), "answer")
        policy = self.policy(route)
        namespace = _project_namespace(project)
        kind_name = policy.types[0] if memory_type is None else require_id(memory_type, "type")
        if not policy.enabled:
            return StoreOutcome(status="skipped", reason="disabled")
        if not policy.auto_store:
            return StoreOutcome(status="skipped", reason="auto_store off")
        if kind_name not in policy.types:
            return StoreOutcome(status="skipped", reason=f"type {kind_name!r} not in the policy")
        content = f"User: {query.strip()}\nAssistant: {answer.strip()}"
        if not query.strip() and not answer.strip():
            return StoreOutcome(status="skipped", reason="empty exchange")
        kind = KIND_PREFIX + kind_name
        with self._obs.span(_SPAN_AFTER, route=route, backend=self._backend) as span:
            if policy.skip_trivial and is_trivial(query, answer, policy.min_content_words):
                self._obs.conversation_store(self._backend, "trivial")
                span.set(status="skipped", reason="trivial")
                return StoreOutcome(status="skipped", reason="trivial")
            record_id = exchange_record_id(
                user_id, (route, namespace, kind), exchange_key(query, answer)
            )
            started = time.perf_counter()
            stage = "embedder"
            try:
                vector = as_vector((await self._embedder.embed([content]))[0], "embedding")
                require_dimension(self._store.space, vector)
                stage = "store"
                now = self._clock.now()
                record = MemoryRecord(
                    id=record_id,
                    owner=user_id,
                    namespace=namespace,
                    kind=kind,
                    content=content,
                    vector=vector,
                    created_at=now,
                    updated_at=now,
                    attributes={"route": route},
                )
                await self._store.add([record])
            except DuplicateRecord:  # the same exchange is stored already
                self._obs.conversation_store(self._backend, "duplicate")
                span.set(status="skipped", reason="duplicate")
                return StoreOutcome(status="skipped", record_id=record_id, reason="duplicate")
            except Exception as exc:  # fail-open
                _log.warning("conversation memory store failed (%s): %s", route, exc)
                self._obs.conversation_store(self._backend, "error")
                span.set(status="error", error=type(exc).__name__)
                return StoreOutcome(status="error", reason=f"{stage}: {type(exc).__name__}")
            self._obs.conversation_store(self._backend, "stored")
            span.set(status="stored", seconds=round(time.perf_counter() - started, 6))
            return StoreOutcome(status="stored", record_id=record.id)

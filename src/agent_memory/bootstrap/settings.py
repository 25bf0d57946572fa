"""Numbers, URLs and model names from `AGENT_MEMORY_*` environment variables,
validated at startup.

Behaviour is chosen in code; only deployment numbers, endpoints and model names
come from the environment. Every setting is one attrs field of `Settings` whose
metadata (`EnvVar`) names its variable, kind, unit and meaning: `ENV_VARS` (the
table docs/configuration.md shows) is derived from those fields, so each default
is written once. Values are checked by the shared validators of
`agent_memory.domain.validation`, whether they come from the environment or from
code; an invalid value fails with a `ConfigurationError` naming the variable and
what it expected.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, NamedTuple

import attrs
from attrs import frozen

from agent_memory.adapters._common.urls import redact_url
from agent_memory.domain.errors import ConfigurationError, InvalidInput
from agent_memory.domain.validation import (
    require_id,
    require_limit,
    require_positive,
    require_positive_number,
    require_ttl,
    require_unit_interval,
)

__all__ = [
    "EMBEDDER_CHOICES",
    "ENV_VARS",
    "MODEL_FALLBACK",
    "MODEL_PURPOSES",
    "EnvVar",
    "Setting",
    "SettingValue",
    "Settings",
    "default_sqlite_url",
    "redact_url",
]


def default_sqlite_url() -> str:
    """`sqlite:///<user data dir>/agent-memory/memory.db` (platformdirs)."""
    import platformdirs

    base = Path(platformdirs.user_data_dir("agent-memory", appauthor=False))
    return f"sqlite:///{base / 'memory.db'}"


def _require_setting_text(value: object, field: str) -> str:
    """A text setting (a model name, a path, a URL, a key): a non-blank string
    without NUL or lone surrogates that neither starts nor ends with a blank.
    Blanks are refused, not stripped: `" 7 "` would otherwise name another
    deployment, model or file than `7`, silently. The value is never quoted
    (it may be a secret)."""
    if not isinstance(value, str):
        raise InvalidInput(field, f"a string is required, got {type(value).__name__}")
    if not value.strip():
        raise InvalidInput(field, "a non-blank string is required")
    if value != value.strip():
        raise InvalidInput(
            field,
            "must not start or end with a blank (space, tab, newline): remove the "
            "surrounding blanks",
        )
    if "\x00" in value:
        raise InvalidInput(field, "text must not contain NUL (\\x00)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(field, "text must be valid Unicode (no lone surrogates)") from None
    return value


def _require_url(value: object, field: str) -> str:
    text = _require_setting_text(value, field)
    if "://" not in text:
        raise InvalidInput(
            field, "must be a URL such as sqlite:///path/to/memory.db or redis://host:6379"
        )
    return text


#: `AGENT_MEMORY_EMBEDDER` values (bootstrap.connect.embedder_choice).
EMBEDDER_CHOICES: Final[tuple[str, ...]] = ("auto", "minilm", "hashing")


def _require_embedder(value: object, field: str) -> str:
    text = require_id(value, field)
    if text not in EMBEDDER_CHOICES:
        raise InvalidInput(field, f"must be one of {', '.join(EMBEDDER_CHOICES)}, got {text!r}")
    return text


# kind -> (parse the environment's text, check a value). The checks are the
# shared validators; each raises InvalidInput with the problem.
_KINDS: Final[dict[str, tuple[Callable[[str], object], Callable[[object, str], object]]]] = {
    "int": (int, require_positive),
    "limit": (int, require_limit),
    "number": (float, require_positive_number),
    "fraction": (float, require_unit_interval),
    "url": (str, _require_url),
    "text": (str, _require_setting_text),
    "embedder": (str.lower, _require_embedder),
}
_UNITS: Final[dict[str, timedelta]] = {
    "seconds": timedelta(seconds=1),
    "hours": timedelta(hours=1),
    "days": timedelta(days=1),
}
_PARSE_PROBLEM: Final[dict[str, str]] = {
    "int": "must be an integer (ASCII digits)",
    "limit": "must be an integer (ASCII digits)",
    "number": "must be a number (ASCII decimal, e.g. 0.5 or 1e3)",
    "fraction": "must be a number (ASCII decimal, e.g. 0.5 or 1e3)",
}
_INT_SPELLING: Final = re.compile(r"[+-]?[0-9]+", re.ASCII)
_NUMBER_SPELLING: Final = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf|infinity)",
    re.ASCII | re.IGNORECASE,
)
_SPELLING: Final[dict[str, re.Pattern[str]]] = {
    "int": _INT_SPELLING,
    "limit": _INT_SPELLING,
    "number": _NUMBER_SPELLING,
    "fraction": _NUMBER_SPELLING,
}


@frozen
class EnvVar:
    """A setting's variable: name, kind (int, limit, number, fraction, url,
    text, embedder), unit of a duration (its field then holds a `timedelta`), whether a
    duration is a store TTL (bounded by `MAX_TTL`), meaning, secrecy, and
    whether a text is an id inside the backends (at most `MAX_ID_BYTES`)."""

    name: str
    kind: str
    doc: str
    unit: str | None = None
    ttl: bool = False
    secret: bool = False
    id: bool = False

    def parse(self, raw: str) -> object:
        """The environment's text -> the field's value (checked)."""
        reader, _ = _KINDS[self.kind]
        text = raw if self.kind in ("url", "text") else raw.strip()
        # int() and float() also read `1_000`, full-width and other Unicode
        # digits: a number variable is ASCII decimal (docs/configuration.md).
        spelling = _SPELLING.get(self.kind)
        if spelling is not None and not spelling.fullmatch(text):
            raise InvalidInput(self.name, _PARSE_PROBLEM[self.kind])
        try:
            value = reader(text)
        except ValueError:
            raise InvalidInput(self.name, _PARSE_PROBLEM[self.kind]) from None
        return self.check(self.to_field(self.check_plain(value)))

    def check_plain(self, value: object) -> object:
        """Check a value in the variable's own unit (seconds, hours, ...)."""
        _, check = _KINDS[self.kind]
        checked = check(value, self.name)
        return require_id(checked, self.name) if self.id else checked

    def to_field(self, value: object) -> object:
        if self.unit is None:
            return value
        assert isinstance(value, int | float)
        try:
            return _UNITS[self.unit] * value
        except OverflowError:
            raise InvalidInput(self.name, f"{value} {self.unit} is out of range") from None

    def from_field(self, value: object) -> object:
        """The field's value in the variable's unit (for the table and the dump)."""
        if self.unit is None or not isinstance(value, timedelta):
            return value
        amount = value / _UNITS[self.unit]
        return int(amount) if self.kind in ("int", "limit") else amount

    def check(self, value: object) -> object:
        """Check a field value (from the environment or from code)."""
        if value is None:
            return None
        if self.unit is None:
            return self.check_plain(value)
        if not isinstance(value, timedelta):
            raise InvalidInput(self.name, f"a timedelta is required, got {value!r}")
        if self.ttl:
            require_ttl(value, self.name)
        self.check_plain(self.from_field(value))
        return value


def _validate(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    var: EnvVar = attribute.metadata["env"]
    try:
        var.check(value)
    except InvalidInput as exc:
        raise ConfigurationError(f"{var.name}: {exc.problem} (Settings.{attribute.name})") from None


def _setting(
    name: str,
    default: object,
    kind: str,
    doc: str,
    *,
    unit: str | None = None,
    ttl: bool = False,
    secret: bool = False,
    id: bool = False,
) -> Any:
    """One setting: `AGENT_MEMORY_<name>`, its default in the variable's unit."""
    var = EnvVar(f"AGENT_MEMORY_{name}", kind, doc, unit=unit, ttl=ttl, secret=secret, id=id)
    value = default if default is None else var.to_field(default)
    return attrs.field(default=value, validator=_validate, metadata={"env": var}, repr=not secret)


#: Purposes a language model is used for -> the field naming its model. An unset
#: purpose falls back (digest -> summarizer -> the default `llm_model`).
MODEL_PURPOSES: Final[dict[str, str]] = {
    "summarizer": "summarizer_model",
    "digest": "digest_model",
    "knowledge": "knowledge_model",
    "reflection": "reflection_model",
    "user_memory": "user_memory_model",
    "triples": "triple_model",
}
MODEL_FALLBACK: Final[dict[str, str]] = {"digest": "summarizer"}


@frozen
class Settings:
    """Validated deployment settings; each field's metadata names its variable
    (see docs/configuration.md)."""

    # -- storage ------------------------------------------------------------------
    url: str | None = _setting(
        "URL", None, "url", "storage URL (default: SQLite file in the user data dir)"
    )
    coordination_url: str | None = _setting(
        "COORDINATION_URL",
        None,
        "url",
        "events/leases/cache URL when AGENT_MEMORY_URL serves only the memory store (qdrant)",
    )
    deployment: str = _setting(
        "DEPLOYMENT", "default", "text", "deployment name inside shared backends", id=True
    )
    retention: timedelta = _setting(  # noqa: RUF009 (an attrs field)
        "RETENTION_DAYS", 60, "int", "event retention in days", unit="days"
    )
    hnsw_m: int | None = _setting(
        "HNSW_M",
        None,
        "int",
        "HNSW graph degree M for new vector indexes (redis, postgres, qdrant, memory and sqlite"
        " past the threshold; URL: hnsw_m)",
    )
    hnsw_ef_construction: int | None = _setting(
        "HNSW_EF_CONSTRUCTION",
        None,
        "int",
        "HNSW build candidate list for new vector indexes (URL: hnsw_ef_construction)",
    )
    hnsw_ef_search: int | None = _setting(
        "HNSW_EF_SEARCH",
        None,
        "int",
        "HNSW query candidate list, every query (URL: hnsw_ef_search; redis EF_RUNTIME)",
    )
    exact_search_threshold: int | None = _setting(
        "EXACT_SEARCH_THRESHOLD",
        None,
        "int",
        "owners with at most this many records are searched exactly (URL: exact_threshold)",
    )
    # -- request lifecycle and planning view -----------------------------------------
    signal_ttl: timedelta = _setting(  # noqa: RUF009 (an attrs field)
        "SIGNAL_TTL_SECONDS", 300.0, "number", "activity signal TTL", unit="seconds", ttl=True
    )
    signals_in_prompt: int = _setting(
        "SIGNALS_IN_PROMPT", 10, "limit", "most activity signals and claims shown to the planner"
    )
    cleanup_timeout: float = _setting(
        "CLEANUP_TIMEOUT_SECONDS", 5.0, "number", "bounded cleanup on exit"
    )
    lookback: timedelta = _setting(  # noqa: RUF009 (an attrs field)
        "LOOKBACK_HOURS", 24.0, "number", "planning window lookback", unit="hours"
    )
    window_limit: int = _setting("WINDOW_LIMIT", 20, "limit", "planning window event limit")
    view_budget_bytes: int = _setting(
        "VIEW_BUDGET_BYTES",
        8000,
        "int",
        "prompt view budget in bytes, per view: `<agent_memory>` and "
        "`<agent_coordination>` each stay within it, so a request's "
        "`PlanningContext.text` (both, joined by a newline) is at most twice it "
        "plus one byte; `<user_profile>` has it too",
    )
    # -- recording ------------------------------------------------------------------
    summary_timeout: float = _setting(
        "SUMMARY_TIMEOUT_SECONDS", 120.0, "number", "batched summary timeout"
    )
    summary_payload_bytes: int = _setting(
        "SUMMARY_PAYLOAD_BYTES",
        4000,
        "int",
        "bytes of one step (failure cause + response) the summarizer sees",
    )
    failure_cause_bytes: int = _setting(
        "FAILURE_CAUSE_MAX_BYTES",
        256,
        "int",
        "bytes of a failure cause kept in heuristic summaries and event metadata",
    )
    # -- compaction (digest) ------------------------------------------------------------
    digest_cache_ttl: timedelta = _setting(  # noqa: RUF009 (an attrs field)
        "DIGEST_CACHE_TTL_SECONDS", 300.0, "number", "digest cache TTL", unit="seconds", ttl=True
    )
    digest_incremental_threshold: int = _setting(
        "DIGEST_INCREMENTAL_THRESHOLD",
        20,
        "int",
        "new events above this rebuild the digest instead of updating it",
    )
    digest_target_tokens: int = _setting(
        "DIGEST_TARGET_TOKENS", 500, "int", "requested digest length (the model may use 5x)"
    )
    compaction_raw_limit: int = _setting(
        "COMPACTION_RAW_LIMIT", 200, "limit", "events read into one digest"
    )
    compaction_lookback: timedelta = _setting(  # noqa: RUF009 (an attrs field)
        "COMPACTION_LOOKBACK_HOURS", 24.0, "number", "digest window lookback", unit="hours"
    )
    digest_timeout: float = _setting(
        "DIGEST_TIMEOUT_SECONDS", 120.0, "number", "digest model call timeout"
    )
    # -- knowledge and reflection ----------------------------------------------------------
    extraction_timeout: float = _setting(
        "EXTRACTION_TIMEOUT_SECONDS",
        60.0,
        "number",
        "knowledge and user-fact extraction model call timeout",
    )
    reflection_interval: timedelta = _setting(  # noqa: RUF009 (an attrs field)
        "REFLECTION_INTERVAL_HOURS", 24.0, "number", "time between reflection passes", unit="hours"
    )
    reflection_age_threshold: timedelta = _setting(  # noqa: RUF009 (an attrs field)
        "REFLECTION_AGE_THRESHOLD_HOURS",
        168.0,
        "number",
        "age at which an event becomes eligible for reflection",
        unit="hours",
    )
    reflection_min_events: int = _setting(
        "REFLECTION_MIN_EVENTS", 5, "int", "eligible events an entity needs to be reflected on"
    )
    reflection_fragments_per_entity: int = _setting(
        "REFLECTION_FRAGMENTS_PER_ENTITY", 3, "int", "most fragments kept per reflected entity"
    )
    reflection_timeout: float = _setting(
        "REFLECTION_TIMEOUT_SECONDS", 120.0, "number", "reflection model call timeout"
    )
    # -- user memory ------------------------------------------------------------------------
    user_similarity_threshold: float = _setting(
        "USER_SIMILARITY_THRESHOLD",
        0.75,
        "fraction",
        "cosine similarity from which a new fact is reconciled by the model",
    )
    user_facts_in_prompt: int = _setting(
        "USER_FACTS_IN_PROMPT", 15, "limit", "most facts recalled into <user_profile>"
    )
    user_recall_summaries: int = _setting(
        "USER_RECALL_SUMMARIES", 3, "limit", "latest session summaries recalled"
    )
    user_weight_relevance: float = _setting(
        "USER_WEIGHT_RELEVANCE", 0.5, "fraction", "user fact recall: weight of similarity"
    )
    user_weight_recency: float = _setting(
        "USER_WEIGHT_RECENCY", 0.2, "fraction", "user fact recall: weight of recency"
    )
    user_weight_importance: float = _setting(
        "USER_WEIGHT_IMPORTANCE", 0.3, "fraction", "user fact recall: weight of confidence"
    )
    # -- models ------------------------------------------------------------------------------
    embedder: str = _setting(
        "EMBEDDER",
        "auto",
        "embedder",
        "local embedder without AGENT_MEMORY_EMBEDDINGS_URL: auto (minilm when its wheel "
        "is installed, else hashing), minilm or hashing",
    )
    embedding_dimension: int = _setting(
        "EMBEDDING_DIMENSION",
        256,
        "int",
        "embedding dimension (hashing embedder, or the remote model's)",
    )
    embeddings_url: str | None = _setting(
        "EMBEDDINGS_URL", None, "url", "OpenAI-compatible embeddings base URL"
    )
    embeddings_model: str | None = _setting(
        "EMBEDDINGS_MODEL", None, "text", "embedding model name"
    )
    llm_url: str | None = _setting(
        "LLM_URL", None, "url", "OpenAI-compatible chat completions base URL"
    )
    llm_model: str | None = _setting(
        "LLM_MODEL", None, "text", "default chat model name (every purpose without its own)"
    )
    summarizer_model: str | None = _setting(
        "SUMMARIZER_MODEL", None, "text", "model of step summaries (and digests)"
    )
    digest_model: str | None = _setting(
        "DIGEST_MODEL", None, "text", "model of digests (default: the summarizer's)"
    )
    knowledge_model: str | None = _setting(
        "KNOWLEDGE_MODEL", None, "text", "model of knowledge extraction"
    )
    reflection_model: str | None = _setting(
        "REFLECTION_MODEL", None, "text", "model of reflection passes"
    )
    user_memory_model: str | None = _setting(
        "USER_MEMORY_MODEL", None, "text", "model of user-fact extraction and reconciliation"
    )
    triple_model: str | None = _setting(
        "TRIPLE_MODEL", None, "text", "model of fact-triple extraction (graph memory)"
    )
    api_key: str | None = _setting(
        "API_KEY", None, "text", "API key for the model endpoints (never logged)", secret=True
    )
    server_keys: str | None = _setting(
        "SERVER_KEYS",
        None,
        "text",
        "`agent-memory serve`: API key digests as JSON (when no key file is given)",
        secret=True,
    )
    server_keys_file: str | None = _setting(
        "SERVER_KEYS_FILE", None, "text", "`agent-memory serve`: path of the API key file"
    )

    def __attrs_post_init__(self) -> None:
        if (self.embeddings_url is None) != (self.embeddings_model is None):
            raise ConfigurationError(
                "AGENT_MEMORY_EMBEDDINGS_URL and AGENT_MEMORY_EMBEDDINGS_MODEL go together"
            )
        if (self.llm_url is None) != (self.llm_model is None):
            raise ConfigurationError("AGENT_MEMORY_LLM_URL and AGENT_MEMORY_LLM_MODEL go together")
        if self.llm_url is None:
            named = [
                _VARS_BY_FIELD[f].name
                for f in MODEL_PURPOSES.values()
                if getattr(self, f) is not None
            ]
            if named:
                raise ConfigurationError(
                    f"{', '.join(named)} need(s) AGENT_MEMORY_LLM_URL and AGENT_MEMORY_LLM_MODEL"
                )
        weights = (
            self.user_weight_relevance,
            self.user_weight_recency,
            self.user_weight_importance,
        )
        if sum(weights) <= 0:
            raise ConfigurationError(
                "AGENT_MEMORY_USER_WEIGHT_RELEVANCE, _RECENCY and _IMPORTANCE must not all be 0"
            )

    def model_name(self, purpose: str) -> str | None:
        """The chat model used for `purpose` (see `MODEL_PURPOSES`): its own
        setting, else its fallback's, else the default `llm_model`."""
        if purpose not in MODEL_PURPOSES:
            raise ConfigurationError(
                f"unknown model purpose {purpose!r}; known: {sorted(MODEL_PURPOSES)}"
            )
        own: str | None = getattr(self, MODEL_PURPOSES[purpose])
        if own is not None:
            return own
        if purpose in MODEL_FALLBACK:
            return self.model_name(MODEL_FALLBACK[purpose])
        return self.llm_model

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and validate every `AGENT_MEMORY_*` variable (unknown ones are rejected)."""
        env = os.environ if env is None else env
        unknown = sorted(k for k in env if k.startswith("AGENT_MEMORY_") and k not in ENV_VARS)
        if unknown:
            raise ConfigurationError(f"unknown setting(s) {unknown}; known: {sorted(ENV_VARS)}")
        values: dict[str, Any] = {}
        for field in attrs.fields(cls):
            var: EnvVar = field.metadata["env"]
            raw = env.get(var.name)
            if raw is None or raw == "":
                continue
            values[field.name] = _parse(var, raw)
        return cls(**values)

    def explain(self, env: Mapping[str, str] | None = None) -> list[SettingValue]:
        """Every setting's effective value (in its variable's unit; secrets
        redacted) and where it came from: `environment` (the variable is set to
        it), `default`, or `code` (given to `Settings(...)`)."""
        env = os.environ if env is None else env
        out: list[SettingValue] = []
        for field in attrs.fields(type(self)):
            var: EnvVar = field.metadata["env"]
            value = getattr(self, field.name)
            raw = env.get(var.name)
            source = "default" if value == field.default else "code"
            if raw:
                try:
                    if _parse(var, raw) == value:
                        source = "environment"
                except ConfigurationError:
                    pass
            shown: object = var.from_field(value)
            if var.secret and value is not None:
                shown = "<redacted>"
            elif var.kind == "url" and isinstance(value, str):
                shown = _redact_url(value)
            note = ""
            purpose = _PURPOSE_BY_FIELD.get(field.name)
            if purpose is not None and value is None:
                effective = self.model_name(purpose)
                if effective is not None:
                    note = f"uses {effective!r}"
            out.append(SettingValue(var.name, field.name, shown, source, note))
        return out


def _redact_url(url: str) -> str:
    """The URL without its credentials (`user:<redacted>@host`)."""
    return redact_url(url, "<redacted>")


def _shown(var: EnvVar, raw: str) -> str:
    """How an invalid value is quoted in its error: a secret as `<redacted>`
    (unless blank: nothing to hide), a URL without its credentials (when it has
    no `scheme://`, everything before its last `@` is taken for them)."""
    if var.secret and raw.strip():
        return f"{var.name}='<redacted>'"
    if var.kind == "url":
        if "://" in raw:
            return f"{var.name}={redact_url(raw, '<redacted>')!r}"
        if "@" in raw:
            return f"{var.name}={'<redacted>' + raw[raw.rfind('@') :]!r}"
    return f"{var.name}={raw!r}"


def _parse(var: EnvVar, raw: str) -> object:
    try:
        return var.parse(raw)
    except InvalidInput as exc:
        raise ConfigurationError(f"{_shown(var, raw)} is invalid: {exc.problem}") from None


class SettingValue(NamedTuple):
    """One line of `Settings.explain()`."""

    variable: str
    field: str
    value: object
    source: str
    note: str = ""


class Setting(NamedTuple):
    """A row of `ENV_VARS`: parse the variable's text, its default (in its
    unit), its meaning."""

    parse: Callable[[str], object]
    default: object
    description: str


_VARS_BY_FIELD: Final[dict[str, EnvVar]] = {
    f.name: f.metadata["env"] for f in attrs.fields(Settings)
}
_PURPOSE_BY_FIELD: Final[dict[str, str]] = {v: k for k, v in MODEL_PURPOSES.items()}


#: name -> (parser, default, description), derived from the `Settings` fields;
#: the table docs/configuration.md shows.
def _parser(var: EnvVar) -> Callable[[str], object]:
    def parse(raw: str) -> object:
        return _parse(var, raw)

    return parse


ENV_VARS: Final[dict[str, Setting]] = {
    f.metadata["env"].name: Setting(
        _parser(f.metadata["env"]),
        None if f.default is None else f.metadata["env"].from_field(f.default),
        f.metadata["env"].doc,
    )
    for f in attrs.fields(Settings)
}

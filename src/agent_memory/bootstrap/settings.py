"""Numbers and URLs from `AGENT_MEMORY_*` environment variables, validated at startup.

Behaviour is chosen in code; only deployment numbers and endpoints come from the
environment. An invalid value fails with a `ConfigurationError` naming the
variable and what it expected.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TypeVar, cast

from attrs import field, frozen

from agent_memory.domain.errors import ConfigurationError

__all__ = ["ENV_VARS", "Settings", "default_sqlite_url"]

T = TypeVar("T")


def default_sqlite_url() -> str:
    """`sqlite:///<user data dir>/agent-memory/memory.db` (platformdirs)."""
    import platformdirs

    base = Path(platformdirs.user_data_dir("agent-memory", appauthor=False))
    return f"sqlite:///{base / 'memory.db'}"


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError("must be a positive integer")
    return value


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0 or value == float("inf"):
        raise ValueError("must be a positive, finite number")
    return value


def _url(raw: str) -> str:
    if "://" not in raw:
        raise ValueError("must be a URL such as sqlite:///path/to/memory.db or redis://host:6379")
    return raw


def _text(raw: str) -> str:
    if not raw.strip():
        raise ValueError("must not be blank")
    return raw


# name -> (parser, default, description); the table docs/configuration.md shows.
ENV_VARS: dict[str, tuple[Callable[[str], object], object, str]] = {
    "AGENT_MEMORY_URL": (_url, None, "storage URL (default: SQLite file in the user data dir)"),
    "AGENT_MEMORY_COORDINATION_URL": (
        _url,
        None,
        "events/leases/cache URL when AGENT_MEMORY_URL serves only the memory store (qdrant)",
    ),
    "AGENT_MEMORY_DEPLOYMENT": (_text, "default", "deployment name inside shared backends"),
    "AGENT_MEMORY_RETENTION_DAYS": (_positive_int, 60, "event retention in days"),
    "AGENT_MEMORY_SIGNAL_TTL_SECONDS": (_positive_float, 300.0, "activity signal TTL"),
    "AGENT_MEMORY_CLEANUP_TIMEOUT_SECONDS": (_positive_float, 5.0, "bounded cleanup on exit"),
    "AGENT_MEMORY_LOOKBACK_HOURS": (_positive_float, 24.0, "planning window lookback"),
    "AGENT_MEMORY_WINDOW_LIMIT": (_positive_int, 20, "planning window event limit"),
    "AGENT_MEMORY_VIEW_BUDGET_BYTES": (_positive_int, 8000, "prompt view budget in bytes"),
    "AGENT_MEMORY_SUMMARY_TIMEOUT_SECONDS": (_positive_float, 120.0, "batched summary timeout"),
    "AGENT_MEMORY_EMBEDDING_DIMENSION": (
        _positive_int,
        256,
        "embedding dimension (hashing embedder, or the remote model's)",
    ),
    "AGENT_MEMORY_EMBEDDINGS_URL": (_url, None, "OpenAI-compatible embeddings base URL"),
    "AGENT_MEMORY_EMBEDDINGS_MODEL": (_text, None, "embedding model name"),
    "AGENT_MEMORY_LLM_URL": (_url, None, "OpenAI-compatible chat completions base URL"),
    "AGENT_MEMORY_LLM_MODEL": (_text, None, "chat model name"),
    "AGENT_MEMORY_API_KEY": (_text, None, "API key for the model endpoints (never logged)"),
}


def _get(env: Mapping[str, str], name: str) -> object:
    parser, default, _ = ENV_VARS[name]
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parser(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name}={raw!r} is invalid: {exc}") from None


@frozen
class Settings:
    """Validated deployment settings (see `ENV_VARS` for names and defaults)."""

    url: str | None = None
    coordination_url: str | None = None
    deployment: str = "default"
    retention: timedelta = timedelta(days=60)
    signal_ttl: timedelta = timedelta(minutes=5)
    cleanup_timeout: float = 5.0
    lookback: timedelta = timedelta(hours=24)
    window_limit: int = 20
    view_budget_bytes: int = 8000
    summary_timeout: float = 120.0
    embedding_dimension: int = 256
    embeddings_url: str | None = None
    embeddings_model: str | None = None
    llm_url: str | None = None
    llm_model: str | None = None
    api_key: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read and validate every `AGENT_MEMORY_*` variable (unknown ones are rejected)."""
        env = os.environ if env is None else env
        unknown = sorted(k for k in env if k.startswith("AGENT_MEMORY_") and k not in ENV_VARS)
        if unknown:
            raise ConfigurationError(f"unknown setting(s) {unknown}; known: {sorted(ENV_VARS)}")

        def get(name: str, _kind: type[T]) -> T:
            return cast(T, _get(env, name))

        embeddings_url = get("AGENT_MEMORY_EMBEDDINGS_URL", str)
        embeddings_model = get("AGENT_MEMORY_EMBEDDINGS_MODEL", str)
        if (embeddings_url is None) != (embeddings_model is None):
            raise ConfigurationError(
                "AGENT_MEMORY_EMBEDDINGS_URL and AGENT_MEMORY_EMBEDDINGS_MODEL go together"
            )
        llm_url = get("AGENT_MEMORY_LLM_URL", str)
        llm_model = get("AGENT_MEMORY_LLM_MODEL", str)
        if (llm_url is None) != (llm_model is None):
            raise ConfigurationError("AGENT_MEMORY_LLM_URL and AGENT_MEMORY_LLM_MODEL go together")
        return cls(
            url=get("AGENT_MEMORY_URL", str),
            coordination_url=get("AGENT_MEMORY_COORDINATION_URL", str),
            deployment=get("AGENT_MEMORY_DEPLOYMENT", str),
            retention=timedelta(days=get("AGENT_MEMORY_RETENTION_DAYS", int)),
            signal_ttl=timedelta(seconds=get("AGENT_MEMORY_SIGNAL_TTL_SECONDS", float)),
            cleanup_timeout=get("AGENT_MEMORY_CLEANUP_TIMEOUT_SECONDS", float),
            lookback=timedelta(hours=get("AGENT_MEMORY_LOOKBACK_HOURS", float)),
            window_limit=get("AGENT_MEMORY_WINDOW_LIMIT", int),
            view_budget_bytes=get("AGENT_MEMORY_VIEW_BUDGET_BYTES", int),
            summary_timeout=get("AGENT_MEMORY_SUMMARY_TIMEOUT_SECONDS", float),
            embedding_dimension=get("AGENT_MEMORY_EMBEDDING_DIMENSION", int),
            embeddings_url=embeddings_url,
            embeddings_model=embeddings_model,
            llm_url=llm_url,
            llm_model=llm_model,
            api_key=get("AGENT_MEMORY_API_KEY", str),
        )

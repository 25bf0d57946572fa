"""The processor's own part of the JSON configuration document.

Top level (every key optional)::

    {
      "nats_url": "nats://127.0.0.1:4222",
      "stream_name": "AGENT",
      "consumer_suffix": "",
      "owner": "default",
      "create_stream": true,
      "processor": {"batch_size": 16, "fetch_timeout_seconds": 0.5,
                    "ack_wait_seconds": 30, "max_deliver": 5,
                    "retry_delay_seconds": 1, "drain_timeout_seconds": 10,
                    "dedup_ttl_days": 7},
      "extraction": {"llm_assisted": {...}},
      "hydration": {"pre_task": {...}, "post_compaction": {...}},
      "checkpoint": {...}
    }

The `extraction`, `hydration` and `checkpoint` sections belong to graph memory
(`agent_memory.services.graph_memory.GraphSettings.from_mapping`); this module
only checks that no unknown top-level key is present.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from attrs import field, frozen

from agent_memory.domain.errors import ConfigurationError

__all__ = ["GRAPH_SECTIONS", "ProcessorConfig", "subject_token"]

GRAPH_SECTIONS = frozenset({"extraction", "hydration", "checkpoint"})
_TOP = frozenset(
    {"nats_url", "stream_name", "consumer_suffix", "owner", "create_stream", "processor"}
)
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_SUFFIX = re.compile(r"^[A-Za-z0-9_-]*$")
_SAFE_TOKEN = re.compile(r"[A-Za-z0-9_\-]")


def subject_token(value: str) -> str:
    """`value` as one NATS subject token: letters, digits, `_` and `-` stay, every
    other character becomes `~` plus its UTF-8 bytes in hex (`loop.1` -> `loop~2e1`)."""
    out: list[str] = []
    for char in value:
        if _SAFE_TOKEN.match(char):
            out.append(char)
        else:
            out.append("".join(f"~{b:02x}" for b in char.encode("utf-8")))
    return "".join(out) or "~"


def _positive(name: str, *, integer: bool = False) -> Any:
    def check(_inst: object, _attr: object, value: object) -> None:
        kind = int if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
            what = "a positive integer" if integer else "a positive number"
            raise ConfigurationError(f"processor.{name}: {what} is required, got {value!r}")

    return check


def _str(name: str, pattern: re.Pattern[str] | None = None) -> Any:
    def check(_inst: object, _attr: object, value: object) -> None:
        if not isinstance(value, str) or (pattern is None and not value.strip()):
            raise ConfigurationError(f"{name}: a non-empty string is required, got {value!r}")
        if pattern is not None and not pattern.match(value):
            raise ConfigurationError(f"{name}: must match {pattern.pattern}, got {value!r}")

    return check


@frozen
class ProcessorConfig:
    """Connection, stream, consumer names and delivery settings of the processor."""

    nats_url: str = field(default="nats://127.0.0.1:4222", validator=_str("nats_url"))
    stream_name: str = field(default="AGENT", validator=_str("stream_name", _NAME))
    consumer_suffix: str = field(default="", validator=_str("consumer_suffix", _SUFFIX))
    owner: str = field(default="default", validator=_str("owner"))
    create_stream: bool = True
    batch_size: int = field(default=16, validator=_positive("batch_size", integer=True))
    fetch_timeout_seconds: float = field(default=0.5, validator=_positive("fetch_timeout_seconds"))
    ack_wait_seconds: float = field(default=30.0, validator=_positive("ack_wait_seconds"))
    max_deliver: int = field(default=5, validator=_positive("max_deliver", integer=True))
    retry_delay_seconds: float = field(default=1.0, validator=_positive("retry_delay_seconds"))
    drain_timeout_seconds: float = field(default=10.0, validator=_positive("drain_timeout_seconds"))
    dedup_ttl_days: float = field(default=7.0, validator=_positive("dedup_ttl_days"))

    @property
    def compaction_consumer(self) -> str:
        return f"agent-memory-compaction{self.consumer_suffix}"

    @property
    def hydrate_consumer(self) -> str:
        return f"agent-memory-hydrate{self.consumer_suffix}"

    @property
    def dedup_bucket(self) -> str:
        return f"{self.stream_name}_agent_memory_done{self.consumer_suffix}"

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any], **overrides: Any) -> ProcessorConfig:
        """Read the document (see module doc); `overrides` win (e.g. `nats_url` from
        the command line). Unknown keys raise `ConfigurationError` naming them."""
        if not isinstance(doc, Mapping):
            raise ConfigurationError("the configuration must be a JSON object")
        unknown = sorted(set(doc) - _TOP - GRAPH_SECTIONS)
        if unknown:
            raise ConfigurationError(f"unknown configuration keys {unknown}")
        processor = doc.get("processor", {})
        if not isinstance(processor, Mapping):
            raise ConfigurationError("processor: an object is required")
        known = {
            "batch_size",
            "fetch_timeout_seconds",
            "ack_wait_seconds",
            "max_deliver",
            "retry_delay_seconds",
            "drain_timeout_seconds",
            "dedup_ttl_days",
        }
        unknown = sorted(set(processor) - known)
        if unknown:
            raise ConfigurationError(f"processor: unknown keys {unknown}")
        create = doc.get("create_stream", True)
        if not isinstance(create, bool):
            raise ConfigurationError(f"create_stream: true or false, got {create!r}")
        values: dict[str, Any] = {k: v for k, v in doc.items() if k in _TOP - {"processor"}}
        values.update(processor)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

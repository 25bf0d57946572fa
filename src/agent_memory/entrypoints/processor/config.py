"""The processor's JSON configuration document, read with cattrs.

The document's own keys, as its design shows them::

    {"extraction": {"llm_assisted": {"enabled", "model", "trigger_iteration_interval",
                                     "trigger_context_threshold", "max_tokens"}},
     "hydration": {"pre_task": {"enabled", "max_context_tokens", "include_decisions",
                                "include_files"},
                   "post_compaction": {"enabled", "reconstruct_from_checkpoint",
                                       "max_recovery_tokens"}},
     "checkpoint": {"enabled", "storage_bucket", "retention_days"},
     "stream_name": "AGENT", "consumer_name_suffix": ""}

plus our optional keys: `nats_url`, `owner`, `create_stream`, `entity_states`
(`enabled`, `bucket`), `processor` (delivery settings) and a few limits inside
the graph sections (see `agent_memory.services.graph_memory`). Every key is
optional. Values are checked strictly (no "5" for 5, no 1 for true) by the
shared validators of `agent_memory.domain.validation`; an unknown key or a bad
value raises one `ConfigurationError` naming every offending path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs
from attrs import field, frozen, validators
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from agent_memory.domain.errors import ConfigurationError, InvalidInput
from agent_memory.domain.validation import require_positive, require_positive_number
from agent_memory.services.graph_memory import (
    CheckpointSettings,
    ExtractionSettings,
    GraphSettings,
    PostCompactionSettings,
    PreTaskSettings,
)

__all__ = [
    "DeliverySettings",
    "EntityStatesSettings",
    "ProcessorConfig",
    "load_config",
    "strict_converter",
    "structure_or_raise",
]

T = TypeVar("T")

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_SUFFIX = re.compile(r"^[A-Za-z0-9_-]*$")
_BOOL = validators.instance_of(bool)

#: Keys of earlier releases, with the name they have now.
_RENAMED = {
    "every_n_iterations": "trigger_iteration_interval",
    "utilization_threshold": "trigger_context_threshold",
    "consumer_suffix": "consumer_name_suffix",
}


def _check(rule: Any) -> Any:
    def check(_inst: object, attr: Any, value: object) -> None:
        rule(value, attr.name)

    return check


def _pattern(pattern: re.Pattern[str], what: str) -> Any:
    def check(_inst: object, attr: Any, value: object) -> None:
        if not isinstance(value, str) or not pattern.match(value):
            raise InvalidInput(attr.name, f"{what} ({pattern.pattern}) is required, got {value!r}")

    return check


def _non_blank(_inst: object, attr: Any, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(attr.name, f"a non-empty string is required, got {value!r}")


_POSITIVE_INT = _check(require_positive)
_POSITIVE = _check(require_positive_number)


@frozen
class DeliverySettings:
    """`processor.*`: how messages are fetched, retried and deduplicated."""

    batch_size: int = field(default=16, validator=_POSITIVE_INT)
    fetch_timeout_seconds: float = field(default=0.5, validator=_POSITIVE)
    ack_wait_seconds: float = field(default=30.0, validator=_POSITIVE)
    max_deliver: int = field(default=5, validator=_POSITIVE_INT)
    retry_delay_seconds: float = field(default=1.0, validator=_POSITIVE)
    drain_timeout_seconds: float = field(default=10.0, validator=_POSITIVE)
    dedup_ttl_days: float = field(default=7.0, validator=_POSITIVE)


@frozen
class EntityStatesSettings:
    """`entity_states.*`: the key-value watch for reactive hydration."""

    enabled: bool = field(default=True, validator=_BOOL)
    bucket: str = field(default="ENTITY_STATES", validator=_pattern(_NAME, "a bucket name"))


@frozen
class ExtractionSection:
    llm_assisted: ExtractionSettings = field(factory=ExtractionSettings)


@frozen
class HydrationSection:
    pre_task: PreTaskSettings = field(factory=PreTaskSettings)
    post_compaction: PostCompactionSettings = field(factory=PostCompactionSettings)


@frozen
class ProcessorConfig:
    """The whole document (see module doc)."""

    extraction: ExtractionSection = field(factory=ExtractionSection)
    hydration: HydrationSection = field(factory=HydrationSection)
    checkpoint: CheckpointSettings = field(factory=CheckpointSettings)
    stream_name: str = field(default="AGENT", validator=_pattern(_NAME, "a stream name"))
    consumer_name_suffix: str = field(default="", validator=_pattern(_SUFFIX, "a suffix"))
    nats_url: str = field(default="nats://127.0.0.1:4222", validator=_non_blank)
    owner: str = field(default="default", validator=_non_blank)
    create_stream: bool = field(default=True, validator=_BOOL)
    entity_states: EntityStatesSettings = field(factory=EntityStatesSettings)
    processor: DeliverySettings = field(factory=DeliverySettings)

    @property
    def graph(self) -> GraphSettings:
        return GraphSettings(
            extraction=self.extraction.llm_assisted,
            pre_task=self.hydration.pre_task,
            post_compaction=self.hydration.post_compaction,
            checkpoint=self.checkpoint,
        )

    @property
    def delivery(self) -> DeliverySettings:
        return self.processor

    def _named(self, base: str) -> str:
        suffix = self.consumer_name_suffix
        return f"{base}-{suffix}" if suffix else base

    @property
    def compaction_consumer(self) -> str:
        return self._named("agent-memory-compaction")

    @property
    def hydrate_consumer(self) -> str:
        return self._named("agent-memory-hydrate")

    @property
    def loop_end_consumer(self) -> str:
        return self._named("agent-memory-loop-end")

    @property
    def dedup_bucket(self) -> str:
        return self._named(f"{self.stream_name}_agent_memory_done")

    @classmethod
    def from_mapping(cls, doc: object, **overrides: Any) -> ProcessorConfig:
        """Read the document; top-level `overrides` that are not None win (e.g.
        `nats_url` from the command line)."""
        config = structure_or_raise(doc, cls, strict_converter(forbid_extra_keys=True))
        given = {k: v for k, v in overrides.items() if v is not None}
        if not given:
            return config
        unknown = sorted(set(given) - {a.name for a in attrs.fields(cls)})
        if unknown:
            raise ConfigurationError(f"unknown override(s) {unknown}")
        try:
            return attrs.evolve(config, **given)
        except (InvalidInput, TypeError) as exc:
            raise ConfigurationError(str(exc)) from None


def load_config(path: str | None, **overrides: Any) -> ProcessorConfig:
    """The document in the JSON file at `path` (the defaults when None)."""
    if path is None:
        return ProcessorConfig.from_mapping({}, **overrides)
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"--config: cannot read {path}: {exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"--config: {path} is not JSON: {exc}") from None
    return ProcessorConfig.from_mapping(doc, **overrides)


# -- strict structuring ----------------------------------------------------------------


def _strict(kind: type[Any], what: str) -> Any:
    def hook(value: object, _type: object) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise InvalidInput("value", f"{what} is required, got {value!r}")
        if kind is float:
            if not isinstance(value, int | float):
                raise InvalidInput("value", f"{what} is required, got {value!r}")
            return float(value)
        if not isinstance(value, kind):
            raise InvalidInput("value", f"{what} is required, got {value!r}")
        return value

    return hook


def strict_converter(*, forbid_extra_keys: bool) -> cattrs.Converter:
    """A converter that accepts JSON values only as they are: an int for `int`,
    a number for `float`, true/false for `bool`, a string for `str`."""
    converter = cattrs.Converter(forbid_extra_keys=forbid_extra_keys, detailed_validation=True)
    converter.register_structure_hook(int, _strict(int, "an integer"))
    converter.register_structure_hook(float, _strict(float, "a number"))
    converter.register_structure_hook(bool, _strict(bool, "true or false"))
    converter.register_structure_hook(str, _strict(str, "a string"))
    return converter


def structure_or_raise(
    doc: object,
    kind: type[T],
    converter: cattrs.Converter,
    *,
    error: type[Exception] = ConfigurationError,
) -> T:
    """`doc` as `kind`; every problem in one `error` naming each path."""
    if not isinstance(doc, Mapping):
        raise error(f"a JSON object is required, got {type(doc).__name__}")
    try:
        return converter.structure(dict(doc), kind)
    except (ClassValidationError, IterableValidationError) as exc:
        raise error("; ".join(_problems(exc, ""))) from None
    except (InvalidInput, TypeError, ValueError) as exc:
        raise error(_problem("", exc)) from None


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _problem(path: str, exc: BaseException) -> str:
    if isinstance(exc, InvalidInput):
        where = path if exc.field == "value" else _join(path, exc.field)
        return f"{where or '(document)'}: {exc.problem}"
    if isinstance(exc, ForbiddenExtraKeysError):
        parts = []
        for key in sorted(exc.extra_fields):
            hint = f" (now {_RENAMED[key]!r})" if key in _RENAMED else ""
            parts.append(f"{_join(path, key)}: unknown key{hint}")
        return "; ".join(parts)
    if isinstance(exc, KeyError | TypeError | AttributeError):
        return f"{path or '(document)'}: an object is required"
    return f"{path or '(document)'}: {exc}"


def _problems(exc: BaseException, path: str) -> Iterator[str]:
    if isinstance(exc, ClassValidationError | IterableValidationError):
        with_notes, without = exc.group_exceptions()
        for inner, note in with_notes:
            name = getattr(note, "name", None)
            index = getattr(note, "index", None)
            step = str(name) if name is not None else f"[{index}]"
            yield from _problems(inner, _join(path, step))
        for inner in without:
            yield from _problems(inner, path)
    else:
        yield _problem(path, exc)

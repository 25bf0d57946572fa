"""Audit entries: the compliance record of a destructive or bulk operation.

An entry says when, which operation, which tenant and data subject, how much
the receipt counted, and who asked (an API key id, or "library") — and nothing
else. It holds ids and counts only, never user content, so it can outlive the
forget it records: no field is free text, each string is an id (bounded, no
NUL) and each count a non-negative int under a fixed-form name.

The listing order (newest `at` first, then `id` descending by code point) and
the cursor format are defined here, once, so every `AuditLog` backend pages the
same way: a cursor is the opaque, URL-safe encoding of the last entry's
`(at, id)`, and the next page holds the entries strictly after it in that
order (keyset pagination, so entries appended while a reader pages are never
duplicated, and entries that existed when paging began are never skipped).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from attrs import field, frozen

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.time import from_micros, to_micros
from agent_memory.domain.validation import MAX_ID_BYTES, require_id, require_limit, require_utc

__all__ = [
    "AUDIT_OPERATIONS",
    "LIBRARY_CALLER",
    "MAX_COUNTS",
    "AuditEntry",
    "AuditPage",
    "audit_sort_key",
    "check_audit_entry",
    "check_audit_list_args",
    "decode_audit_cursor",
    "encode_audit_cursor",
    "micros_key",
]

#: The operations that write an audit entry.
AUDIT_OPERATIONS = frozenset(
    {
        "forget_user",
        "forget_namespace",
        "forget_fact",
        "delete_scope",
        "import_replace",
        "reembed_switch",
        "migrate",
    }
)
#: The caller of an operation made through the library itself (no API key).
LIBRARY_CALLER = "library"
#: At most this many counts per entry.
MAX_COUNTS = 32
_COUNT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
# Entries are dated from 1970 to 9999: micros then fit 18 zero-padded digits,
# so a string key sorts like the instant on every backend.
_MICROS_WIDTH = 18


def _check_operation(_: object, __: object, value: str) -> None:
    if value not in AUDIT_OPERATIONS:
        raise InvalidInput(
            "operation", f"one of {sorted(AUDIT_OPERATIONS)} is required, got {value!r}"
        )


def _check_id(name: str) -> Callable[[object, object, str], None]:
    def check(_: object, __: object, value: str) -> None:
        require_id(value, name)

    return check


def _check_tenant(_: object, __: object, value: str) -> None:
    if value == "":
        return  # the library's default tenant
    require_id(value, "tenant")


def _check_subject(_: object, __: object, value: str | None) -> None:
    if value is not None:
        require_id(value, "subject")


def _utc(value: object) -> datetime:
    moment = require_utc(value, "at")
    if moment.year < 1970:
        raise InvalidInput("at", f"an instant from 1970 on is required, got {value!r}")
    return moment


def _counts(value: object) -> Mapping[str, int]:
    if not isinstance(value, Mapping):
        raise InvalidInput("counts", f"a mapping of names to counts is required, got {value!r}")
    if len(value) > MAX_COUNTS:
        raise InvalidInput("counts", f"at most {MAX_COUNTS} counts, got {len(value)}")
    out: dict[str, int] = {}
    for name in sorted(value, key=str):
        count = value[name]
        if not isinstance(name, str) or not _COUNT_NAME.match(name):
            raise InvalidInput(
                "counts", f"a count name is 1-64 of [a-z0-9_] starting with a letter, got {name!r}"
            )
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise InvalidInput("counts", f"{name}: a non-negative int is required, got {count!r}")
        out[name] = count
    return MappingProxyType(out)


@frozen
class AuditEntry:
    """One audit entry. Ids and counts only: no user content."""

    id: str = field(validator=_check_id("id"))
    at: datetime = field(converter=_utc)
    operation: str = field(validator=_check_operation)
    tenant: str = field(validator=_check_tenant)
    """The tenant the operation ran in; "" for the library's own (no tenancy)."""
    subject: str | None = field(validator=_check_subject)
    """The data subject's user id (the tenant's own, unprefixed), None when the
    operation concerns no single subject (an import, a re-embed, a migration)."""
    counts: Mapping[str, int] = field(converter=_counts, hash=False)
    """What the receipt counted, by name (e.g. facts=3, events=12)."""
    caller: str = field(validator=_check_id("caller"))
    """The API key id that asked, or "library"."""

    def as_json(self) -> dict[str, Any]:
        """The wire form (also the HTTP service's and `agent-memory audit --json`'s)."""
        return {
            "id": self.id,
            "at": self.at.isoformat().replace("+00:00", "Z"),
            "operation": self.operation,
            "tenant": self.tenant,
            "subject": self.subject,
            "counts": dict(self.counts),
            "caller": self.caller,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AuditEntry:
        """The inverse of `as_json` (what backends that store JSON read back)."""
        at = data["at"]
        if isinstance(at, str):
            at = datetime.fromisoformat(at.replace("Z", "+00:00"))
        return cls(
            id=data["id"],
            at=at,
            operation=data["operation"],
            tenant=data["tenant"],
            subject=data["subject"],
            counts=data["counts"],
            caller=data["caller"],
        )


@frozen
class AuditPage:
    """One page of `AuditLog.list`; `next_cursor` is None on the last page."""

    entries: tuple[AuditEntry, ...]
    next_cursor: str | None


def micros_key(moment: datetime) -> str:
    """`moment` as zero-padded microseconds: sorts as the instant does."""
    return str(to_micros(moment)).rjust(_MICROS_WIDTH, "0")


def audit_sort_key(entry: AuditEntry) -> tuple[int, str]:
    """Sort with `reverse=True` for the listing order (newest first, then id desc)."""
    return (to_micros(entry.at), entry.id)


def encode_audit_cursor(entry: AuditEntry) -> str:
    """The cursor after `entry`."""
    raw = json.dumps([to_micros(entry.at), entry.id], ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_audit_cursor(cursor: object) -> tuple[datetime, str]:
    """The `(at, id)` a cursor names; `InvalidInput` naming `cursor` otherwise."""
    if not isinstance(cursor, str) or not cursor or len(cursor) > 4 * MAX_ID_BYTES:
        raise InvalidInput("cursor", f"a cursor returned by list is required, got {cursor!r}")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        micros, id_ = json.loads(raw.decode())
        if not isinstance(micros, int) or isinstance(micros, bool) or micros < 0:
            raise ValueError(micros)
        require_id(id_, "cursor")
        return from_micros(micros).astimezone(UTC), id_
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, OverflowError):
        raise InvalidInput("cursor", f"not a cursor returned by list: {cursor[:80]!r}") from None


def check_audit_entry(entry: object) -> AuditEntry:
    """`entry` when it is an `AuditEntry`, else `InvalidInput` naming `entry`."""
    if not isinstance(entry, AuditEntry):
        raise InvalidInput("entry", f"an AuditEntry is required, got {type(entry).__name__}")
    return entry


def check_audit_list_args(
    tenant: object, since: object, limit: object, cursor: object
) -> tuple[str | None, datetime | None, int, tuple[datetime, str] | None]:
    """The checked arguments of `AuditLog.list`: tenant (None: every tenant; ""
    the library's own), since (aware), limit in [1, MAX_LIMIT], the cursor's
    `(at, id)`. Bad input raises `InvalidInput` naming the argument."""
    if tenant is not None and tenant != "":
        require_id(tenant, "tenant")
    moment = None if since is None else require_utc(since, "since")
    count = require_limit(limit, "limit")
    after = None if cursor is None else decode_audit_cursor(cursor)
    return tenant, moment, count, after  # type: ignore[return-value]

"""Tenant scoping: every owner and domain a tenant addresses is stored under a
prefix that only the server chooses.

    user id  u  of tenant T  ->  owner   "t/T/u/" + u
    domain   d  of tenant T  ->  domain  "t/T/d/" + d

Tenant names come from the key configuration and match `TENANT_PATTERN` (no
`/`), so the prefix ends at the third `/` of a stored scope whatever the
caller's id holds: the set of scopes of two tenants (and of users and domains
of one tenant) are disjoint, and no id, however adversarial (`/`, `t/other/u/`,
`: * { } | @`, unicode), can name another tenant's scope. Callers never see the
prefix: responses carry their own ids back.

A key bound to one user (`"user"` in the key file) sees its tenant through a
`Tenant` with that `user`: `owner` then admits only that one user id and
refuses any other with `PermissionDenied` naming the field, and `user_of`
shows no other user's id. Domains stay the tenant's: agent memory is shared by
the tenant's agents whichever user they serve.
"""

from __future__ import annotations

from attrs import field, frozen

from agent_memory.domain.errors import ConfigurationError, InvalidInput, PermissionDenied
from agent_memory.domain.event_scopes import TENANT_PATTERN
from agent_memory.domain.validation import MAX_ID_BYTES, require_id, require_scope

__all__ = ["TENANT_PATTERN", "Tenant"]


def _check_tenant(_inst: object, _attr: object, value: object) -> None:
    if not isinstance(value, str) or TENANT_PATTERN.fullmatch(value) is None:
        raise ConfigurationError(
            f"tenant {value!r}: 1-63 characters of a-z 0-9 _ . - starting with a letter or digit"
        )


def _prefixed(prefix: str, value: str, field: str) -> str:
    """`prefix + value`, unless the stored scope would be over the library's
    MAX_ID_BYTES: then the caller's own argument is named (not the stored
    `owner`/`scope` the caller never sees)."""
    if (len(prefix) + len(value)) * 4 > MAX_ID_BYTES:
        room = MAX_ID_BYTES - len(prefix.encode("utf-8"))
        if len(value.encode("utf-8")) > room:
            raise InvalidInput(
                field,
                f"at most {room} bytes of UTF-8 are allowed (this tenant's stored prefix "
                f"takes the rest of {MAX_ID_BYTES})",
            )
    return prefix + value


@frozen
class Tenant:
    """One tenant's mapping between caller ids and stored scopes."""

    name: str = field(validator=_check_tenant)  # type: ignore[assignment]
    user: str | None = None
    """The one user id a user-bound key may name (None: any user of the tenant)."""

    @property
    def _users(self) -> str:
        return f"t/{self.name}/u/"

    @property
    def _domains(self) -> str:
        return f"t/{self.name}/d/"

    def owner(self, user_id: object) -> str:
        """The stored owner of a caller's user id (validated: non-blank, no NUL;
        for a user-bound key, the bound user id only)."""
        checked = require_id(user_id, "user_id")
        if self.user is not None and checked != self.user:
            raise PermissionDenied("this API key is bound to another user", "user_id")
        return _prefixed(self._users, checked, "user_id")

    def domain(self, domain: object) -> str:
        """The stored domain of a caller's domain (validated: non-blank, no NUL)."""
        return _prefixed(self._domains, require_scope(domain, "domain"), "domain")

    def user_of(self, owner: str | None) -> str | None:
        """The caller's user id of a stored owner; None when it is not this tenant's."""
        if owner is not None and owner.startswith(self._users):
            user = owner[len(self._users) :]
            return user if self.user is None or user == self.user else None
        return None

    def domain_of(self, stored: str) -> str | None:
        """The caller's domain of a stored domain; None when it is not this tenant's."""
        if stored.startswith(self._domains):
            return stored[len(self._domains) :]
        return None

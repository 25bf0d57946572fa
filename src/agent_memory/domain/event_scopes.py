"""Which global events a domain's window shows.

The `EventLog` port shows an `is_global` event in every domain's window. A
deployment that serves tenants (`agent-memory serve`, the MCP server with
keys) stores each tenant's domains as `t/<tenant>/d/<domain>` in one event
log, so "every domain" would be every tenant's: a global event written in one
tenant's domain (or by a library user, in a domain of no tenant) would reach
the planning views, digests and knowledge of every other tenant.

So the services read windows through this rule: a global event is shown in
the domains of its own family only — the domains of one tenant, or the
domains of no tenant (the library's own, where a global event still reaches
every one of them). A domain's own events are always shown.
"""

from __future__ import annotations

import re

from agent_memory.domain.records import Event

__all__ = ["TENANT_PATTERN", "domain_family", "shows_event"]

#: A tenant name: 1-63 characters of a-z 0-9 _ . - starting with a letter or digit.
TENANT_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
_TENANT_DOMAIN = re.compile(r"t/(" + TENANT_PATTERN.pattern + r")/d/")


def domain_family(domain: str) -> str | None:
    """The tenant whose stored domain `domain` is (`t/<tenant>/d/...`), None
    for a domain of no tenant."""
    found = _TENANT_DOMAIN.match(domain)
    return found.group(1) if found is not None else None


def shows_event(domain: str, event: Event) -> bool:
    """Whether `domain`'s window shows `event`: its own events, and the global
    events of its family."""
    if event.domain == domain:
        return True
    return event.is_global and domain_family(event.domain) == domain_family(domain)

"""The versioned key schema: `<prefix>:v1:<deployment>:...`, one place.

User values (owners, ids, domains, scopes, keys) never appear raw in a key
name: they are hashed to a fixed-width hex digest, so no character (`:`, `*`,
`{`, `}`, spaces, non-ASCII) can collide two keys, widen a pattern or open a
cluster hash tag. The digest of the scope is the hash tag (`{...}`), so every
multi-key operation of one scope (a batch add for one owner, a lease acquire
with its fencing counter, an event append for one domain) touches one slot.
docs/redis.md explains each key and each tag.
"""

from __future__ import annotations

import hashlib
import re

from agent_memory.domain.errors import InvalidInput

__all__ = ["SCHEMA_VERSION", "KeySchema", "digest"]

SCHEMA_VERSION = "v1"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def digest(*parts: str) -> str:
    """A 128-bit hex digest of one or more user values (unambiguous joining)."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        raw = part.encode("utf-8", "surrogatepass")
        h.update(len(raw).to_bytes(8, "big"))
        h.update(raw)
    return h.hexdigest()


def _name(value: str, field: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise InvalidInput(field, f"1-64 characters of [A-Za-z0-9_.-] are required, got {value!r}")
    return value


class KeySchema:
    """Key names for one `(prefix, deployment)`."""

    def __init__(self, prefix: str = "agent_memory", deployment: str = "default") -> None:
        self.prefix = _name(prefix, "prefix")
        self.deployment = _name(deployment, "deployment")
        self.base = f"{self.prefix}:{SCHEMA_VERSION}:{self.deployment}"

    # -- MemoryStore: one hash per record, tagged by owner ------------------
    def ms_index(self, space_identity: str) -> str:
        return f"{self.base}:ms:{space_identity}:idx"

    def ms_record_prefix(self, space_identity: str) -> str:
        return f"{self.base}:ms:{space_identity}:r:"

    def ms_record(self, space_identity: str, owner: str, id: str) -> str:
        return f"{self.ms_record_prefix(space_identity)}{{{digest(owner)}}}:{digest(id)}"

    def ms_stats(self, space_identity: str, owner: str) -> str:
        """The owner's keyword statistics (record count and total length per
        namespace and kind), in the slot of the owner's records."""
        return f"{self.ms_stats_prefix(space_identity)}{{{digest(owner)}}}"

    def ms_stats_prefix(self, space_identity: str) -> str:
        return f"{self.base}:ms:{space_identity}:s:"

    def ms_lexical(self, space_identity: str) -> str:
        """The `domain.lexical.LEXICAL_VERSION` the space's stored terms follow, or
        `rebuilding:<version>` while they are being re-derived for that version."""
        return f"{self.base}:ms:{space_identity}:lex"

    # -- EventLog: per-domain sets and payloads tagged by domain ------------
    def ev_payloads(self, domain: str) -> str:
        return f"{self.base}:ev:{{{digest(domain)}}}:p"

    def ev_domain(self, domain: str) -> str:
        return f"{self.base}:ev:{{{digest(domain)}}}:t"

    def ev_domain_entity(self, domain: str, etype: str, eid: str) -> str:
        return f"{self.base}:ev:{{{digest(domain)}}}:e:{digest(etype, eid)}"

    def ev_global(self) -> str:
        return f"{self.base}:ev:{{g}}:t"

    def ev_global_entity(self, etype: str, eid: str) -> str:
        return f"{self.base}:ev:{{g}}:e:{digest(etype, eid)}"

    def ev_domains(self) -> str:
        return f"{self.base}:ev:domains"

    def ev_domain_user(self, domain: str, user_id: str) -> str:
        return f"{self.base}:ev:{{{digest(domain)}}}:u:{digest(user_id)}"

    def ev_user(self, user_id: str) -> str:
        """The user index of earlier releases (read and emptied by erasure only)."""
        return f"{self.base}:ev:u:{{{digest(user_id)}}}"

    # -- LeaseStore: lease hash, fencing counter, key index tagged by scope -
    def lease(self, scope: str, key: str) -> str:
        return f"{self.base}:ls:{{{digest(scope)}}}:l:{digest(key)}"

    def lease_counter(self, scope: str, key: str) -> str:
        return f"{self.base}:ls:{{{digest(scope)}}}:c:{digest(key)}"

    def lease_index(self, scope: str) -> str:
        return f"{self.base}:ls:{{{digest(scope)}}}:keys"

    # -- Cache: value strings with PX expiry and a key index, tagged by scope
    def cache_value(self, scope: str, key: str) -> str:
        return f"{self.base}:ca:{{{digest(scope)}}}:v:{digest(key)}"

    def cache_index(self, scope: str) -> str:
        return f"{self.base}:ca:{{{digest(scope)}}}:keys"


def lex_prefix_range(prefix: str) -> tuple[bytes, bytes]:
    """ZRANGEBYLEX bounds for members starting with `prefix` (UTF-8 has no 0xFF byte)."""
    if not prefix:
        return b"-", b"+"
    raw = prefix.encode("utf-8", "surrogatepass")
    return b"[" + raw, b"(" + raw + b"\xff"

"""How the LangGraph store (`agent_memory.entrypoints.langgraph`) lays out its
records in a `MemoryStore`, for the services that must reach them without
importing LangGraph: a user's forget deletes the registry entries of the
namespaces whose first label is the user (their items live under that owner,
and the forget's `delete_scope` takes those); a re-embed, which embeds each
record's stored content, checks that vector records hold their text.

One registry record per namespace, under owner `REGISTRY_OWNER`, kind
`REGISTRY_KIND`, record namespace `registry_shard(first label)`. One vector
record (kind `VECTOR_KIND`) per indexed text of an item, its content that
text and its attributes `{"langgraph": {"key", "path", "embeds": "content"}}`;
one written before vector records held their text (content: the path, no
`embeds`) is `holds_path_only`.

Every name the layout derives from labels (an owner, a record namespace, a
registry shard) fits the stores' MAX_ID_BYTES: one that would not is replaced
by `bounded_name`, a hash under the reserved prefix, so labels of any length
map to storable names (a name that fits is kept as it is)."""

from __future__ import annotations

import json

from agent_memory.domain.bounded_names import fit_or_digest
from agent_memory.domain.records import MemoryRecord

__all__ = [
    "EMBEDS_CONTENT",
    "LANGGRAPH_PREFIX",
    "REGISTRY_KIND",
    "REGISTRY_OWNER",
    "VECTOR_KIND",
    "bounded_name",
    "compact_json",
    "holds_path_only",
    "owner_of",
    "registry_shard",
]

VECTOR_KIND = "langgraph.vector"
REGISTRY_KIND = "langgraph.namespace"
REGISTRY_OWNER = "langgraph"
LANGGRAPH_PREFIX = "langgraph:"
#: `attributes["langgraph"]["embeds"]` of a vector record whose content is its text
EMBEDS_CONTENT = "content"


def compact_json(value: object) -> str:
    """JSON without spaces or ASCII escapes (the layout's one encoding)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def bounded_name(name: str) -> str:
    """`name` when it fits MAX_ID_BYTES of UTF-8, else `langgraph:sha256:<hex>`
    of it. Every name the layout derives starts with something else
    (`langgraph:"`, `langgraph:[`, `langgraph:registry:`, or not `langgraph`),
    so a hashed name never equals a kept one."""
    return fit_or_digest(name, LANGGRAPH_PREFIX + "sha256:")


def owner_of(namespace: tuple[str, ...]) -> str:
    """The record owner of a LangGraph namespace: its first label, escaped when
    blank or starting with `langgraph` (so no label collides with the registry),
    hashed when too long for an owner (`bounded_name`)."""
    first = namespace[0]
    if first.strip() and not first.startswith(REGISTRY_OWNER):
        return bounded_name(first)
    return bounded_name(LANGGRAPH_PREFIX + compact_json(first))


def registry_shard(first: str) -> str:
    """The record namespace of the registry entries of the namespaces whose
    first label is `first` (hashed when too long: `bounded_name`)."""
    return bounded_name(LANGGRAPH_PREFIX + "registry:" + compact_json(first))


def holds_path_only(record: MemoryRecord) -> bool:
    """Whether `record` is a LangGraph vector record written before vector
    records held their text: its content is the path, so embedding its content
    (a re-embed) would not rebuild its vector. `AgentMemoryStore.areindex()`
    rewrites such records."""
    if record.kind != VECTOR_KIND:
        return False
    meta = record.attributes.get("langgraph")
    return not (isinstance(meta, dict) and meta.get("embeds") == EMBEDS_CONTENT)

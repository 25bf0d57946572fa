"""Where the LangGraph store (`agent_memory.entrypoints.langgraph`) keeps its
namespace registry in a `MemoryStore`, for the services that must reach it
without importing LangGraph: a user's forget deletes the registry entries of
the namespaces whose first label is the user (their items live under that
owner, and the forget's `delete_scope` takes those).

One registry record per namespace, under owner `REGISTRY_OWNER`, kind
`REGISTRY_KIND`, record namespace `registry_shard(first label)`."""

from __future__ import annotations

import json

__all__ = [
    "LANGGRAPH_PREFIX",
    "REGISTRY_KIND",
    "REGISTRY_OWNER",
    "compact_json",
    "owner_of",
    "registry_shard",
]

REGISTRY_KIND = "langgraph.namespace"
REGISTRY_OWNER = "langgraph"
LANGGRAPH_PREFIX = "langgraph:"


def compact_json(value: object) -> str:
    """JSON without spaces or ASCII escapes (the layout's one encoding)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def owner_of(namespace: tuple[str, ...]) -> str:
    """The record owner of a LangGraph namespace: its first label, escaped when
    blank or starting with `langgraph` (so no label collides with the registry)."""
    first = namespace[0]
    if first.strip() and not first.startswith(REGISTRY_OWNER):
        return first
    return LANGGRAPH_PREFIX + compact_json(first)


def registry_shard(first: str) -> str:
    """The record namespace of the registry entries of the namespaces whose
    first label is `first`."""
    return LANGGRAPH_PREFIX + "registry:" + compact_json(first)

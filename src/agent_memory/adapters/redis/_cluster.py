"""Redis Cluster routing for the adapters: which primary serves a key, the name of
the Search index on that primary, and the topology `doctor` shows.

The Search module of a cluster node indexes only that node's keys and (without
a coordinator) routes `FT.*` commands by the hash slot of the index *name*. So
each primary gets its own index, named `<index>:{<tag>}` with a tag whose slot
that primary serves, and an owner's query goes to the index on the primary of
the owner's slot. Both are derived from the client's current slot map, so they
follow a failover (the promoted replica serves the same slots: the same name)
or a resharding (a new name where the tag's slot moved; the index is then
created there on first use).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

__all__ = ["IndexNames", "primaries", "primary_for", "topology"]

_TAG_SEARCH = 1 << 20  # tags tried before giving up (a node serves >= 1 slot)


async def primary_for(client: RedisCluster, key: str) -> ClusterNode:
    """The primary serving `key`'s slot (after re-reading the slot map when a
    connection error asked for it)."""
    await client.initialize()
    node: ClusterNode | None = client.get_node_from_key(key)
    assert node is not None  # get_node_from_key raises for an uncovered slot
    return node


async def primaries(client: RedisCluster) -> list[ClusterNode]:
    await client.initialize()
    return list(client.get_primaries())


def _serves(client: RedisCluster, node: ClusterNode, slot: int) -> bool:
    holders = client.nodes_manager.slots_cache.get(slot)
    return holders is not None and bool(holders) and holders[0].name == node.name


class IndexNames:
    """Per primary, the index name whose tag's slot it serves: the smallest
    decimal tag (`0`, `1`, ...) in one of its slots, cached and re-checked on
    every use against the current slot map (one dict lookup)."""

    def __init__(self, base: str) -> None:
        self._base = base
        self._tags: dict[str, int] = {}

    def __call__(self, client: RedisCluster, node: ClusterNode) -> str:
        tag = self._tags.get(node.name)
        if tag is None or not _serves(client, node, key_slot(str(tag).encode())):
            for tag in range(_TAG_SEARCH):
                if _serves(client, node, key_slot(str(tag).encode())):
                    break
            else:  # pragma: no cover - a primary without slots serves no owner
                raise LookupError(f"{node.name} serves no hash slot")
            self._tags[node.name] = tag
        return f"{self._base}:{{{tag}}}"


def _ranges(slots: list[int]) -> str:
    out: list[str] = []
    start = prev = None
    for s in sorted(slots):
        if start is None:
            start = prev = s
        elif s == prev + 1:  # type: ignore[operator]
            prev = s
        else:
            out.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = s
    if start is not None:
        out.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(out)


async def topology(client: RedisCluster) -> dict[str, str]:
    """Primaries, replicas, slots covered and the search module per node."""
    await client.initialize()
    by_primary: dict[str, list[int]] = {}
    replicas: dict[str, set[str]] = {}
    for slot, holders in client.nodes_manager.slots_cache.items():
        if not holders:
            continue
        by_primary.setdefault(holders[0].name, []).append(slot)
        replicas.setdefault(holders[0].name, set()).update(h.name for h in holders[1:])
    covered = sum(len(s) for s in by_primary.values())
    out = {
        "cluster": f"{len(by_primary)} primaries, "
        f"{sum(len(r) for r in replicas.values())} replicas, "
        f"{covered}/16384 slots covered" + ("" if covered == 16384 else " (INCOMPLETE)"),
    }
    for name in sorted(by_primary):
        out[f"cluster primary {name}"] = f"slots {_ranges(by_primary[name])}; replicas: " + (
            ", ".join(sorted(replicas[name])) or "none"
        )
    for node in sorted(client.get_nodes(), key=lambda n: n.name):
        out[f"cluster node {node.name}"] = f"{node.server_type}, search {await _search(node)}"
    return out


async def _search(node: ClusterNode) -> str:
    try:
        modules: Any = await node.execute_command("MODULE", "LIST")
    except Exception as exc:  # reported, never raised
        return f"unknown ({type(exc).__name__})"
    names = set()
    for entry in modules or []:
        fields = dict(zip(entry[::2], entry[1::2], strict=False))
        name = fields.get(b"name", b"")
        names.add(name.decode().lower() if isinstance(name, bytes) else str(name).lower())
    return "loaded" if names & {"search", "ft"} else "MISSING"

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

While a slot is being migrated (`CLUSTER SETSLOT ... MIGRATING/IMPORTING`, then
`MIGRATE` key by key), its keys are split between the source's and the target's
index: `slot_migration` reads that state from the source (`CLUSTER NODES`, only
when a query saw the slot move) and `run_on` sends a command to one node itself,
after `ASKING` on the same connection for the target.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.crc import key_slot

from agent_memory.domain.errors import BackendUnavailable

__all__ = [
    "IndexNames",
    "SlotMigrating",
    "SlotMigration",
    "keys_migrated_in",
    "migrating_slots",
    "primaries",
    "primary_for",
    "run_on",
    "slot_layout",
    "slot_migration",
    "topology",
]

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


@dataclass(frozen=True)
class SlotMigration:
    """A hash slot being migrated from `source` (which still serves it) to `target`."""

    slot: int
    source: ClusterNode
    target: ClusterNode

    def same(self, other: SlotMigration | None) -> bool:
        return other is not None and (other.slot, other.source.name, other.target.name) == (
            self.slot,
            self.source.name,
            self.target.name,
        )


class SlotMigrating(BackendUnavailable):
    """An operation on a hash slot being migrated between primaries that cannot
    be served completely until the migration ends (retryable)."""

    def __init__(self, backend: str, slot: int, where: str, what: str) -> None:
        super().__init__(
            backend,
            f"{what}: hash slot {slot} is being migrated {where} (a resharding); "
            "its keys are split between two primaries, so this cannot run now; "
            "retry when the migration ends",
        )
        self.slot = slot


async def run_on(node: ClusterNode, *args: Any, asking: bool = False) -> Any:
    """One command on `node` itself (no redirection followed), after `ASKING` on
    the same connection when `asking` (a node importing a slot serves its keys
    only then); an error reply is raised."""
    commands = [PipelineCommand(0, "ASKING")] if asking else []
    commands.append(PipelineCommand(len(commands), *args))
    await node.execute_pipeline(commands)
    for command in commands:
        if isinstance(command.result, BaseException):
            raise command.result
    return commands[-1].result


def _text(reply: Any) -> str:
    return reply.decode() if isinstance(reply, bytes) else str(reply)


async def slot_migration(client: RedisCluster, slot: int) -> SlotMigration | None:
    """The migration of `slot` its primary reports (its own line of `CLUSTER NODES`
    holds `[slot->-<target id>]`), or None when it serves the slot without one.
    A primary that no longer serves the slot (the client's slot map is stale, a
    migration ended) makes the client re-read the map, then ask the new primary."""
    for _ in range(3):
        await client.initialize()
        node = client.nodes_manager.get_node_from_slot(slot)
        reply = _text(await run_on(node, "CLUSTER", "NODES"))
        lines = [line.split(" ") for line in reply.splitlines()]
        mine = next((f for f in lines if len(f) > 2 and "myself" in f[2].split(",")), None)
        if mine is None:  # pragma: no cover - every node lists itself
            break
        target_id = None
        serves = False
        for item in mine[8:]:
            if item.startswith("[") and "->-" in item:
                at, _, dest = item[1:-1].partition("->-")
                if int(at) == slot:
                    target_id = dest
            elif not item.startswith("["):
                lo, _, hi = item.partition("-")
                serves = serves or int(lo) <= slot <= int(hi or lo)
        if target_id is not None:
            peer = next((f for f in lines if f[0] == target_id), None)
            if peer is None:  # pragma: no cover - the target is a known node
                break
            host, _, port = peer[1].split("@")[0].rpartition(":")
            host, port_n = client.nodes_manager.remap_host_port(host or node.host, int(port))
            target = client.get_node(host=host, port=port_n)
            if target is None:  # a node the client has not seen yet
                await client.nodes_manager.initialize()
                target = client.get_node(host=host, port=port_n)
            if target is None:  # pragma: no cover
                break
            return SlotMigration(slot, node, target)
        if serves:
            return None
        await client.nodes_manager.initialize()  # stale map: re-read, ask again
    raise BackendUnavailable(
        "redis", f"hash slot {slot}: no primary reports serving it (a resharding under way?)"
    )


async def migrating_slots(node: ClusterNode) -> list[int]:
    """The slots `node` reports migrating or importing (`[slot->-id]`, `[slot-<-id]`
    in its own line of `CLUSTER NODES`)."""
    for line in _text(await run_on(node, "CLUSTER", "NODES")).splitlines():
        fields = line.split(" ")
        if len(fields) > 2 and "myself" in fields[2].split(","):
            return [int(f[1:].split("-", 1)[0]) for f in fields[8:] if f.startswith("[")]
    return []  # pragma: no cover - every node lists itself


@dataclass(frozen=True)
class Layout:
    """Which slots each primary serves, migrates and imports: per primary (by
    name) the slot fields of its own line of `CLUSTER NODES` (ranges,
    `[slot->-id]`, `[slot-<-id]`), and each primary's reply, whole."""

    slots: dict[str, tuple[str, ...]]
    replies: dict[str, tuple[ClusterNode, list[list[str]]]]


async def slot_layout(client: RedisCluster) -> Layout:
    """The `Layout`, read from every primary at once. Two equal `slots` read
    around an operation mean no slot changed hands and no migration started or
    ended in between (a slot's owner changes only by `SETSLOT NODE`, which
    ends its migration)."""
    await client.initialize()
    nodes = list(client.get_primaries())
    replies = await asyncio.gather(*(run_on(n, "CLUSTER", "NODES") for n in nodes))
    out = Layout({}, {})
    for node, reply in zip(nodes, replies, strict=True):
        lines = [line.split(" ") for line in _text(reply).splitlines()]
        out.replies[node.name] = (node, lines)
        for fields in lines:
            if len(fields) > 2 and "myself" in fields[2].split(","):
                out.slots[node.name] = tuple(fields[8:])
    return out


async def keys_migrated_in(client: RedisCluster, layout: Layout) -> list[Any]:
    """The keys on the target of every migration in `layout` of its slot
    (`CLUSTER GETKEYSINSLOT`, all of them). A SCAN that asked the target before
    a key moved there and the source after misses that key: read after the
    SCAN, the target has it (a migration moves keys from source to target
    only). A target serving no slot yet (a node being added) is asked too,
    though the SCAN, going to the primaries of the slot map, never asks it."""
    out: list[Any] = []
    for name, fields in layout.slots.items():
        node, lines = layout.replies[name]
        for item in fields:
            if not (item.startswith("[") and "->-" in item):
                continue
            at, _, dest = item[1:-1].partition("->-")
            peer = next((f for f in lines if f[0] == dest), None)
            if peer is None:  # pragma: no cover - the target is a known node
                raise SlotMigrating("redis", int(at), f"to {dest}", "owners")
            host, _, port = peer[1].split("@")[0].rpartition(":")
            host, port_n = client.nodes_manager.remap_host_port(host or node.host, int(port))
            target = client.get_node(host=host, port=port_n)
            own = target is None
            if target is None:
                kwargs: dict[str, Any] = dict(client.get_connection_kwargs())
                target = ClusterNode(host, port_n, "primary", **kwargs)
            try:
                count = int(await run_on(target, "CLUSTER", "COUNTKEYSINSLOT", int(at)))
                if count:
                    out += await run_on(target, "CLUSTER", "GETKEYSINSLOT", int(at), count)
            finally:
                if own:
                    await target.disconnect()
    return out


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

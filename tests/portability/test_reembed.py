"""Re-embedding from the hashing embedder to another space, then reads follow it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import attrs

from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.bootstrap.connect import connect
from agent_memory.domain.records import MemoryRecord
from agent_memory.portability import open_ports, reembed

from .helpers import settings

TEXTS = ["the cat sat on the mat", "kubernetes pod was oom killed", "invoice paid in euros"]


async def test_reembed_switches_reads_and_keeps_old_space_until_drop(tmp_path: Path) -> None:
    s = settings(tmp_path)
    url = f"sqlite:///{tmp_path}/r.db"
    old = HashingEmbedder(256)
    vectors = await old.embed(TEXTS)
    now = datetime.now(UTC)
    async with connect(url, settings=s) as m:
        assert m.embedder.space == old.space
        await m.store.add(
            [
                MemoryRecord(
                    id=f"t{i}",
                    owner="u",
                    namespace="n",
                    kind="fact",
                    content=text,
                    vector=vectors[i],
                    created_at=now,
                    updated_at=now,
                )
                for i, text in enumerate(TEXTS)
            ]
        )
    done = await reembed(url, to_model="hashing", dimension=64, batch_size=2, settings=s)
    assert done.complete
    assert done.embedded == 3
    assert done.already == 0
    again = await reembed(url, to_model="hashing", dimension=64, settings=s)
    assert again.embedded == 0
    assert again.already == 3
    async with connect(url, settings=s) as m:
        assert m.embedder.space == HashingEmbedder(64).space  # reads follow the switch
        (query,) = await m.embedder.embed(["pod oom killed"])
        hits = await m.store.search("u", query, limit=1)
        assert [h.record.id for h in hits] == ["t1"]
        assert hits[0].record.vector.shape == (64,)
    async with open_ports(url, space=old.space, settings=s) as ports:  # old space intact
        assert len((await ports.store.list("u")).records) == 3
    await reembed(url, to_model="hashing", dimension=64, drop_old=True, settings=s)
    async with open_ports(url, space=old.space, settings=s) as ports:
        assert (await ports.store.list("u")).records == ()
    explicit = attrs.evolve(s)
    async with connect(url, settings=explicit, embedder=old) as m:  # an explicit embedder wins
        assert m.embedder.space == old.space

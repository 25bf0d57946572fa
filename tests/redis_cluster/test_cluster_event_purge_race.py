"""Redis Cluster event log: a purge never deletes an event appended, under the same id,
after it read the expired one (another purge or a forget freed the id)."""

from __future__ import annotations

from redis_purge_race import check_purge_races


async def test_same_id_append_between_any_two_purge_steps(
    redis_cluster_url: str, deployment: str
) -> None:
    """When this fails, `purge_expired` deleted by id what it had read: the fresh
    event appended in between (an acknowledged write) lost its payload or its
    index entries, and no later purge or forget can reach what is left."""
    await check_purge_races(redis_cluster_url, deployment)

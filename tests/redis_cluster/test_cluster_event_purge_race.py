"""Redis Cluster event log: a purge never deletes an event appended, under the same id,
after it read the expired one (another purge or a forget freed the id)."""

from __future__ import annotations

from redis_purge_race import check_purge_races, check_relink_forget_race


async def test_same_id_append_between_any_two_purge_steps(
    redis_cluster_url: str, deployment: str
) -> None:
    """When this fails, `purge_expired` deleted by id what it had read: the fresh
    event appended in between (an acknowledged write) lost its payload or its
    index entries, and no later purge or forget can reach what is left."""
    await check_purge_races(redis_cluster_url, deployment)


async def test_a_forget_during_the_purge_relink_leaves_no_reference(
    redis_cluster_url: str, deployment: str
) -> None:
    """When this fails, the purge gave a re-appended global event back its global
    references after a forget had deleted it: a reference to forgotten data that
    no later forget reaches (only retention would)."""
    await check_relink_forget_race(redis_cluster_url, deployment)

"""Redis Cluster event log: an append landing between any two round trips of
`erase_user` never leaves an event its user can no longer find or forget."""

from __future__ import annotations

from redis_erase_race import check_erase_races


async def test_append_between_any_two_erase_steps(redis_cluster_url: str, deployment: str) -> None:
    """When this fails, `erase_user` dropped an index entry it had not read, or
    judged one slot's index while another slot's append was half done: the
    late event is still stored and shown with its user id, but `user_events`
    and every later forget miss it."""
    await check_erase_races(redis_cluster_url, deployment)

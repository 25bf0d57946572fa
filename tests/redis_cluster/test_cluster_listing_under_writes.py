"""Redis Cluster listings that read in several round trips stay exact while
another client writes between two of them (tests/redis_listing_race.py)."""

from __future__ import annotations

import pytest

from redis_listing_race import (
    check_lease_scan_keeps_a_reacquired_lease,
    check_owners_survive_deletes,
)


async def test_lease_scan_keeps_a_lease_acquired_between_its_reads(
    redis_cluster_url: str, deployment: str
) -> None:
    """An expired lease re-acquired between scan's read of its hash and the index
    clean-up stays listed by every later scan (clean-up is one script in the
    scope's slot)."""
    await check_lease_scan_keeps_a_reacquired_lease(redis_cluster_url, deployment)


@pytest.mark.parametrize("owners", [3, 12])
async def test_owners_survive_deletes_between_scan_and_read(
    redis_cluster_url: str, deployment: str, owners: int
) -> None:
    """The record `owners` picked per owner tag is deleted before it is read:
    owners with other records are still listed, an owner with none left is not."""
    await check_owners_survive_deletes(redis_cluster_url, deployment, owners)

"""A knowledge fragment that several requests (several users) derived keeps every
one of them as its provenance, so forgetting any of them deletes it.

Fragment ids are content addresses: a second request storing the same text in
the same domain refreshes the stored record. The refresh replaced the record's
tags with its own (`user_id`, `request_id`; a reflection's `users`), so the
fragment derived from the first user's data survived that user's forget.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.domain.records import MemoryRecord
from agent_memory.domain.time import SystemClock
from agent_memory.services.knowledge import KNOWLEDGE_NAMESPACE, MAX_PROVENANCE, KnowledgeService
from agent_memory.services.user_memory import UserMemory

from .scripted import ScriptedModel

EMB = HashingEmbedder(64)  # the space of the `stores` fixture (conftest)


def _answer(*contents: str) -> str:
    return json.dumps([{"content": c, "importance": 0.5} for c in contents])


async def _knowledge(store: Any, domain: str) -> list[MemoryRecord]:
    return list((await store.list(domain, namespace=KNOWLEDGE_NAMESPACE)).records)


@pytest.mark.parametrize("forgotten", ["alice", "bob"])
async def test_a_fragment_two_users_derived_is_forgotten_with_either(
    stores: Any, forgotten: str
) -> None:
    """When this fails for `alice`, bob's request refreshed alice's fragment and
    replaced her tags with his: her forget left knowledge derived from her data."""
    clock = SystemClock()
    domain = f"travel-{forgotten}"
    knowledge = KnowledgeService(
        store=stores.store,
        embedder=EMB,
        clock=clock,
        llm=ScriptedModel([_answer("Visas take a week"), _answer("Visas take a week")]),
        cache=stores.cache,
    )
    for user, request_id in (("alice", "r-alice"), ("bob", "r-bob")):
        report = await knowledge.extract(
            domain=domain, request_id=request_id, result="done", wait=True, user_id=user
        )
        assert report.ok, report.failures
    (fragment,) = await _knowledge(stores.store, domain)
    assert fragment.attributes["user_id"] == "bob"  # the latest request's tags stay
    users = UserMemory(store=stores.store, embedder=EMB, clock=clock, cache=stores.cache)
    receipt = await users.forget(forgotten)
    assert receipt.complete, receipt.failures
    assert await _knowledge(stores.store, domain) == [], (
        f"the fragment derived from {forgotten}'s request survived {forgotten}'s forget"
    )


async def test_an_unrelated_user_forget_keeps_a_shared_fragment(stores: Any) -> None:
    """The merged provenance names who the fragment came from, no one else."""
    clock = SystemClock()
    knowledge = KnowledgeService(
        store=stores.store,
        embedder=EMB,
        clock=clock,
        llm=ScriptedModel([_answer("Ferries leave at dawn")] * 2),
        cache=stores.cache,
    )
    for user in ("alice", "bob"):
        report = await knowledge.extract(
            domain="ferries", request_id=f"r-{user}", result="done", wait=True, user_id=user
        )
        assert report.ok, report.failures
    users = UserMemory(store=stores.store, embedder=EMB, clock=clock, cache=stores.cache)
    receipt = await users.forget("carol")
    assert receipt.complete, receipt.failures
    assert len(await _knowledge(stores.store, "ferries")) == 1


async def test_a_fragment_of_more_users_than_the_bound_goes_with_any_forget(
    stores: Any,
) -> None:
    """Past `MAX_PROVENANCE` users a fragment is marked as derived from many: the
    list stays bounded, and any user's forget deletes it (knowledge is dropped
    rather than kept from a user who asked to be forgotten)."""
    clock = SystemClock()
    n = MAX_PROVENANCE + 2
    knowledge = KnowledgeService(
        store=stores.store,
        embedder=EMB,
        clock=clock,
        llm=ScriptedModel([_answer("Trains run hourly")] * n),
        cache=stores.cache,
    )
    for i in range(n):
        report = await knowledge.extract(
            domain="trains", request_id=f"r{i}", result="done", wait=True, user_id=f"u{i}"
        )
        assert report.ok, report.failures
    (fragment,) = await _knowledge(stores.store, "trains")
    assert len(fragment.attributes.get("users", [])) <= MAX_PROVENANCE
    assert fragment.attributes.get("provenance") == "many"
    users = UserMemory(store=stores.store, embedder=EMB, clock=clock, cache=stores.cache)
    receipt = await users.forget("u0")
    assert receipt.complete, receipt.failures
    assert await _knowledge(stores.store, "trains") == []

"""Tenant isolation beyond facts, on real servers (SQLite and PostgreSQL):
global events, planning views, digests, event windows, activity and claims,
with tenants whose ids are identical or lookalike. One server per backend for
the module; tenants are unique per module, so a shared database is fine."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_memory.bootstrap import connect
from agent_memory.domain.records import Event
from agent_memory.services.audit import acting_as
from server.live import LiveServer, unique


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def hunt(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('hunt') / 'memory.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    names = {"A": unique("a"), "B": unique("b")}
    server = LiveServer(
        url,
        {"A": {"tenant": names["A"]}, "B": {"tenant": names["B"]}},
        extra_args=("--rate", "5000", "--burst", "5000"),
    ).start()
    try:
        with (
            httpx.Client(base_url=server.base, headers=server.headers("A"), timeout=30) as a,
            httpx.Client(base_url=server.base, headers=server.headers("B"), timeout=30) as b,
        ):
            yield url, names, a, b
    finally:
        server.close()


async def _append(url: str, events: list[Event]) -> None:
    async with connect(url) as memory:
        await memory.events.append(events)


def _global(domain: str, marker: str, n: int, at: datetime) -> Event:
    return Event(
        id=f"{marker}-{n}",
        domain=domain,
        agent="library",
        action=f"did {marker}",
        outcome="ok",
        summary=f"summary {marker}",
        occurred_at=at - timedelta(milliseconds=n),
        recorded_at=at,
        is_global=True,
    )


def test_foreign_global_events_reach_no_tenant_view(hunt: Any) -> None:
    """A global event written (by a library user) in tenant A's domain, or in a
    domain of no tenant, is shown to no view of tenant B: not its planning
    context, not its digest, and it crowds none of B's events off a page of
    `/v1/events` (nor sets `limited`). A's own global event still reaches A's
    other domains."""
    url, names, a, b = hunt
    marker = f"m{uuid.uuid4().hex[:10]}"
    now = datetime.now(UTC)
    foreign = [_global(f"t/{names['A']}/d/x", marker, n, now) for n in range(3)]
    foreign += [_global("ops", marker + "lib", n, now) for n in range(3)]
    asyncio.run(_append(url, foreign))

    domain = f"d-{uuid.uuid4().hex[:10]}"
    start = {"agent": "bee", "domain": domain, "request_id": "r1"}
    assert b.post("/v1/requests", json=start).status_code == 201
    steps = {"request_id": "r1", "steps": [{"action": "own step", "eligible": True}]}
    assert b.post("/v1/requests/steps", json=steps).json()["report"]["ok"]
    context = b.post("/v1/requests/context", json={"request_id": "r1"})
    assert context.status_code == 200, context.text
    assert marker not in context.text
    assert "own step" in context.json()["agent_memory"]
    assert b.post("/v1/requests/finish", json={"request_id": "r1"}).status_code == 200
    digest = b.get("/v1/digest", params={"domain": domain})
    assert digest.status_code == 200, digest.text
    assert marker not in digest.text
    page = b.get("/v1/events", params={"domain": domain, "limit": 1}).json()
    assert [e["action"] for e in page["events"]] == ["own step"]
    assert page["limited"] is False
    empty = b.get("/v1/events", params={"domain": f"{domain}-none", "limit": 1}).json()
    assert empty == {"events": [], "limited": False}

    # tenant A: its own global event reaches its other domains, the library's does not
    mine = a.get("/v1/events", params={"domain": domain, "limit": 10}).json()
    assert [e["id"] for e in mine["events"]] == [f"{marker}-{n}" for n in range(3)]
    assert {e["domain"] for e in mine["events"]} == {"x"}


def test_library_acting_as_tenant_sees_no_foreign_global_events(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The library used directly under `acting_as(key, tenant)` with the
    tenant's stored domains: same rule as the servers."""
    url = f"sqlite:///{tmp_path_factory.mktemp('lib') / 'memory.db'}"
    marker = f"m{uuid.uuid4().hex[:10]}"

    async def run() -> tuple[str, str | None, list[str]]:
        now = datetime.now(UTC)
        async with connect(url) as memory:
            await memory.events.append(
                [_global("t/a/d/x", marker, 0, now), _global("shared", marker, 1, now)]
            )
            with acting_as("key-b", "b"):
                async with memory.agents.request(
                    agent="bee", domain="t/b/d/x", request_id="r"
                ) as req:
                    context = await req.planning_context()
                assert memory.agents.compactor is not None
                digest = await memory.agents.compactor.digest("t/b/d/x")
                window = await memory.agents.events.window(
                    "t/b/d/x", since=now - timedelta(hours=1), limit=5
                )
        return context.text, digest.digest, [e.id for e in window.events]

    text, digest, ids = asyncio.run(run())
    assert marker not in text
    assert marker not in (digest or "")
    assert ids == []


# -- differential: B's answers do not depend on A, whatever the lookalike ids -----

LOOKALIKE = [
    "x", "X", " x", "x ", "x/y", "t/", "u/", "d/", "t/b/d/x", "x:y", "%2F", "x%2Fy",
    '{"a":1}', "[1]", "é", "e\u0301", "ﬁ", "Ⅸ",
]  # fmt: skip
lookalike = st.sampled_from(LOOKALIKE) | st.text(
    alphabet=st.sampled_from(list('xX/:%2F tud{}"é')), min_size=1, max_size=8
).filter(lambda s: s.strip() != "")


def _b_views(b: httpx.Client, domain: str, request_id: str, entity: dict[str, str]) -> Any:
    """What tenant B sees of one request of its own, without times."""
    start = {"agent": "bee", "domain": domain, "request_id": request_id, "entities": [entity]}
    started = b.post("/v1/requests", json=start)
    assert started.status_code == 201, started.text
    claims = started.json()["claims"]
    activity = b.get("/v1/activity", params={"domain": domain}).json()
    context = b.post("/v1/requests/context", json={"request_id": request_id}).json()
    finished = b.post("/v1/requests/finish", json={"request_id": request_id})
    assert finished.status_code == 200, finished.text
    events = b.get("/v1/events", params={"domain": domain, "limit": 5}).json()
    return {
        "claims": claims,
        "signals": [(s["agent"], s["request_id"]) for s in activity["signals"]],
        "held": [(c["holder_agent"], c["holder_request_id"]) for c in activity["claims"]],
        "context_counts": {
            k: v
            for k, v in context["report"]["details"].items()
            if k in ("events", "events_limited", "entity_history", "signals", "claims")
        },
        "events": events,
    }


@settings(max_examples=6, deadline=None)
@given(domain=lookalike, request_id=lookalike, entity_id=lookalike, variant=lookalike)
@example(domain="x", request_id="r", entity_id="e", variant="x")
def test_tenant_b_answers_do_not_depend_on_tenant_a(
    hunt: Any, domain: str, request_id: str, entity_id: str, variant: str
) -> None:
    """Tenant A opens a request with B's very ids (and lookalikes), claims B's
    entity, records steps and a global-looking event of its domain; B's
    claims, activity, planning counts and event window are those of a world
    without A."""
    url, names, a, b = hunt
    tag = uuid.uuid4().hex[:8]
    dom_b = f"{domain}-{tag}"
    entity = {"type": "pod", "id": entity_id}
    alone = _b_views(b, dom_b, request_id, entity)

    for dom_a in (dom_b, variant + dom_b, f"t/{names['B']}/d/{dom_b}"):
        start = {"agent": "ay", "domain": dom_a, "request_id": request_id, "entities": [entity]}
        assert a.post("/v1/requests", json=start).status_code == 201
        steps = {"request_id": request_id, "steps": [{"action": "a step", "eligible": True}]}
        assert a.post("/v1/requests/steps", json=steps).status_code == 200
        now = datetime.now(UTC)
        asyncio.run(_append(url, [_global(f"t/{names['A']}/d/{dom_a}", f"g{tag}", 0, now)]))
        beside = _b_views(b, dom_b, request_id, entity)
        assert a.post("/v1/requests/finish", json={"request_id": request_id}).status_code == 200
        # B's second request records nothing: its events are the first one's
        assert beside == alone, (dom_a, beside, alone)

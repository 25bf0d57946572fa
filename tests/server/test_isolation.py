"""Tenant isolation: no id a caller sends can read, write or delete another
tenant's data. A pure property of the prefixing, then a fuzz against the live
server with adversarial ids (`: * { } | @ - . /`, spaces, unicode, and ids
forged to look like another tenant's stored scope)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_memory.entrypoints.server.tenancy import TENANT_PATTERN, Tenant
from server.live import LiveServer

SPECIAL = list(":*{}|@-./ \\%?#&=\"'t/u/d")
ids = st.text(
    alphabet=st.sampled_from(SPECIAL)
    | st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=24,
).filter(lambda s: s.strip() != "")
tenant_names = st.from_regex(TENANT_PATTERN, fullmatch=True)


@given(t1=tenant_names, t2=tenant_names, x=ids, y=ids)
@example(t1="a", t2="a/u/b", x="b/u/c", y="c")  # not a tenant name: refused below
@example(t1="a", t2="ab", x="x", y="x")
@example(t1="acme", t2="acme", x="t/acme/d/x", y="x")
def test_stored_scopes_never_collide(t1: str, t2: str, x: str, y: str) -> None:
    """Distinct (tenant, kind, id) triples never map to one stored scope, and a
    stored scope decodes only for its own tenant."""
    if TENANT_PATTERN.fullmatch(t2) is None:
        with pytest.raises(ValueError, match="tenant"):
            Tenant(t2)
        return
    a, b = Tenant(t1), Tenant(t2)
    scopes = {
        (t1, "u", x): a.owner(x),
        (t1, "d", x): a.domain(x),
        (t2, "u", y): b.owner(y),
        (t2, "d", y): b.domain(y),
    }
    assert len(set(scopes.values())) == len(scopes), scopes
    if t1 != t2:
        assert b.user_of(a.owner(x)) is None
        assert b.domain_of(a.domain(x)) is None
    assert a.user_of(a.owner(x)) == x
    assert a.domain_of(a.domain(x)) == x
    assert a.user_of(a.domain(x)) is None


@pytest.fixture
def clients(live: LiveServer) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    with (
        httpx.Client(base_url=live.base, headers=live.headers("acme"), timeout=30) as a,
        httpx.Client(base_url=live.base, headers=live.headers("globex"), timeout=30) as b,
    ):
        yield a, b


@settings(max_examples=12)
@given(user=ids, namespace=ids, domain=ids, request_id=ids)
@example(user="u", namespace="n", domain="d", request_id="r")
@example(user="0", namespace="0", domain="A", request_id="0")  # domain named like A's agent
def test_no_cross_tenant_reads_writes_or_deletes(
    clients: tuple[httpx.Client, httpx.Client],
    tenants: dict[str, str],
    user: str,
    namespace: str,
    domain: str,
    request_id: str,
) -> None:
    a, b = clients
    marker = f"marker-{uuid.uuid4().hex}"
    breaks: list[str] = []

    # Tenant A stores a fact, an event (via a request) and holds a claim.
    fact = {"content": f"User likes {marker}", "category": "preference"}
    r = a.post(
        "/v1/users/remember", json={"user_id": user, "namespace": namespace, "facts": [fact]}
    )
    assert r.status_code == 200, r.text
    facts = a.get("/v1/users/facts", params={"user_id": user}).json()["facts"]
    fact_id = next(f["id"] for f in facts if marker in f["content"])
    entity = {"type": "e", "id": user}
    # A's agent name carries the marker, so a marker anywhere in B's views
    # means A's events or activity leaked (a bare "A" could be B's own domain).
    start = {"agent": f"A-{marker}", "domain": domain, "request_id": request_id, "user_id": user,
             "entities": [entity]}  # fmt: skip
    assert a.post("/v1/requests", json=start).status_code == 201
    steps = {"request_id": request_id, "steps": [{"action": f"did {marker}"}]}
    assert a.post("/v1/requests/steps", json=steps).json()["report"]["ok"]

    # Tenant B tries the same ids and ids forged to look like A's stored scopes.
    acme = tenants["acme"]
    for uid in (user, f"t/{acme}/u/{user}", f"{acme}/u/{user}"):
        for dom in (domain, f"t/{acme}/d/{domain}"):
            if marker in b.get("/v1/events", params={"domain": dom}).text:
                breaks.append(f"read events {dom!r}")
        got = b.get("/v1/users/facts", params={"user_id": uid})
        if marker in got.text or got.status_code != 200:
            breaks.append(f"read facts {uid!r}: {got.status_code}")
        got = b.post("/v1/users/search", json={"user_id": uid, "query": marker})
        if marker in got.text:
            breaks.append(f"search {uid!r}")
        got = b.post(
            "/v1/users/profile", json={"user_id": uid, "namespace": namespace, "request": marker}
        )
        if marker in got.text:
            breaks.append(f"profile {uid!r}")
        got = b.post("/v1/users/facts/forget", json={"user_id": uid, "fact_id": fact_id})
        if got.status_code != 404:
            breaks.append(f"forget fact {uid!r}: {got.status_code}")
        b.post("/v1/users/forget", json={"user_id": uid}).raise_for_status()
        b.post("/v1/users/forget", json={"user_id": uid, "namespace": namespace})
    for path, body in (
        ("/v1/requests/steps", {"request_id": request_id, "steps": [{"action": "x"}]}),
        ("/v1/requests/context", {"request_id": request_id}),
        ("/v1/requests/finish", {"request_id": request_id}),
    ):
        got = b.post(path, json=body)
        if got.status_code != 404:
            breaks.append(f"{path} on A's request: {got.status_code}")
    mine = b.post("/v1/requests", json={**start, "agent": "B"})
    if mine.status_code != 201 or mine.json()["claims"][0]["holder_agent"] is not None:
        breaks.append(f"B saw or was blocked by A's claim: {mine.text}")
    ctx = b.post("/v1/requests/context", json={"request_id": request_id})
    if marker in ctx.text or "admitted=0" not in ctx.json()["coordination"]:
        breaks.append("B's planning context shows A's events or activity")
    b.post("/v1/requests/finish", json={"request_id": request_id}).raise_for_status()

    # A's data survived all of it.
    facts = a.get("/v1/users/facts", params={"user_id": user}).json()["facts"]
    if not any(f["id"] == fact_id for f in facts):
        breaks.append("A's fact was deleted")
    events = a.get("/v1/events", params={"domain": domain}).json()["events"]
    if not any(marker in e["action"] for e in events):
        breaks.append("A's event is gone")
    assert a.post("/v1/requests/finish", json={"request_id": request_id}).status_code == 200
    a.post("/v1/users/forget", json={"user_id": user}).raise_for_status()
    assert breaks == []

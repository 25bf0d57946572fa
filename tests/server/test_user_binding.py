"""User-bound keys (`"user"` in the key file) on the HTTP service: the key acts
on its one user; naming any other user id is a 403 `permission-denied`
problem naming `user_id`, and nothing is read, written or deleted for that
other user. Against a real `agent-memory serve` with its own key file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_memory.domain.errors import PermissionDenied
from agent_memory.entrypoints.server.keys import KeyRing, hash_key, new_key
from agent_memory.entrypoints.server.tenancy import Tenant
from server.live import LiveServer, unique

PERMISSION = "tag:agent-memory,2025:problem/permission-denied"


@pytest.fixture(scope="module")
def bound(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = tmp_path_factory.mktemp("bound") / "memory.db"
    tenant = unique("bt-")
    server = LiveServer(
        f"sqlite:///{db}",
        {
            "any": {"tenant": tenant},
            "alice": {"tenant": tenant, "user": "alice"},
            "alice-ro": {"tenant": tenant, "user": "alice", "read_only": True},
        },
        extra_args=("--rate", "2000", "--burst", "2000"),
    ).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def clients(bound: LiveServer) -> Iterator[dict[str, httpx.Client]]:
    made = {
        name: httpx.Client(base_url=bound.base, headers=bound.headers(name), timeout=30)
        for name in ("any", "alice", "alice-ro")
    }
    try:
        yield made
    finally:
        for client in made.values():
            client.close()


def _facts(client: httpx.Client, user: str) -> list[str]:
    r = client.get("/v1/users/facts", params={"user_id": user})
    assert r.status_code == 200, r.text
    return [f["content"] for f in r.json()["facts"]]


def _remember(client: httpx.Client, user: str, content: str) -> httpx.Response:
    fact = {"content": content, "category": "preference"}
    body = {"user_id": user, "namespace": "n", "facts": [fact]}
    return client.post("/v1/users/remember", json=body)


def _refused(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 403, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert body["type"] == PERMISSION, body
    assert body["field"] == "user_id", body
    assert "Traceback" not in r.text
    return body


def test_a_bound_key_acts_on_its_user(clients: dict[str, httpx.Client]) -> None:
    alice, anyone = clients["alice"], clients["any"]
    marker = unique("own-")
    assert _remember(alice, "alice", f"User likes {marker}").status_code == 200
    assert f"User likes {marker}" in _facts(alice, "alice")
    assert f"User likes {marker}" in _facts(anyone, "alice")  # the same tenant's user
    r = alice.post("/v1/users/search", json={"user_id": "alice", "query": marker})
    assert r.status_code == 200, r.text
    assert r.json()["results"], r.text
    r = alice.post("/v1/users/profile", json={"user_id": "alice", "namespace": "n"})
    assert r.status_code == 200, r.text
    assert marker in r.json()["text"], r.text
    r = alice.post("/v1/users/forget", json={"user_id": "alice"})
    assert r.status_code == 200, r.text
    assert r.json()["facts"] >= 1, r.text
    assert _facts(anyone, "alice") == []


def test_a_bound_key_cannot_name_another_user(clients: dict[str, httpx.Client]) -> None:
    alice, anyone = clients["alice"], clients["any"]
    secret = unique("bob-secret-")
    assert _remember(anyone, "bob", f"User hides {secret}").status_code == 200
    calls = [
        ("GET", "/v1/users/facts", {"params": {"user_id": "bob"}}),
        ("POST", "/v1/users/search", {"json": {"user_id": "bob", "query": secret}}),
        ("POST", "/v1/users/profile", {"json": {"user_id": "bob", "namespace": "n"}}),
        ("POST", "/v1/users/remember",
         {"json": {"user_id": "bob", "namespace": "n",
                   "facts": [{"content": "planted", "category": "preference"}]}}),
        ("POST", "/v1/users/extract",
         {"json": {"user_id": "bob", "namespace": "n",
                   "conversation": "user: I love tea"}}),
        ("POST", "/v1/users/forget", {"json": {"user_id": "bob"}}),
        ("POST", "/v1/users/facts/forget", {"json": {"user_id": "bob", "fact_id": "x"}}),
        ("POST", "/v1/requests",
         {"json": {"agent": "A", "domain": "k8s", "request_id": unique("r-"), "user_id": "bob"}}),
    ]  # fmt: skip
    for method, path, kwargs in calls:
        body = _refused(alice.request(method, path, **kwargs))
        assert secret not in str(body), (path, body)
    # Nothing of it happened: bob's fact is there, alone.
    assert _facts(anyone, "bob") == [f"User hides {secret}"]


def test_read_only_still_applies_to_a_bound_key(clients: dict[str, httpx.Client]) -> None:
    ro = clients["alice-ro"]
    r = _remember(ro, "alice", "User writes")
    assert r.status_code == 403, r.text
    assert r.json()["type"].endswith("/read-only-key"), r.text
    assert ro.get("/v1/users/facts", params={"user_id": "alice"}).status_code == 200
    _refused(ro.get("/v1/users/facts", params={"user_id": "bob"}))


def test_events_hide_other_users_from_a_bound_key(clients: dict[str, httpx.Client]) -> None:
    """Agent memory is the tenant's (a bound key sees the domain's events), but
    the user ids on other users' events are not shown to it."""
    alice, anyone = clients["alice"], clients["any"]
    domain = unique("ops-")
    for client, user in ((anyone, "bob"), (alice, "alice")):
        rid = unique("r-")
        start = {"agent": "A", "domain": domain, "request_id": rid, "user_id": user}
        assert client.post("/v1/requests", json=start).status_code == 201
        steps = {"request_id": rid, "steps": [{"action": f"restart for {user}"}]}
        assert client.post("/v1/requests/steps", json=steps).status_code == 200
        assert client.post("/v1/requests/finish", json={"request_id": rid}).status_code == 200

    def users(client: httpx.Client) -> dict[str, str | None]:
        r = client.get("/v1/events", params={"domain": domain})
        assert r.status_code == 200, r.text
        return {e["action"]: e["user_id"] for e in r.json()["events"]}

    assert users(anyone) == {"restart for bob": "bob", "restart for alice": "alice"}
    assert users(alice) == {"restart for bob": None, "restart for alice": "alice"}


others = st.text(min_size=1, max_size=40).filter(lambda s: s.strip() and "\x00" not in s)


@settings(max_examples=25, deadline=None)
@given(user=others)
@example(user="alice ")
@example(user="Alice")
@example(user="t/other/u/alice")
@example(user="alice/")
def test_no_other_id_passes_the_binding(clients: dict[str, httpx.Client], user: str) -> None:
    alice = clients["alice"]
    r = alice.get("/v1/users/facts", params={"user_id": user})
    if user == "alice":
        assert r.status_code == 200, r.text
    else:
        _refused(r)


@given(user=others, other=others)
@example(user="alice", other="alice ")
@example(user="alice", other="t/x/u/alice")
def test_a_bound_tenant_admits_its_user_only(user: str, other: str) -> None:
    """The pure property under the endpoints: the bound tenant stores its user
    exactly where the unbound one does, and refuses (and hides) every other."""
    free, bound = Tenant("acme"), Tenant("acme", user)
    assert bound.owner(user) == free.owner(user)
    assert bound.user_of(free.owner(user)) == user
    if other != user:
        with pytest.raises(PermissionDenied) as refused:
            bound.owner(other)
        assert refused.value.field == "user_id"
        assert bound.user_of(free.owner(other)) is None
    assert bound.domain("ops") == free.domain("ops")  # agent memory stays the tenant's


def test_the_key_file_binds_the_tenant() -> None:
    token = new_key()
    entry = {"id": "k", "tenant": "acme", "sha256": hash_key(token), "user": "alice"}
    key = KeyRing(text=json.dumps({"keys": [entry]})).authenticate(token)
    assert key is not None
    assert (key.user, key.tenant.user, key.tenant.name) == ("alice", "alice", "acme")
    with pytest.raises(PermissionDenied):
        key.tenant.owner("bob")

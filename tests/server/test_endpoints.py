"""Every endpoint of `agent-memory serve` against a real uvicorn process, and
every kind of bad request answered with a problem document."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server.conftest import MAX_BODY
from server.live import LiveServer

PROBLEM_PREFIX = "tag:agent-memory,2025:problem/"


@pytest.fixture
def client(live: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.base, headers=live.headers("acme"), timeout=30) as c:
        yield c


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    """A problem document of this status and type, with no traceback in it."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    doc = response.json()
    assert doc["type"] == PROBLEM_PREFIX + slug, doc
    assert doc["status"] == status
    assert isinstance(doc["title"], str)
    assert isinstance(doc["detail"], str)
    assert doc["request_id"] == response.headers["x-request-id"]
    assert "Traceback" not in response.text
    assert 'File "' not in response.text
    return doc


def uid() -> str:
    return uuid.uuid4().hex[:10]


def test_health_and_ready(live: LiveServer) -> None:
    assert httpx.get(live.base + "/v1/health").json() == {"status": "ok", "backend": None}
    assert httpx.get(live.base + "/v1/ready").json() == {"status": "ready", "backend": "sqlite"}


def test_user_facts_lifecycle(client: httpx.Client) -> None:
    """extract -> list -> profile -> search -> remember -> forget one -> forget all."""
    user = f"user:{uid()}"
    r = client.post(
        "/v1/users/extract",
        json={
            "user_id": user,
            "namespace": "travel",
            "conversation": "User: My name is Ana. I prefer window seats.",
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["report"]["details"]["reconcile"]["operations"] == {"ADD": 2}
    facts = client.get("/v1/users/facts", params={"user_id": user}).json()
    contents = sorted(f["content"] for f in facts["facts"])
    assert contents == ["User prefers window seats", "User's name is Ana"], facts
    assert facts["next_cursor"] is None
    page = client.get("/v1/users/facts", params={"user_id": user, "limit": 1}).json()
    assert len(page["facts"]) == 1
    assert page["next_cursor"] is not None
    rest = client.get(
        "/v1/users/facts", params={"user_id": user, "limit": 1, "cursor": page["next_cursor"]}
    ).json()
    assert {page["facts"][0]["id"], rest["facts"][0]["id"]} == {f["id"] for f in facts["facts"]}

    view = client.post(
        "/v1/users/profile", json={"user_id": user, "namespace": "travel", "request": "seat"}
    ).json()
    assert "window seats" in view["text"]
    assert "Ana" in view["text"]
    assert view["report"]["view"] == "user_profile"
    assert view["report"]["outcome"] == "complete"

    hits = client.post(
        "/v1/users/search", json={"user_id": user, "query": "window seats", "limit": 1}
    ).json()["results"]
    assert [h["fact"]["content"] for h in hits] == ["User prefers window seats"]

    r = client.post(
        "/v1/users/remember",
        json={
            "user_id": user,
            "namespace": "travel",
            "facts": [{"content": "User is vegetarian", "category": "constraint"}],
        },
    )
    assert r.status_code == 200
    assert r.json()["report"]["details"]["operations"] == {"ADD": 1}
    listed = client.get("/v1/users/facts", params={"user_id": user, "namespace": "travel"}).json()
    veg = next(f for f in listed["facts"] if f["content"] == "User is vegetarian")

    r = client.post("/v1/users/facts/forget", json={"user_id": user, "fact_id": veg["id"]})
    assert r.status_code == 200
    assert r.json()["facts"] == 1
    assert r.json()["complete"]
    again = client.post("/v1/users/facts/forget", json={"user_id": user, "fact_id": veg["id"]})
    assert_problem(again, 404, "not-found")

    receipt = client.post("/v1/users/forget", json={"user_id": user}).json()
    assert receipt["user_id"] == user
    assert receipt["facts"] == 2
    assert receipt["complete"]
    assert client.get("/v1/users/facts", params={"user_id": user}).json()["facts"] == []


def test_forget_one_namespace(client: httpx.Client) -> None:
    user = uid()
    for ns in ("a", "b"):
        client.post(
            "/v1/users/remember",
            json={"user_id": user, "namespace": ns, "facts": [{"content": f"User likes {ns}",
                                                                "category": "preference"}]},
        ).raise_for_status()  # fmt: skip
    receipt = client.post("/v1/users/forget", json={"user_id": user, "namespace": "a"}).json()
    assert receipt["namespace"] == "a"
    assert receipt["facts"] == 1
    left = client.get("/v1/users/facts", params={"user_id": user}).json()["facts"]
    assert [f["namespace"] for f in left] == ["b"]


def test_agent_request_lifecycle(client: httpx.Client, live: LiveServer) -> None:
    """start (signal + claims) -> a second agent sees the claim -> steps ->
    context -> events -> finish releases the claims."""
    domain, entity = f"k8s {uid()}", {"type": "pod", "id": f"web-{uid()}"}
    start = {"agent": "A", "domain": domain, "request_id": "r1", "entities": [entity],
             "doing": "debugging", "user_id": "ana"}  # fmt: skip
    r = client.post("/v1/requests", json=start)
    assert r.status_code == 201, r.text
    assert r.json()["claims"] == [
        {"entity": entity, "acquired": True, "holder_agent": None, "holder_request_id": None}
    ]
    assert_problem(client.post("/v1/requests", json=start), 409, "conflict")

    other = client.post("/v1/requests", json={**start, "agent": "B", "request_id": "r2"}).json()
    assert other["claims"][0]["acquired"] is False
    assert other["claims"][0]["holder_agent"] == "A"

    steps = {"request_id": "r1", "steps": [
        {"action": "kubectl describe", "response": "OOMKilled", "ended_at": "2030-01-01T00:00:00Z",
         "metadata": {"entity_type": "pod", "entity_id": entity["id"]}},
        {"action": "bookkeeping", "eligible": False},
    ]}  # fmt: skip
    report = client.post("/v1/requests/steps", json=steps).json()["report"]
    assert report["ok"]
    assert report["details"]["events_written"] == 1

    ctx = client.post("/v1/requests/context", json={"request_id": "r2"}).json()
    assert "kubectl describe" in ctx["agent_memory"]
    assert json.dumps(domain) in ctx["agent_memory"]  # the caller's domain, not the stored one
    assert "t/" not in ctx["text"]
    assert '"A"' in ctx["coordination"]
    assert ctx["report"]["ok"]

    events = client.get("/v1/events", params={"domain": domain}).json()
    assert [e["action"] for e in events["events"]] == ["kubectl describe"]
    event = events["events"][0]
    assert event["domain"] == domain
    assert event["user_id"] == "ana"
    assert event["request_id"] == "r1"
    assert event["entities"] == [entity]
    assert events["limited"] is False
    for wanted, count in ((entity["id"], 1), ("nope", 0)):
        narrowed = client.get(
            "/v1/events", params={"domain": domain, "entity_type": "pod", "entity_id": wanted}
        ).json()
        assert len(narrowed["events"]) == count
    assert_problem(
        client.get("/v1/events", params={"domain": domain, "entity_type": "pod"}),
        422,
        "validation-failed",
    )

    done = client.post("/v1/requests/finish", json={"request_id": "r1"}).json()["report"]
    assert done["details"]["released"] == 2  # the signal and the claim
    assert_problem(client.post("/v1/requests/finish", json={"request_id": "r1"}), 404, "not-found")
    assert_problem(client.post("/v1/requests/steps", json=steps), 404, "not-found")
    retry = client.post("/v1/requests", json={**start, "agent": "C", "request_id": "r3"}).json()
    assert retry["claims"][0]["acquired"] is True  # released by finish
    for rid in ("r2", "r3"):
        client.post("/v1/requests/finish", json={"request_id": rid}).raise_for_status()


def test_knowledge_search(client: httpx.Client) -> None:
    r = client.post("/v1/knowledge/search", json={"domain": "k8s", "query": "oom", "limit": 3})
    assert r.status_code == 200
    assert r.json() == {"results": []}


def test_openapi_is_served(live: LiveServer) -> None:
    schema = httpx.get(live.base + "/v1/openapi.json").json()
    assert "/v1/users/forget" in schema["paths"]


# -- authentication and authorisation -------------------------------------------------
def test_missing_wrong_and_malformed_keys_are_401(live: LiveServer) -> None:
    url = live.base + "/v1/users/facts"
    params = {"user_id": "x"}
    for headers in (
        {},
        {"Authorization": "Bearer amk_wrong"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": f"Bearer {live.key['acme']}x"},
        {"Authorization": "Bearer " + "a" * 5000},
    ):
        r = httpx.get(url, params=params, headers=headers)
        assert_problem(r, 401, "unauthenticated")
        assert r.headers["www-authenticate"] == "Bearer"


def test_revoked_key_is_401_without_restart(live: LiveServer) -> None:
    ok = httpx.get(
        live.base + "/v1/users/facts", params={"user_id": "x"}, headers=live.headers("doomed")
    )
    assert ok.status_code == 200
    live.revoke("doomed")
    deadline = time.monotonic() + 5
    while True:
        r = httpx.get(
            live.base + "/v1/users/facts", params={"user_id": "x"}, headers=live.headers("doomed")
        )
        if r.status_code == 401 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert_problem(r, 401, "unauthenticated")


WRITES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/users/extract", {"user_id": "u", "namespace": "n", "conversation": "I like tea"}),
    ("/v1/users/remember", {"user_id": "u", "namespace": "n",
                            "facts": [{"content": "User likes tea", "category": "preference"}]}),
    ("/v1/users/forget", {"user_id": "u"}),
    ("/v1/users/facts/forget", {"user_id": "u", "fact_id": "f"}),
    ("/v1/requests", {"agent": "a", "domain": "d", "request_id": "ro"}),
    ("/v1/requests/context", {"request_id": "ro"}),
    ("/v1/requests/steps", {"request_id": "ro", "steps": [{"action": "x"}]}),
    ("/v1/requests/finish", {"request_id": "ro"}),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body"), WRITES, ids=[p for p, _ in WRITES])
def test_read_only_key_cannot_write(live: LiveServer, path: str, body: dict[str, Any]) -> None:
    r = httpx.post(live.base + path, json=body, headers=live.headers("acme-ro"))
    assert_problem(r, 403, "read-only-key")


def test_read_only_key_reads(live: LiveServer, client: httpx.Client) -> None:
    user = uid()
    client.post(
        "/v1/users/remember",
        json={"user_id": user, "namespace": "n",
              "facts": [{"content": "User likes tea", "category": "preference"}]},
    ).raise_for_status()  # fmt: skip
    with httpx.Client(base_url=live.base, headers=live.headers("acme-ro")) as ro:
        assert len(ro.get("/v1/users/facts", params={"user_id": user}).json()["facts"]) == 1
        r = ro.post("/v1/users/search", json={"user_id": user, "query": "tea"})
        assert r.status_code == 200
        assert len(r.json()["results"]) == 1
        r = ro.post("/v1/users/profile", json={"user_id": user, "namespace": "n"})
        assert "tea" in r.json()["text"]
        assert ro.get("/v1/events", params={"domain": "d"}).status_code == 200


def test_rate_limit_is_429_with_retry_after(live: LiveServer) -> None:
    codes = []
    for _ in range(4):
        r = httpx.get(
            live.base + "/v1/users/facts", params={"user_id": "x"}, headers=live.headers("slow")
        )
        codes.append(r.status_code)
    assert codes[:2] == [200, 200], codes
    assert codes[-1] == 429, codes
    assert_problem(r, 429, "rate-limited")
    assert int(r.headers["retry-after"]) >= 1


# -- bad requests ------------------------------------------------------------------------
BAD_BODIES: list[tuple[str, str, bytes, int, str]] = [
    ("wrong type", "/v1/users/forget", b'{"user_id": 5}', 422, "validation-failed"),
    ("list for str", "/v1/users/forget", b'{"user_id": ["a"]}', 422, "validation-failed"),
    ("missing field", "/v1/users/profile", b'{"user_id": "u"}', 422, "validation-failed"),
    ("unknown field", "/v1/users/forget", b'{"user_id": "u", "x": 1}', 422, "validation-failed"),
    ("not an object", "/v1/users/forget", b"[1, 2]", 422, "validation-failed"),
    ("blank id", "/v1/users/forget", b'{"user_id": "   "}', 422, "invalid-input"),
    ("NUL in id", "/v1/users/forget", b'{"user_id": "a\\u0000b"}', 422, "invalid-input"),
    ("lone surrogate", "/v1/users/forget", b'{"user_id": "\\ud800"}', 422, "invalid-input"),
    ("bad category", "/v1/users/remember",
     b'{"user_id": "u", "namespace": "n", "facts": [{"content": "c", "category": "x"}]}',
     422, "validation-failed"),
    ("naive time", "/v1/requests/steps",
     b'{"request_id": "r", "steps": [{"action": "a", "ended_at": "2030-01-01T00:00:00"}]}',
     422, "validation-failed"),
    ("bool for int", "/v1/users/search", b'{"user_id": "u", "query": "q", "limit": true}',
     422, "validation-failed"),
    ("limit too big", "/v1/users/search", b'{"user_id": "u", "query": "q", "limit": 100000}',
     422, "validation-failed"),
    ("empty body", "/v1/users/forget", b"", 422, "validation-failed"),
    ("truncated JSON", "/v1/users/forget", b'{"user_id": "', 400, "malformed-body"),
    ("invalid UTF-8", "/v1/users/forget", b'{"user_id": "\xff\xfe"}', 400, "malformed-body"),
    ("invalid UTF-8 outside strings", "/v1/users/forget", b'\xff{"user_id": "a"}', 400,
     "malformed-body"),
    ("NaN", "/v1/users/search", b'{"user_id": "u", "query": "q", "min_score": NaN}', 422,
     "validation-failed"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "body", "status", "slug"),
    [b[1:] for b in BAD_BODIES],
    ids=[b[0] for b in BAD_BODIES],
)
def test_bad_bodies_are_problems(
    client: httpx.Client, path: str, body: bytes, status: int, slug: str
) -> None:
    r = client.post(path, content=body, headers={"content-type": "application/json"})
    doc = assert_problem(r, status, slug)
    if slug == "validation-failed":
        assert doc["errors"]
        assert all("input" not in e for e in doc["errors"])


def test_huge_payload_is_413(client: httpx.Client) -> None:
    body = json.dumps({"user_id": "u", "namespace": "n", "conversation": "x" * (MAX_BODY + 1)})
    assert_problem(client.post("/v1/users/extract", content=body,
                               headers={"content-type": "application/json"}),
                   413, "payload-too-large")  # fmt: skip

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
        yield b'{"user_id": "u", "namespace": "n", "conversation": "'
        for _ in range(MAX_BODY // 1024 + 2):
            yield b"y" * 1024
        yield b'"}'

    r = client.post(
        "/v1/users/extract", content=chunks(), headers={"content-type": "application/json"}
    )
    assert_problem(r, 413, "payload-too-large")


def test_other_http_errors_are_problems(client: httpx.Client) -> None:
    assert_problem(client.get("/v1/nope"), 404, "not-found")
    assert_problem(client.get("/v1/users/forget"), 405, "method-not-allowed")
    assert_problem(
        client.post("/v1/users/forget", content=b"user_id=u",
                    headers={"content-type": "application/x-www-form-urlencoded"}),
        415, "unsupported-media-type",
    )  # fmt: skip
    assert_problem(client.get("/v1/users/facts"), 422, "validation-failed")  # no user_id
    assert_problem(
        client.get("/v1/users/facts", params={"user_id": "u", "limit": "many"}),
        422,
        "validation-failed",
    )
    assert_problem(
        client.get("/v1/events", params={"domain": "d", "since": "2030-01-01T00:00:00"}),
        422,
        "validation-failed",
    )  # a naive time
    assert_problem(
        client.get("/v1/users/facts", params={"user_id": "u", "cursor": "garbage"}),
        422,
        "invalid-input",
    )


def test_access_log_has_no_user_content(live: LiveServer, client: httpx.Client) -> None:
    secret_user, secret_text = f"who-{uid()}", f"secret-{uid()}"
    client.post(
        "/v1/users/extract",
        json={"user_id": secret_user, "namespace": "n", "conversation": f"I like {secret_text}"},
    ).raise_for_status()
    client.get("/v1/users/facts", params={"user_id": secret_user}).raise_for_status()
    time.sleep(0.2)
    log = live.log()
    assert secret_user not in log
    assert secret_text not in log
    lines = [json.loads(x) for x in log.splitlines() if x.startswith('{"event": "access"')]
    routes = {(x["method"], x["route"], x["status"]) for x in lines}
    assert ("GET", "/v1/users/facts", 200) in routes
    assert ("POST", "/v1/users/extract", 200) in routes
    assert all(x["tenant"] is None or x["tenant"].startswith(("acme-", "globex-")) for x in lines)

"""Every 422 names the offending field: a schema mismatch (`validation-failed`),
a value the library refused (`invalid-input`), a pair of arguments that go
together or exclude each other, and text that cannot be stored as UTF-8 (a
lone surrogate, like NUL, is the field's problem, not a malformed body).

Against the session's live server (server/conftest.py); a hypothesis fuzz
sends every route bodies and query strings with missing, wrong-typed, blank,
oversized, NUL or lone-surrogate values and unknown keys, and checks that each
422 answer's `field` is a path into what was sent or what the route takes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from server.live import LiveServer

PROBLEM = "tag:agent-memory,2025:problem/"
HEADERS = {"content-type": "application/json"}


@pytest.fixture
def client(live: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.base, headers=live.headers("acme"), timeout=60) as c:
        yield c


def uid() -> str:
    return uuid.uuid4().hex[:10]


def refused(response: httpx.Response, field: str, slug: str | None = None) -> dict[str, Any]:
    """A 422 problem document naming `field` (and of type `slug`, when given)."""
    assert response.status_code == 422, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/problem+json")
    doc: dict[str, Any] = response.json()
    assert doc.get("field") == field, doc
    if slug is not None:
        assert doc["type"] == PROBLEM + slug, doc
    assert doc["detail"].startswith(field) or field in doc["detail"], doc
    return doc


# -- pair constraints ---------------------------------------------------------------
def test_an_entity_needs_both_type_and_id(client: httpx.Client) -> None:
    """GET /v1/events with one of entity_type / entity_id: the missing one is named."""
    r = client.get("/v1/events", params={"domain": "d", "entity_type": "pod"})
    refused(r, "entity_id", "validation-failed")
    r = client.get("/v1/events", params={"domain": "d", "entity_id": "web-1"})
    refused(r, "entity_type", "validation-failed")
    ok = client.get("/v1/events", params={"domain": "d", "entity_type": "pod", "entity_id": "w"})
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("mode", ["hybrid", "lexical"])
def test_min_score_outside_vector_mode_names_min_score(client: httpx.Client, mode: str) -> None:
    body = {"user_id": "u", "query": "tea", "mode": mode, "min_score": 0.2}
    refused(client.post("/v1/users/search", json=body), "min_score", "validation-failed")
    del body["min_score"]
    assert client.post("/v1/users/search", json=body).status_code == 200


# -- schema mismatches name their field too -------------------------------------------
SCHEMA_CASES: list[tuple[str, str, bytes, str]] = [
    ("wrong type", "/v1/users/forget", b'{"user_id": 5}', "user_id"),
    ("missing", "/v1/users/profile", b'{"user_id": "u"}', "namespace"),
    ("unknown key", "/v1/users/forget", b'{"user_id": "u", "x": 1}', "x"),
    ("not an object", "/v1/users/forget", b"[1, 2]", "body"),
    ("empty body", "/v1/users/forget", b"", "body"),
    ("nested", "/v1/users/remember",
     b'{"user_id": "u", "namespace": "n", "facts": [{"content": "c", "category": "x"}]}',
     "facts.0.category"),
    ("bool for int", "/v1/users/search", b'{"user_id": "u", "query": "q", "limit": true}', "limit"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "body", "field"), [c[1:] for c in SCHEMA_CASES], ids=[c[0] for c in SCHEMA_CASES]
)
def test_schema_mismatches_name_the_field(
    client: httpx.Client, path: str, body: bytes, field: str
) -> None:
    doc = refused(client.post(path, content=body, headers=HEADERS), field, "validation-failed")
    assert doc["errors"], doc  # the full list stays


def test_query_mismatches_name_the_parameter(client: httpx.Client) -> None:
    refused(client.get("/v1/users/facts"), "user_id", "validation-failed")
    r = client.get("/v1/users/facts", params={"user_id": "u", "limit": "many"})
    refused(r, "limit", "validation-failed")
    r = client.get("/v1/events", params={"domain": "d", "since": "2030-01-01T00:00:00"})
    refused(r, "since", "validation-failed")


# -- text that cannot be stored: NUL and lone surrogates --------------------------------
SURROGATES: list[tuple[str, bytes, str]] = [
    ("/v1/users/forget", b'{"user_id": "\\ud800"}', "user_id"),
    ("/v1/users/forget", b'{"user_id": "u", "namespace": "a\\udfffb"}', "namespace"),
    ("/v1/users/remember",
     b'{"user_id": "u", "namespace": "n", "facts": [{"content": "x\\udc00", '
     b'"category": "preference"}]}',
     "facts.0.content"),
    ("/v1/users/search", b'{"user_id": "u", "query": "\\ud83d"}', "query"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "field"), SURROGATES)
def test_a_lone_surrogate_is_the_fields_problem(
    client: httpx.Client, path: str, body: bytes, field: str
) -> None:
    """Valid JSON whose string holds an escaped lone surrogate: a 422 naming the
    field (as for NUL), not a malformed body; a surrogate pair is fine."""
    r = client.post(path, content=body, headers=HEADERS)
    doc = refused(r, field, "invalid-input")
    assert "surrogate" in doc["detail"], doc
    assert "\\ud" not in r.text.lower(), r.text  # the value is not echoed


def test_a_surrogate_pair_and_nul_by_field(client: httpx.Client) -> None:
    pair = b'{"user_id": "\\ud83d\\ude00"}'  # one emoji, escaped as JSON does
    assert client.post("/v1/users/forget", content=pair, headers=HEADERS).status_code == 200
    nul = b'{"user_id": "u", "namespace": "n", "facts": [{"content": "a\\u0000b", ' \
          b'"category": "preference"}]}'  # fmt: skip
    refused(client.post("/v1/users/remember", content=nul, headers=HEADERS), "facts.0.content")


def test_a_lone_surrogate_in_step_metadata_is_refused_by_field(client: httpx.Client) -> None:
    """Free-form metadata is not typed by the schema: the library's own check
    still names it (never a 500)."""
    rid, domain = f"r-{uid()}", f"d-{uid()}"
    start = {"agent": "a", "domain": domain, "request_id": rid}
    assert client.post("/v1/requests", json=start).status_code == 201
    try:
        for body in (
            b'{"request_id": "%s", "steps": [{"action": "a", "metadata": {"k": "\\ud800"}}]}',
            b'{"request_id": "%s", "steps": [{"action": "a", "metadata": {"\\udfff": 1}}]}',
        ):
            r = client.post("/v1/requests/steps", content=body % rid.encode(), headers=HEADERS)
            refused(r, "steps.0.metadata", "invalid-input")
    finally:
        client.post("/v1/requests/finish", json={"request_id": rid})


# -- the invariant, fuzzed over every route ---------------------------------------------
ident = st.text(alphabet="abcxyz-_.:/ é", min_size=1, max_size=12).filter(str.strip)
BAD_JSON: list[Any] = [
    None, 5, -1, True, 0.5, 10**9, "", "   ", "a\x00b", "\ud800", "x\udfff", "x" * 1025,
    "é" * 300, "é" * 252, [], {}, [{}], "2030-01-01T00:00:00", "nope",
]  # fmt: skip
BAD_QUERY = ["", "   ", "a\x00b", "x" * 1025, "é" * 300, "é" * 252, "many", "-1", "0",
             "2030-01-01T00:00:00", "garbage"]  # fmt: skip

fact = st.fixed_dictionaries(
    {"content": ident, "category": st.sampled_from(["preference", "identity"])},
    optional={"confidence": st.floats(0, 1), "explicit": st.booleans()},
)
step = st.fixed_dictionaries(
    {"action": ident},
    optional={"outcome": ident, "response": ident, "metadata": st.just({"k": "v"})},
)
entity = st.fixed_dictionaries({"type": ident, "id": ident})

#: route -> (method, required params, optional params), each a valid-value strategy.
ROUTES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "/v1/users/extract": ("POST", {"user_id": ident, "namespace": ident,
                                   "conversation": st.just("User: I like tea.")}, {}),
    "/v1/users/remember": ("POST", {"user_id": ident, "namespace": ident,
                                    "facts": st.lists(fact, min_size=1, max_size=2)}, {}),
    "/v1/users/profile": ("POST", {"user_id": ident, "namespace": ident}, {"request": ident}),
    "/v1/users/search": ("POST", {"user_id": ident, "query": ident},
                         {"namespace": ident, "limit": st.integers(1, 20),
                          "min_score": st.floats(-1, 1),
                          "mode": st.sampled_from(["vector", "hybrid", "lexical"])}),
    "/v1/users/forget": ("POST", {"user_id": ident}, {"namespace": ident}),
    "/v1/users/facts/forget": ("POST", {"user_id": ident, "fact_id": ident}, {}),
    "/v1/requests": ("POST", {"agent": ident, "domain": ident, "request_id": ident},
                     {"user_id": ident, "entities": st.lists(entity, max_size=2),
                      "doing": ident}),
    "/v1/requests/context": ("POST", {"request_id": ident},
                             {"digest": ident, "knowledge": st.lists(
                                 st.fixed_dictionaries({"id": ident, "content": ident}),
                                 max_size=2)}),
    "/v1/requests/steps": ("POST", {"request_id": ident,
                                    "steps": st.lists(step, min_size=1, max_size=2)}, {}),
    "/v1/requests/finish": ("POST", {"request_id": ident}, {"failed": st.booleans()}),
    "/v1/knowledge/search": ("POST", {"domain": ident, "query": ident},
                             {"limit": st.integers(1, 20)}),
    "/v1/users/facts": ("GET", {"user_id": ident},
                        {"namespace": ident, "limit": st.integers(1, 20).map(str),
                         "cursor": ident}),
    "/v1/events": ("GET", {"domain": ident},
                   {"since": st.just("2020-01-01T00:00:00Z"), "limit": st.just("5"),
                    "entity_type": ident, "entity_id": ident}),
    "/v1/activity": ("GET", {"domain": ident}, {}),
    "/v1/digest": ("GET", {"domain": ident}, {}),
}  # fmt: skip


def _names(value: Any, out: set[str]) -> set[str]:
    """Every key of every object in `value` (what the caller sent)."""
    if isinstance(value, dict):
        for key, item in value.items():
            out.add(str(key))
            _names(item, out)
    elif isinstance(value, list):
        for item in value:
            _names(item, out)
    return out


#: Every parameter name the routes take, nested models' too.
KNOWN = {"body", "type", "id", "content", "category", "confidence", "explicit", "universal",
         "action", "outcome", "response", "failure_cause", "started_at", "ended_at", "metadata",
         "importance", "eligible", "score"}  # fmt: skip
for _method, _required, _optional in ROUTES.values():
    KNOWN |= set(_required) | set(_optional)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    """A route and its arguments, valid except for a few mutations."""
    path = draw(st.sampled_from(sorted(ROUTES)))
    method, required, optional = ROUTES[path]
    args = {name: draw(strategy) for name, strategy in required.items()}
    for name, strategy in optional.items():
        if draw(st.booleans()):
            args[name] = draw(strategy)
    names = sorted({*required, *optional})
    bad = BAD_QUERY if method == "GET" else BAD_JSON
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["bad", "bad", "drop", "unknown", "nested"]))
        name = draw(st.sampled_from(names))
        if kind == "bad":
            args[name] = draw(st.sampled_from(bad))
        elif kind == "drop":
            args.pop(name, None)
        elif kind == "unknown":
            args[draw(st.sampled_from(["x", "userId", "limit_"]))] = 1
        elif isinstance(args.get(name), list) and args[name]:
            item = args[name][0]
            if isinstance(item, dict) and item:
                item[draw(st.sampled_from(sorted(item)))] = draw(st.sampled_from(BAD_JSON))
    return path, method, args


@settings(max_examples=150)
@given(request=requests())
@example(request=("/v1/events", "GET", {"domain": "d", "entity_type": "pod"}))
@example(request=("/v1/events", "GET", {"domain": "d", "entity_id": "w"}))
@example(
    request=(
        "/v1/users/search",
        "POST",
        {"user_id": "u", "query": "q", "mode": "hybrid", "min_score": 0.1},
    )
)
@example(request=("/v1/users/forget", "POST", {"user_id": "\ud800"}))
@example(request=("/v1/users/forget", "POST", {"user_id": "é" * 300}))
@example(request=("/v1/users/facts", "GET", {"user_id": "é" * 300}))
@example(request=("/v1/users/facts", "GET", {"user_id": "é" * 252}))  # fits; prefixed not
@example(request=("/v1/users/forget", "POST", {"user_id": "é" * 252}))
@example(request=("/v1/events", "GET", {"domain": "é" * 252}))
@example(request=("/v1/users/profile", "POST", {"user_id": "u", "namespace": "é" * 300}))
@example(request=("/v1/knowledge/search", "POST", {"domain": "é" * 300, "query": "q"}))
@example(request=("/v1/events", "GET", {"domain": "é" * 300}))
@example(request=("/v1/events", "GET", {"domain": "d", "entity_type": "é" * 300, "entity_id": "x"}))
@example(
    request=(
        "/v1/requests/steps",
        "POST",
        {"request_id": "r", "steps": [{"action": "a", "metadata": []}]},
    )
)
def test_every_422_names_a_field_of_the_request(
    live: LiveServer, request: tuple[str, str, dict[str, Any]]
) -> None:
    path, method, args = request
    with httpx.Client(base_url=live.base, headers=live.headers("acme"), timeout=60) as c:
        if method == "GET":
            r = c.get(path, params=args)
        else:
            r = c.post(path, content=json.dumps(args).encode(), headers=HEADERS)
        if path == "/v1/requests" and r.status_code == 201:
            c.post("/v1/requests/finish", json={"request_id": args["request_id"]})
    assert r.status_code < 500, (r.status_code, r.text)
    if r.status_code != 422:
        return
    doc = r.json()
    field = doc.get("field")
    assert isinstance(field, str), doc
    assert field, doc
    segments = field.split(".")
    assert segments[0] in {*ROUTES[path][1], *ROUTES[path][2], *args, "body"}, (field, doc)
    sent = _names(args, set())
    for part in segments:
        assert part.isdigit() or part in KNOWN or part in sent, (field, doc)

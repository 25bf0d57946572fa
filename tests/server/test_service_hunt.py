"""Where the service's features meet, on real `agent-memory serve` processes
(and a real `agent-memory mcp`): cursors across listings, user-bound admin
keys and the audit trail, deadlines cutting audited erasures, agent requests
restarted while their first start is still running, and pagination while
other clients write and delete.

Interleavings are forced with a lock, not with sleeps: another connection
holds SQLite's write lock (`BEGIN EXCLUSIVE`), so the server's writes wait on
the busy timeout while the test orders the other calls around them, watching
the server's own state (`/v1/domains`) to know where each call is."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from server.live import LiveServer, unique

PROBLEM = "tag:agent-memory,2025:problem/"


def _keys(acme: str, globex: str) -> dict[str, dict[str, Any]]:
    return {
        "acme": {"tenant": acme},
        "acme-admin": {"tenant": acme, "admin": True, "read_only": True},
        "alice-admin": {"tenant": acme, "admin": True, "user": "alice"},
        "alice": {"tenant": acme, "user": "alice"},
        "globex": {"tenant": globex},
        "globex-admin": {"tenant": globex, "admin": True},
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = tmp_path_factory.mktemp("hunt") / "memory.db"
    live = LiveServer(
        f"sqlite:///{db}",
        _keys(unique("acme-"), unique("globex-")),
        extra_args=("--rate", "5000", "--burst", "5000"),
    ).start()
    try:
        yield live
    finally:
        live.close()


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    """A server whose requests have a 2 s deadline, and its SQLite file."""
    db = tmp_path_factory.mktemp("hunt-deadline") / "memory.db"
    live = LiveServer(
        f"sqlite:///{db}",
        _keys(unique("acme-"), unique("globex-")),
        extra_args=("--rate", "5000", "--burst", "5000", "--request-timeout", "2"),
    ).start()
    try:
        yield live, db
    finally:
        live.close()


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    """A server whose requests have a 6 s deadline, and its SQLite file: room
    for a test to order several requests inside one deadline on a loaded
    machine."""
    db = tmp_path_factory.mktemp("hunt-roomy") / "memory.db"
    live = LiveServer(
        f"sqlite:///{db}",
        _keys(unique("acme-"), unique("globex-")),
        extra_args=("--rate", "5000", "--burst", "5000", "--request-timeout", "6"),
    ).start()
    try:
        yield live, db
    finally:
        live.close()


def _client(server: LiveServer, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.base, headers=server.headers(key), timeout=60)


def _word() -> str:
    return uuid.uuid4().hex


def _remember(client: httpx.Client, user: str, namespace: str, n: int = 1) -> None:
    facts = [{"content": f"{_word()} {_word()}", "category": "preference"} for _ in range(n)]
    r = client.post(
        "/v1/users/remember", json={"user_id": user, "namespace": namespace, "facts": facts}
    )
    assert r.status_code == 200, r.text


def _refused(response: httpx.Response, field: str) -> None:
    """A 422 problem document naming `field`."""
    assert response.status_code == 422, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/problem+json")
    doc = response.json()
    assert doc["type"] == PROBLEM + "invalid-input", doc
    assert doc["field"] == field, doc
    assert doc["detail"].startswith(field), doc


def _all_facts(
    client: httpx.Client, user: str, namespace: str | None = None, limit: int = 3
) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"user_id": user, "limit": limit}
        if namespace is not None:
            params["namespace"] = namespace
        if cursor is not None:
            params["cursor"] = cursor
        r = client.get("/v1/users/facts", params=params)
        assert r.status_code == 200, r.text
        ids += [f["id"] for f in r.json()["facts"]]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return ids


def _audit(client: httpx.Client, limit: int = 200) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    before = None
    while True:
        params: dict[str, Any] = {"limit": limit}
        if before is not None:
            params["before"] = before
        r = client.get("/v1/audit", params=params)
        assert r.status_code == 200, r.text
        out += r.json()["entries"]
        before = r.json()["next"]
        if before is None:
            return out


# -- cursors belong to their listing -----------------------------------------------------
LISTINGS = [
    ("acme", "ana", None),
    ("acme", "ana", "n1"),
    ("acme", "ana", "n2"),
    ("acme", "bob", None),
    ("globex", "ana", None),
    ("globex", "ana", "n1"),
]


@pytest.fixture(scope="module")
def stocked(server: LiveServer) -> None:
    """Three facts in each namespace of each listed user."""
    for key, user in {(k, u) for k, u, _ in LISTINGS}:
        with _client(server, key) as c:
            for namespace in ("n1", "n2"):
                _remember(c, user, namespace, 3)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=st.sampled_from(LISTINGS), second=st.sampled_from(LISTINGS))
def test_a_facts_cursor_is_refused_by_another_listing(
    server: LiveServer,
    stocked: None,
    first: tuple[str, str, str | None],
    second: tuple[str, str, str | None],
) -> None:
    """A `next_cursor` of one listing (tenant, user, namespace) passed to
    another is `422 invalid-input` naming `cursor`: never a silent page of the
    other listing that starts at a position it never had (skipping its newer
    facts), and never another tenant's data. Passed to its own listing it pages on."""
    key, user, namespace = first
    params: dict[str, Any] = {"user_id": user, "limit": 1}
    if namespace is not None:
        params["namespace"] = namespace
    with _client(server, key) as c:
        page = c.get("/v1/users/facts", params=params)
        assert page.status_code == 200, page.text
        cursor = page.json()["next_cursor"]
        assert cursor is not None
        again = c.get("/v1/users/facts", params={**params, "cursor": cursor})
        assert again.status_code == 200, again.text
        assert again.json()["facts"][0]["id"] != page.json()["facts"][0]["id"]
    key2, user2, namespace2 = second
    other: dict[str, Any] = {"user_id": user2, "limit": 1, "cursor": cursor}
    if namespace2 is not None:
        other["namespace"] = namespace2
    with _client(server, key2) as c:
        r = c.get("/v1/users/facts", params=other)
    if second == first:
        assert r.status_code == 200, r.text
    else:
        _refused(r, "cursor")


def test_an_audit_cursor_is_refused_by_another_tenant_or_a_bound_key(server: LiveServer) -> None:
    """`before` of one tenant's trail is `422 invalid-input` naming `before`
    for another tenant's admin key and for a key bound to one user."""
    with _client(server, "acme") as app, _client(server, "globex") as other:
        for user in ("x1", "x2", "x3"):
            app.post("/v1/users/forget", json={"user_id": user}).raise_for_status()
            other.post("/v1/users/forget", json={"user_id": user}).raise_for_status()
    with (
        _client(server, "acme-admin") as admin,
        _client(server, "globex-admin") as other_admin,
        _client(server, "alice-admin") as bound,
    ):
        first = admin.get("/v1/audit", params={"limit": 1}).json()
        assert first["next"] is not None
        assert admin.get("/v1/audit", params={"before": first["next"]}).status_code == 200
        _refused(other_admin.get("/v1/audit", params={"before": first["next"]}), "before")
        _refused(bound.get("/v1/audit", params={"before": first["next"]}), "before")


# -- a user-bound admin key ------------------------------------------------------------------
def test_a_user_bound_admin_key_reads_its_users_entries_only(server: LiveServer) -> None:
    """An admin key bound to `alice` reads the audit entries about alice, page
    by page, and no entry naming another user of the tenant (their ids are
    what the binding hides everywhere else)."""
    with _client(server, "acme") as app, _client(server, "alice") as alice:
        for user in ("bob", "carol", "dave"):
            _remember(app, user, "n1")
            app.post("/v1/users/forget", json={"user_id": user}).raise_for_status()
        for _ in range(3):
            alice.post("/v1/users/forget", json={"user_id": "alice"}).raise_for_status()
            app.post("/v1/users/forget", json={"user_id": "erin"}).raise_for_status()
    with _client(server, "alice-admin") as bound, _client(server, "acme-admin") as admin:
        whole = _audit(admin)
        paged = _audit(bound, limit=1)
        assert {e["subject"] for e in paged} == {"alice"}, paged
        assert [e["id"] for e in paged] == [e["id"] for e in whole if e["subject"] == "alice"]
        assert len(paged) >= 3


# -- audited erasures past the deadline ---------------------------------------------------
def _wait_for(check: Callable[[], bool], seconds: float = 20.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.1)
    return check()


def test_a_forget_past_its_deadline_is_still_audited(tight: tuple[LiveServer, Path]) -> None:
    """A forget whose response passes the deadline (the backend's write lock is
    held) answers `503 deadline-exceeded`; once the backend answers, the
    erasure is done AND recorded in the audit trail. Before the fix the
    handler was cancelled between the deletes and the audit entry: the
    facts were gone and the trail never showed the erasure."""
    server, db = tight
    user = unique("gone-")
    with _client(server, "acme") as app, _client(server, "acme-admin") as admin:
        _remember(app, user, "n1", 2)
        app.post("/v1/users/forget", json={"user_id": unique("warm-")}).raise_for_status()
        lock = sqlite3.connect(db, timeout=0)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            r = app.post("/v1/users/forget", json={"user_id": user})
        finally:
            lock.rollback()
            lock.close()
        assert r.status_code == 503, r.text
        assert r.json()["type"] == PROBLEM + "deadline-exceeded"
        assert _wait_for(lambda: _all_facts(app, user) == [])

        def audited() -> bool:
            return any(
                e["operation"] == "forget_user" and e["subject"] == user for e in _audit(admin)
            )

        assert _wait_for(audited), "the erasure happened and the audit trail does not show it"
        (entry,) = [e for e in _audit(admin) if e["subject"] == user]
        assert entry["counts"]["facts"] == 2
        assert entry["caller"] == "acme"


def test_a_forget_fact_past_its_deadline_is_still_audited(tight: tuple[LiveServer, Path]) -> None:
    server, db = tight
    user = unique("one-")
    with _client(server, "acme") as app, _client(server, "acme-admin") as admin:
        _remember(app, user, "n1", 1)
        (fact_id,) = _all_facts(app, user)
        lock = sqlite3.connect(db, timeout=0)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            r = app.post("/v1/users/facts/forget", json={"user_id": user, "fact_id": fact_id})
        finally:
            lock.rollback()
            lock.close()
        assert r.status_code == 503, r.text
        assert _wait_for(lambda: _all_facts(app, user) == [])
        assert _wait_for(
            lambda: any(
                e["operation"] == "forget_fact" and e["subject"] == user for e in _audit(admin)
            )
        ), "the fact was erased and the audit trail does not show it"


def test_a_forget_over_mcp_past_its_deadline_is_still_audited(tmp_path: Path) -> None:
    """The same over `agent-memory mcp` (stdio, `--call-timeout 1`): the
    `forget` tool answers `DeadlineExceeded`, and the erasure it started is
    finished and audited once the backend answers."""
    import subprocess
    import sys

    db = tmp_path / "mcp.db"
    url = f"sqlite:///{db}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_memory.entrypoints.cli", "mcp", "--url", url,
         "--call-timeout", "1"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=(tmp_path / "err").open("wb"),
    )  # fmt: skip
    assert proc.stdin is not None
    assert proc.stdout is not None

    def ask(id_: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": id_, "method": method,
                                      "params": params}) + "\n").encode())  # fmt: skip
        proc.stdin.flush()
        while True:
            line = json.loads(proc.stdout.readline())
            if line.get("id") == id_:
                return line  # type: ignore[no-any-return]

    def tool(id_: int, name: str, **arguments: Any) -> dict[str, Any]:
        return ask(id_, "tools/call", {"name": name, "arguments": arguments})["result"]

    try:
        ask(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "t", "version": "1"}})  # fmt: skip
        proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        proc.stdin.flush()
        facts = [{"content": f"{_word()} {_word()}"} for _ in range(2)]
        assert not tool(2, "remember", user_id="u", namespace="n", facts=facts).get("isError")
        assert not tool(3, "forget", user_id="warm").get("isError")  # the audit table exists
        lock = sqlite3.connect(db, timeout=0)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            answer = tool(4, "forget", user_id="u")
        finally:
            lock.rollback()
            lock.close()
        assert answer.get("isError"), answer
        assert "DeadlineExceeded" in answer["content"][0]["text"], answer

        def erased() -> bool:
            found = tool(int(time.monotonic() * 1000), "recall", user_id="u", namespace="n")
            return found["structuredContent"]["facts"] == []

        assert _wait_for(erased)

        def audited() -> bool:
            with sqlite3.connect(db) as conn:
                rows = conn.execute("SELECT entry FROM audit_log").fetchall()
            entries = [json.loads(body) for (body,) in rows]
            return [(e["operation"], e["subject"]) for e in entries].count(
                ("forget_user", "u")
            ) == 1

        assert _wait_for(audited), "the erasure happened and the audit trail does not show it"
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


# -- an agent request restarted while its first start still runs ----------------------------
def _open_in(client: httpx.Client, domain: str) -> int:
    r = client.get("/v1/domains")
    assert r.status_code == 200, r.text
    return sum(d["open_requests"] for d in r.json()["domains"] if d["domain"] == domain)


def test_a_start_cut_by_its_deadline_does_not_close_its_successor(
    roomy: tuple[LiveServer, Path],
) -> None:
    """start(r) hangs on the backend; the client gives up on it, finishes r and
    starts r again; then the first start passes its deadline. Its clean-up
    must drop its own open request only: before the fix it dropped the
    successor's, which then answered 201 but could never be used or finished
    (404), and held its claim (renewed) for the life of the server."""
    server, db = roomy
    domain, rid = unique("dom-"), unique("req-")
    start = {"agent": "a1", "domain": domain, "request_id": rid,
             "entities": [{"type": "pod", "id": "web-1"}]}  # fmt: skip
    with ThreadPoolExecutor(3) as pool, _client(server, "acme") as app:
        lock = sqlite3.connect(db, timeout=0)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            first: Future[httpx.Response] = pool.submit(app.post, "/v1/requests", json=start)
            assert _wait_for(lambda: _open_in(app, domain) == 1, 5)
            ended = pool.submit(app.post, "/v1/requests/finish", json={"request_id": rid})
            assert _wait_for(lambda: _open_in(app, domain) == 0, 5)
            # the two deadlines 3 s apart: the second start, blocked too, has 3 s
            # left when the first's deadline releases the lock (not an ordering)
            time.sleep(3.0)
            second = pool.submit(app.post, "/v1/requests", json=start)
            assert _wait_for(lambda: _open_in(app, domain) == 1, 5)
            cut = first.result(timeout=30)
        finally:
            lock.rollback()
            lock.close()
        assert cut.status_code == 503, cut.text
        assert second.result(timeout=30).status_code == 201
        assert ended.result(timeout=30).status_code == 200
        assert _open_in(app, domain) == 1, "the restarted request was dropped"
        steps = {"request_id": rid, "steps": [{"action": "kubectl get pods"}]}
        assert app.post("/v1/requests/steps", json=steps).status_code == 200
        assert app.post("/v1/requests/finish", json={"request_id": rid}).status_code == 200
        active = app.get("/v1/activity", params={"domain": domain}).json()
        assert active["claims"] == [], active


# -- pagination against a model, while other clients write and delete ------------------------
class FactsAgainstModel(RuleBasedStateMachine):
    """The service against a model of what each (tenant, user) holds: facts
    remembered (distinct random words, so each is an ADD), forgotten one by
    one, by namespace or whole; every listing, paged with any limit, holds
    exactly the model's facts once; every forget leaves exactly one audit
    entry naming its tenant's user."""

    server: LiveServer
    facts = Bundle("facts")

    def __init__(self) -> None:
        super().__init__()
        self.clients = {k: _client(self.server, k) for k in ("acme", "globex")}
        self.admins = {k: _client(self.server, f"{k}-admin") for k in ("acme", "globex")}
        self.run = uuid.uuid4().hex[:6]
        self.model: dict[tuple[str, str], dict[str, str]] = {}  # (key, user) -> id -> ns
        self.forgets: dict[str, list[str]] = {"acme": [], "globex": []}
        self.audit_before = {k: {e["id"] for e in _audit(c)} for k, c in self.admins.items()}

    def teardown(self) -> None:
        for c in (*self.clients.values(), *self.admins.values()):
            c.close()

    def _user(self, user: str) -> str:
        return f"{self.run}-{user}"

    @rule(
        target=facts,
        key=st.sampled_from(["acme", "globex"]),
        user=st.sampled_from(["ana", "bob"]),
        namespace=st.sampled_from(["n1", "n2"]),
        n=st.integers(1, 4),
    )
    def remember(self, key: str, user: str, namespace: str, n: int) -> Any:
        c = self.clients[key]
        before = set(_all_facts(c, self._user(user), limit=200))
        _remember(c, self._user(user), namespace, n)
        after = set(_all_facts(c, self._user(user), limit=200))
        new = after - before
        assert before <= after, (before, after)
        assert len(new) == n, (before, after)
        held = self.model.setdefault((key, user), {})
        held.update(dict.fromkeys(new, namespace))
        return (key, user, sorted(new)[0])

    @rule(fact=consumes(facts))
    def forget_fact(self, fact: tuple[str, str, str]) -> None:
        key, user, fact_id = fact
        held = self.model.get((key, user), {})
        r = self.clients[key].post(
            "/v1/users/facts/forget", json={"user_id": self._user(user), "fact_id": fact_id}
        )
        self.forgets[key].append(self._user(user))
        if fact_id in held:
            assert r.status_code == 200, r.text
            assert r.json()["facts"] == 1, r.text
            del held[fact_id]
        else:
            assert r.status_code == 404, r.text

    @rule(
        key=st.sampled_from(["acme", "globex"]),
        user=st.sampled_from(["ana", "bob"]),
        namespace=st.none() | st.sampled_from(["n1", "n2"]),
    )
    def forget(self, key: str, user: str, namespace: str | None) -> None:
        body: dict[str, Any] = {"user_id": self._user(user)}
        if namespace is not None:
            body["namespace"] = namespace
        r = self.clients[key].post("/v1/users/forget", json=body)
        assert r.status_code == 200, r.text
        held = self.model.get((key, user), {})
        gone = [i for i, ns in held.items() if namespace is None or ns == namespace]
        assert r.json()["facts"] == len(gone), (r.text, held)
        for i in gone:
            del held[i]
        self.forgets[key].append(self._user(user))

    @precondition(lambda self: bool(self.model))
    @rule(
        key=st.sampled_from(["acme", "globex"]),
        user=st.sampled_from(["ana", "bob"]),
        namespace=st.none() | st.sampled_from(["n1", "n2"]),
        limit=st.integers(1, 5),
    )
    def page_through(self, key: str, user: str, namespace: str | None, limit: int) -> None:
        got = _all_facts(self.clients[key], self._user(user), namespace, limit)
        held = self.model.get((key, user), {})
        want = {i for i, ns in held.items() if namespace is None or ns == namespace}
        assert len(got) == len(set(got)), f"a fact repeated: {got}"
        assert set(got) == want

    @invariant()
    def audit_has_one_entry_per_forget(self) -> None:
        for key, admin in self.admins.items():
            mine = [
                e
                for e in _audit(admin)
                if e["id"] not in self.audit_before[key] and e["subject"].startswith(self.run)
            ]
            assert sorted(e["subject"] for e in mine) == sorted(self.forgets[key])
            assert all(e["caller"] == key for e in mine), mine


def test_facts_and_audit_against_a_model(server: LiveServer) -> None:
    FactsAgainstModel.server = server
    run_state_machine_as_test(
        FactsAgainstModel,
        settings=settings(
            max_examples=8, stateful_step_count=12, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )  # fmt: skip


def test_paging_while_others_write_and_delete(server: LiveServer) -> None:
    """One client pages through a user's facts (limit 2) while others add new
    facts and forget some of the older ones between every page: every fact
    stored for the whole run is listed exactly once."""
    user = unique("pager-")
    with _client(server, "acme") as app:
        for _ in range(4):
            _remember(app, user, "n1", 3)
        doomed = _all_facts(app, user, limit=200)[::3]
        stable = set(_all_facts(app, user, limit=200)) - set(doomed)
        stop = threading.Event()
        failures: list[str] = []

        def writer() -> None:
            with _client(server, "acme") as w:
                while not stop.is_set():
                    try:
                        _remember(w, user, "n1", 1)
                    except AssertionError as exc:  # pragma: no cover - reported below
                        failures.append(str(exc))

        def deleter() -> None:
            with _client(server, "acme") as d:
                for fact_id in doomed:
                    r = d.post("/v1/users/facts/forget", json={"user_id": user, "fact_id": fact_id})
                    if r.status_code != 200:  # pragma: no cover - reported below
                        failures.append(r.text)

        seen: list[str] = []
        with ThreadPoolExecutor(2) as pool:
            w = pool.submit(writer)
            d = pool.submit(deleter)
            cursor = None
            while True:
                params: dict[str, Any] = {"user_id": user, "limit": 2}
                if cursor is not None:
                    params["cursor"] = cursor
                r = app.get("/v1/users/facts", params=params)
                assert r.status_code == 200, r.text
                seen += [f["id"] for f in r.json()["facts"]]
                cursor = r.json()["next_cursor"]
                if cursor is None:
                    break
            stop.set()
            w.result()
            d.result()
        assert failures == []
        assert len(seen) == len(set(seen)), "a fact was listed twice"
        assert stable <= set(seen), f"skipped: {stable - set(seen)}"


def test_a_forget_cut_by_the_drain_timeout_is_still_audited(tmp_path: Path) -> None:
    """SIGTERM with a forget in flight whose backend hangs past the drain
    timeout: uvicorn cancels the request; the erasure still ends with its
    audit entry before the backend is closed and the process exits."""
    import asyncio
    import socket

    import agent_memory
    from agent_memory.entrypoints.server.tenancy import Tenant

    db = tmp_path / "memory.db"
    tenant = unique("acme-")
    live = LiveServer(
        f"sqlite:///{db}", {"acme": {"tenant": tenant}}, extra_args=("--drain-timeout", "0.5")
    ).start()
    try:
        with _client(live, "acme") as app:
            _remember(app, "ana", "n1", 2)
            app.post("/v1/users/forget", json={"user_id": "warm"}).raise_for_status()
        raw = json.dumps({"user_id": "ana"}).encode()
        head = (
            f"POST /v1/users/forget HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: {live.headers('acme')['Authorization']}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
        ).encode()
        lock = sqlite3.connect(db, timeout=0)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            sock = socket.create_connection(("127.0.0.1", live.port), timeout=30)
            sock.sendall(head + raw)
            time.sleep(0.5)  # the request reaches its handler (its delete then waits on the lock)
            live.terminate()
            assert _wait_for(lambda: "timeout graceful shutdown exceeded" in live.log(), 10)
        finally:
            lock.rollback()
            lock.close()
        sock.close()
        assert live.stop(timeout=30) in (0, -15)
    finally:
        live.close()

    async def check() -> None:
        owner = Tenant(tenant).owner("ana")
        async with agent_memory.connect(f"sqlite:///{db}") as memory:
            assert await memory.users.facts(user_id=owner) == []
            entries = [e async for e in memory.audit.entries()]
            assert [(e.operation, e.subject) for e in entries if e.subject == "ana"] == [
                ("forget_user", "ana")
            ], entries

    asyncio.run(check())


# -- MCP record_steps across calls ------------------------------------------------------
async def test_record_steps_over_mcp_keeps_every_call(tmp_path: Path) -> None:
    """`record_steps` called once per step for one request (how an agent
    records as it goes) stores every call's steps, also the same step done
    twice (a poll). Before the fix each call numbered its steps
    from 0 (`<request>#0`), so the idempotent event log dropped every call
    after the first: `recorded: 0`, no error, the agent's later steps lost."""
    import agent_memory
    from integrations.test_mcp import call, stdio_session

    url = f"sqlite:///{tmp_path / 'mcp.db'}"
    actions = ["kubectl get pods", "kubectl describe pod web-1", "kubectl delete pod web-1"]
    async with stdio_session(url, tmp_path / "err") as session:
        for action in actions:
            done = await call(session, "record_steps", agent="a", domain="k8s", request_id="r1",
                              steps=[{"action": action}])  # fmt: skip
            assert done["recorded"] == 1, (action, done)
        again = await call(session, "record_steps", agent="a", domain="k8s", request_id="r1",
                           steps=[{"action": actions[-1]}])  # fmt: skip
        assert again["recorded"] == 1, again  # the same step done again: kept
        longest = "r" * 512  # an id at its bound: the event ids stay within it
        for action in actions[:2]:
            done = await call(session, "record_steps", agent="a", domain="k8s-2",
                              request_id=longest, steps=[{"action": action}])  # fmt: skip
            assert done == {"recorded": 1, "steps": 1, "failures": []}, done
    from datetime import UTC, datetime, timedelta

    async with agent_memory.connect(url) as memory:
        since = datetime.now(UTC) - timedelta(hours=1)
        window = await memory.events.window("k8s", since=since, limit=50)
        assert sorted(e.action for e in window.events) == sorted([*actions, actions[-1]])


def test_every_answer_tells_caches_not_to_store_it(tight: tuple[LiveServer, Path]) -> None:
    """A page of facts, a problem and a refused key are private: each answer
    says `Cache-Control: no-store`, so no browser or proxy keeps a copy. Before,
    only the inspector page itself said so, and the facts a browser fetched
    ended up in its disk cache."""
    server, _ = tight
    with _client(server, "acme") as app:
        user = unique("u-")
        _remember(app, user, "n1")
        answers = [
            app.get("/v1/users/facts", params={"user_id": user}),
            app.get("/v1/users/facts", params={"user_id": ""}),
            httpx.get(f"{server.base}/v1/users/facts", params={"user_id": user}),
        ]
    assert [a.status_code for a in answers] == [200, 422, 401]
    for a in answers:
        assert a.headers.get("cache-control") == "no-store", (a.status_code, a.headers)

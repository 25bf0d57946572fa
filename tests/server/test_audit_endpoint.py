"""`GET /v1/audit` on a real server: admin keys read their own tenant's trail,
entries name the key that asked and the caller's user id, hold no content;
other keys get a typed 403; paging by `before` repeats nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from agent_memory import AuditNotRecorded
from agent_memory.domain.audit import AuditEntry
from agent_memory.entrypoints.server.problems import from_library_error
from server.live import LiveServer, unique

SECRET = "Quokka-91c2-marmalade"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = tmp_path_factory.mktemp("audit-http") / "memory.db"
    acme, globex = unique("acme-"), unique("globex-")
    live = LiveServer(
        f"sqlite:///{db}",
        {
            "acme-app": {"tenant": acme},
            "acme-admin": {"tenant": acme, "admin": True, "read_only": True},
            "globex-app": {"tenant": globex},
            "globex-admin": {"tenant": globex, "admin": True},
        },
        extra_args=("--rate", "2000", "--burst", "2000"),
    ).start()
    try:
        yield live
    finally:
        live.close()


def _client(server: LiveServer, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.base, headers=server.headers(key), timeout=30)


def _remember(client: httpx.Client, user: str, n: int) -> None:
    facts = [{"content": f"{SECRET} item {i}", "category": "preference"} for i in range(n)]
    r = client.post("/v1/users/remember", json={"user_id": user, "namespace": "n", "facts": facts})
    r.raise_for_status()


def test_admin_reads_own_tenant_trail_without_content(server: LiveServer) -> None:
    with (
        _client(server, "acme-app") as app,
        _client(server, "acme-admin") as admin,
        _client(server, "globex-app") as other,
        _client(server, "globex-admin") as other_admin,
    ):
        _remember(app, "ana", 2)
        app.post("/v1/users/forget", json={"user_id": "ana"}).raise_for_status()
        _remember(other, "ana", 1)
        other.post("/v1/users/forget", json={"user_id": "ana", "namespace": "n"}).raise_for_status()
        r = admin.get("/v1/audit")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["next"] is None
        (entry,) = body["entries"]
        assert entry["operation"] == "forget_user"
        assert entry["subject"] == "ana"  # the caller's id, not the stored owner
        assert entry["caller"] == "acme-app"
        assert entry["counts"]["facts"] == 2
        assert datetime.fromisoformat(entry["at"].replace("Z", "+00:00")).utcoffset() is not None
        assert SECRET not in r.text
        assert "t/" not in r.text  # no stored owner prefix
        (theirs,) = other_admin.get("/v1/audit").json()["entries"]
        assert (theirs["operation"], theirs["caller"]) == ("forget_namespace", "globex-app")


@pytest.mark.parametrize("key", ["acme-app", "globex-app"])
def test_non_admin_keys_get_a_typed_403(server: LiveServer, key: str) -> None:
    with _client(server, key) as client:
        r = client.get("/v1/audit")
    assert r.status_code == 403
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["type"].endswith("problem/admin-required")


def test_unauthenticated_is_401(server: LiveServer) -> None:
    r = httpx.get(server.base + "/v1/audit", timeout=30)
    assert r.status_code == 401


def test_pages_by_before_without_repeats(server: LiveServer) -> None:
    with _client(server, "globex-app") as app, _client(server, "globex-admin") as admin:
        for i in range(7):
            app.post("/v1/users/forget", json={"user_id": f"p{i}"}).raise_for_status()
        everything = admin.get("/v1/audit", params={"limit": 200}).json()["entries"]
        seen: list[str] = []
        before = None
        while True:
            params: dict[str, object] = {"limit": 3}
            if before is not None:
                params["before"] = before
            page = admin.get("/v1/audit", params=params).json()
            seen += [e["id"] for e in page["entries"]]
            before = page["next"]
            if before is None:
                break
        assert seen == [e["id"] for e in everything]
        assert len(seen) >= 7
        bad = admin.get("/v1/audit", params={"before": "garbage"})
        assert bad.status_code == 422
        assert bad.json()["type"].endswith("problem/invalid-input")
        too_many = admin.get("/v1/audit", params={"limit": 201})
        assert too_many.status_code == 422


def test_openapi_lists_the_endpoint(server: LiveServer) -> None:
    schema = httpx.get(server.base + "/v1/openapi.json", timeout=30).json()
    operation = schema["paths"]["/v1/audit"]["get"]
    assert "403" in operation["responses"]


def test_an_unrecorded_audit_entry_is_a_typed_500_naming_the_entry() -> None:
    """The forget happened; the problem says so and names the entry, no content."""
    entry = AuditEntry(
        id="e-1", at=datetime.now(UTC), operation="forget_user", tenant="acme",
        subject="ana", counts={"facts": 2}, caller="acme-app",
    )  # fmt: skip
    problem = from_library_error(AuditNotRecorded(entry, None, OSError("disk full")))
    assert (problem.slug, problem.status) == ("audit-not-recorded", 500)
    assert "forget_user completed" in problem.detail
    assert "e-1" in problem.detail

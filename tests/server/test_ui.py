"""The inspector page (`serve --ui`) and the read endpoints it uses: served only
with the flag, assets shipped as package data, tenant-scoped reads; and the
page end to end in a real headless Chromium (tests/servers/chromium.py): log
in with a key, find a fact, forget it, see the receipt, and another tenant's
key sees none of it. The test writes a screenshot (docs/images/inspector.png
when UPDATE_SCREENSHOTS=1, else a temp file)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.live import LiveServer, unique
from servers.chromium import Page, launch_chromium

ROOT = Path(__file__).resolve().parents[2]
UI_DIR = ROOT / "src" / "agent_memory" / "entrypoints" / "server" / "ui"
XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script> calls Ada "Lovelace"'


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    a, b = unique("ui-a-"), unique("ui-b-")
    server = LiveServer(
        f"sqlite:///{tmp_path_factory.mktemp('ui') / 'memory.db'}",
        {
            "a": {"tenant": a},
            "a-admin": {"tenant": a, "admin": True},
            "b": {"tenant": b},
            "b-admin": {"tenant": b, "admin": True},
        },
        extra_args=("--ui", "--rate", "2000", "--burst", "2000"),
    ).start()
    try:
        yield server
    finally:
        server.close()


def _api(server: LiveServer, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.base, headers=server.headers(key), timeout=30)


def _seed(server: LiveServer, user: str, facts: list[str]) -> None:
    with _api(server, "a") as api:
        r = api.post(
            "/v1/users/remember",
            json={
                "user_id": user,
                "namespace": "prefs",
                "facts": [{"content": f, "category": "preference"} for f in facts],
            },
        )
        assert r.status_code == 200, r.text


# -- the page and its assets ------------------------------------------------------------
def test_assets_are_package_data_and_self_contained() -> None:
    from agent_memory.entrypoints.server.ui import ASSETS, asset

    package = resources.files("agent_memory.entrypoints.server.ui")
    on_disk = {p.name for p in UI_DIR.iterdir() if p.suffix in (".html", ".js", ".css")}
    assert on_disk == set(ASSETS), "every file of the page is listed in ui.ASSETS"
    for name in ASSETS:
        assert package.joinpath(name).is_file(), name
        text = asset(name).decode()
        assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text), f"{name}: no CDN"
        assert "innerHTML" not in text, f"{name}: user text goes in as text only"
    html = asset("index.html").decode()
    for ref in re.findall(r'(?:src|href)="(/ui/[^"]+)"', html):
        assert ref.removeprefix("/ui/") in ASSETS, ref
    # The wheel is built from src/agent_memory with every file in it (hatchling),
    # minus what git ignores: the assets must be neither excluded nor ignored.
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    assert "src/agent_memory" in wheel["targets"]["wheel"]["packages"]
    assert not wheel["targets"]["wheel"].get("exclude")
    ignored = subprocess.run(
        ["git", "check-ignore", *(str(UI_DIR / n) for n in ASSETS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert ignored.stdout == "", ignored.stdout


def test_ui_is_served_only_with_the_flag(live: LiveServer, ui: LiveServer) -> None:
    off = httpx.get(live.base + "/ui")
    assert off.status_code == 404
    assert off.headers["content-type"] == "application/problem+json"
    assert httpx.get(live.base + "/ui/app.js").status_code == 404
    page = httpx.get(ui.base + "/ui")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "default-src 'none'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    for name, media in (("app.js", "text/javascript"), ("app.css", "text/css")):
        r = httpx.get(f"{ui.base}/ui/{name}")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith(media)
    assert httpx.get(ui.base + "/ui/", follow_redirects=False).headers["location"] == "/ui"
    assert httpx.get(ui.base + "/ui/nope.js").status_code == 404
    # Not part of the JSON API.
    assert not any(
        p.startswith("/ui") for p in httpx.get(ui.base + "/v1/openapi.json").json()["paths"]
    )


def test_read_endpoints_are_tenant_scoped(ui: LiveServer) -> None:
    domain, rid = unique("ops "), unique("req-")
    with _api(ui, "a") as a, _api(ui, "b") as b:
        r = a.post("/v1/requests", json={
            "agent": "bot <b>", "domain": domain, "request_id": rid, "doing": "looking",
            "entities": [{"type": "ticket", "id": "t/1"}],
        })  # fmt: skip
        assert r.status_code == 201, r.text
        try:
            assert {"domain": domain, "open_requests": 1} in a.get("/v1/domains").json()["domains"]
            act = a.get("/v1/activity", params={"domain": domain}).json()
            assert [(x["agent"], x["request_id"], x["doing"]) for x in act["signals"]] == [
                ("bot <b>", rid, "looking")
            ]
            assert act["signals"][0]["entities"] == [{"type": "ticket", "id": "t/1"}]
            assert [(c["entity"], c["holder_request_id"]) for c in act["claims"]] == [
                ({"type": "ticket", "id": "t/1"}, rid)
            ]
            r = a.post("/v1/requests/steps", json={
                "request_id": rid, "steps": [{"action": "read the log", "response": "found it"}],
            })  # fmt: skip
            assert r.status_code == 200, r.text
            dig = a.get("/v1/digest", params={"domain": domain}).json()
            assert set(dig) == {"digest", "path", "coverage", "raw_events"}
            assert "read the log" in json.dumps(dig) or dig["raw_events"] >= 1
            assert "t/" not in (dig["digest"] or "").replace("t/1", "")  # no tenant prefix
            # Tenant b: the same domain name is another domain.
            assert all(d["domain"] != domain for d in b.get("/v1/domains").json()["domains"])
            assert b.get("/v1/activity", params={"domain": domain}).json() == {
                "signals": [],
                "claims": [],
            }
            other = b.get("/v1/digest", params={"domain": domain}).json()
            assert other["raw_events"] == 0
            assert "read the log" not in json.dumps(other)
        finally:
            a.post("/v1/requests/finish", json={"request_id": rid})
        assert a.get("/v1/activity", params={"domain": domain}).json()["signals"] == []
        assert all(d["domain"] != domain for d in a.get("/v1/domains").json()["domains"])
        for path in ("/v1/activity", "/v1/digest"):
            assert a.get(path).status_code == 422  # domain is required
            assert httpx.get(ui.base + path, params={"domain": domain}).status_code == 401


def test_search_modes(ui: LiveServer) -> None:
    user = unique("carol-")
    _seed(ui, user, ["Carol drinks oolong tea", "Carol cycles to work", "Carol owns a cat"])
    with _api(ui, "a") as a, _api(ui, "b") as b:
        for mode in ("hybrid", "lexical", "vector"):
            r = a.post("/v1/users/search", json={"user_id": user, "query": "oolong", "mode": mode})
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["mode"] == mode
            assert out["fallback"] is None  # SQLite has keyword search
            assert out["results"][0]["fact"]["content"] == "Carol drinks oolong tea", (mode, out)
            other = b.post(
                "/v1/users/search", json={"user_id": user, "query": "oolong", "mode": mode}
            )
            assert other.json()["results"] == []
        lexical = a.post(
            "/v1/users/search", json={"user_id": user, "query": "oolong", "mode": "lexical"}
        ).json()
        assert [h["fact"]["content"] for h in lexical["results"]] == ["Carol drinks oolong tea"]
        r = a.post("/v1/users/search", json={"user_id": user, "query": "x", "mode": "fuzzy"})
        assert r.status_code == 422
        r = a.post(
            "/v1/users/search",
            json={"user_id": user, "query": "x", "mode": "hybrid", "min_score": 0.5},
        )
        assert r.status_code == 422
        assert "min_score" in r.json()["detail"]


# -- the page in Chromium -------------------------------------------------------------------
async def _login(page: Page, server: LiveServer, key: str) -> None:
    if await page.eval("!document.getElementById('logout').hidden"):
        await page.click("#logout")
    await page.wait_for("!document.getElementById('login').hidden")
    await page.fill("#key", server.key[key])
    await page.click("#login-form button[type=submit]")
    await page.wait_for("document.body.dataset.ready === '1'")


async def _submit(page: Page, form: str, table: str) -> None:
    """Submit a form and wait until `table` has been rendered again."""
    before = await page.eval(f"Number(document.getElementById('{table}').dataset.renders || 0)")
    await page.click(f"#{form} button[type=submit]")
    await page.wait_for(
        f"Number(document.getElementById('{table}').dataset.renders || 0) > {before}"
    )


async def _rows(page: Page, table: str) -> list[list[str]]:
    rows: list[list[str]] = await page.eval(
        f"[...document.querySelectorAll('#{table} tbody tr')]"
        ".map(tr => [...tr.cells].map(td => td.textContent))"
    )
    return rows


async def test_inspector_end_to_end_in_chromium(ui: LiveServer, tmp_path: Path) -> None:
    user, domain, rid = "ada", "support", unique("req-")
    _seed(ui, user, ["Ada prefers green tea in the morning", "Ada lives in Lisbon", XSS])
    with _api(ui, "a") as api:
        r = api.post("/v1/requests", json={
            "agent": "triage-bot", "domain": domain, "request_id": rid,
            "doing": "triaging <b>ticket</b> 42", "entities": [{"type": "ticket", "id": "42"}],
        })  # fmt: skip
        assert r.status_code == 201, r.text
        r = api.post("/v1/requests/steps", json={
            "request_id": rid, "steps": [{"action": "checked the <i>billing</i> log",
                                          "response": "refund issued"}],
        })  # fmt: skip
        assert r.status_code == 200, r.text
    try:
        async with launch_chromium() as browser:
            page = await browser.new_page()
            await page.goto(ui.base + "/ui")
            await _login(page, ui, "a-admin")  # admin: the screenshot shows the audit trail

            # Domains: the open request's domain, its agent, claim and events.
            await page.wait_for(f"!!document.querySelector('#domains [data-domain=\"{domain}\"]')")
            await page.click(f'#domains [data-domain="{domain}"]')
            await page.wait_for("!!document.querySelector('#events tbody tr')")
            signals = await _rows(page, "signals")
            assert [s[:3] for s in signals] == [["triage-bot", rid, "triaging <b>ticket</b> 42"]]
            assert (await _rows(page, "claims"))[0][:3] == ["ticket:42", "triage-bot", rid]
            assert any("checked the <i>billing</i> log" in r for r in await _rows(page, "events"))

            # The user's facts, shown as text: the markup in a fact is not run.
            await page.fill("#user", user)
            await _submit(page, "user-form", "facts")
            facts = [r[0] for r in await _rows(page, "facts")]
            assert sorted(facts) == sorted(
                ["Ada prefers green tea in the morning", "Ada lives in Lisbon", XSS]
            )
            assert await page.eval("document.querySelectorAll('main img, main script').length") == 0
            assert await page.eval("window.__xss === undefined")
            assert all(r[2].strip() for r in await _rows(page, "facts"))  # confidence shown

            # Find a fact (search), forget it, see the receipt.
            await page.fill("#query", "green tea")
            await _submit(page, "search-form", "results")
            hits = await _rows(page, "results")
            assert hits[0][1] == "Ada prefers green tea in the morning", hits
            mode = await page.eval("document.getElementById('search-mode').textContent")
            assert mode.startswith("hybrid retrieval"), mode
            fact_id = await page.eval("document.querySelector('#results tbody tr').dataset.factId")
            forget = f'#results tr[data-fact-id="{fact_id}"] button'
            await page.click(forget)
            assert await page.eval(f"document.querySelector('{forget}').textContent") == (
                "Really forget?"
            )
            await page.click(forget)
            await page.wait_for("!document.getElementById('receipt-card').hidden")
            receipt = await page.eval(
                "Object.fromEntries([...document.querySelectorAll('#receipt dt')]"
                ".map(dt => [dt.textContent, dt.nextElementSibling.textContent]))"
            )
            assert receipt["user"] == user
            assert receipt["facts removed"] == "1"
            assert receipt["complete"] == "yes"
            await page.wait_for(
                "![...document.querySelectorAll('#facts tbody tr')]"
                ".some(tr => tr.cells[0].textContent.includes('green tea'))"
            )
            # the page reloads the facts and re-runs the search concurrently
            # (Promise.all): wait for the search's refresh too, not only the facts'
            await page.wait_for(
                "![...document.querySelectorAll('#results tbody tr')]"
                ".some(tr => tr.textContent.includes('green tea'))"
            )
            assert len(await _rows(page, "facts")) == 2
            assert not any("green tea" in r[1] for r in await _rows(page, "results"))
            shot = await page.screenshot(
                ROOT / "docs" / "images" / "inspector.png"
                if os.environ.get("UPDATE_SCREENSHOTS") == "1"
                else tmp_path / "inspector.png"
            )
            data = shot.read_bytes()
            assert data[:8] == b"\x89PNG\r\n\x1a\n"
            assert len(data) > 20_000  # a rendered page, not a blank one

            # The same through the API: gone for good.
            with _api(ui, "a") as api:
                left = api.get("/v1/users/facts", params={"user_id": user}).json()["facts"]
            assert sorted(f["content"] for f in left) == sorted(["Ada lives in Lisbon", XSS])

            # Another tenant's key: the same names show nothing of tenant a.
            await _login(page, ui, "b")
            assert not await page.eval(f"!!document.querySelector('[data-domain=\"{domain}\"]')")
            assert await page.eval("document.getElementById('receipt-card').hidden")
            await page.fill("#user", user)
            await _submit(page, "user-form", "facts")
            assert await _rows(page, "facts") == []
            await page.fill("#query", "Ada")
            await _submit(page, "search-form", "results")
            assert await _rows(page, "results") == []
            await page.fill("#domain", domain)
            await _submit(page, "domain-form", "events")
            assert await _rows(page, "events") == []
            assert await _rows(page, "signals") == []
            assert await _rows(page, "claims") == []
            text = await page.eval("document.body.innerText")
            assert "Lisbon" not in text
            assert "triage-bot" not in text

            # A refused key goes back to the login form with the reason.
            await page.click("#logout")
            await page.fill("#key", "not-a-key")
            await page.click("#login-form button[type=submit]")
            await page.wait_for("document.getElementById('login-error').textContent")
            assert "refused" in await page.eval(
                "document.getElementById('login-error').textContent"
            )
            assert page.errors == []
    finally:
        with _api(ui, "a") as api:
            api.post("/v1/requests/finish", json={"request_id": rid})


async def test_inspector_audit_trail_in_chromium(ui: LiveServer) -> None:
    user = unique("bob-")
    _seed(ui, user, ["Bob keeps bees"])
    async with launch_chromium() as browser:
        page = await browser.new_page()
        await page.goto(ui.base + "/ui")
        await _login(page, ui, "a")
        await page.wait_for("document.getElementById('audit-status').dataset.status")
        status = await page.eval("document.getElementById('audit-status').textContent")
        assert "needs an admin key" in status, status

        await _login(page, ui, "a-admin")
        await page.fill("#user", user)
        await _submit(page, "user-form", "facts")
        forget = "#facts tbody tr button"
        await page.click(forget)
        await page.click(forget)
        await page.wait_for("!document.getElementById('receipt-card').hidden")
        await page.wait_for(
            "[...document.querySelectorAll('#audit tbody tr')].some(tr => "
            "tr.dataset.operation === 'forget_fact' && "
            f"tr.cells[2].textContent === {json.dumps(user)})"
        )
        audit: list[Any] = await _rows(page, "audit")
        entry = next(r for r in audit if r[2] == user)
        assert "1" in entry[3]  # the counts
        assert entry[4]  # the caller

        await _login(page, ui, "b-admin")
        assert all(r[2] != user for r in await _rows(page, "audit"))
        assert page.errors == []

"""The inspector page (`serve --ui`) against hostile data, slow and failing
servers, key changes and concurrent clicks, in a real headless Chromium
(tests/servers/chromium.py) against a real `agent-memory serve`: stored text
stays inert and inside its card, answers that arrive late or for another
query or key are never shown as current, a failure or a stall is a visible
error, logging out leaves nothing of the previous key in the page, a forget
is confirmed for the subject it names, and the page says what it did not load.

One browser for the module (a fresh tab per test); network stalls are made
with the DevTools protocol's Fetch domain (the request is held in the browser)
or by stopping the server process (SIGSTOP)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from server.live import LiveServer, unique
from server.test_ui import _login, _rows, _submit
from servers.chromium import Browser, CdpError, Page, launch_chromium

pytestmark = pytest.mark.asyncio(loop_scope="module")

XSS = (
    '<img src=x onerror="window.__xss=1"><svg onload="window.__xss=2"></svg>'
    '</script><script>window.__xss=3</script><a href="javascript:window.__xss=4">x</a>'
    "<style>body{display:none}</style>"
)
LONG = "W" * 400  # one unbroken word, far wider than a card


@pytest.fixture(scope="module")
def hunt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    a, b, c = unique("hunt-a-"), unique("hunt-b-"), unique("hunt-c-")
    server = LiveServer(
        f"sqlite:///{tmp_path_factory.mktemp('ui-hunt') / 'memory.db'}",
        {
            "a": {"tenant": a},
            "a-admin": {"tenant": a, "admin": True},
            "b": {"tenant": b},
            "b-admin": {"tenant": b, "admin": True},
            "c-admin": {"tenant": c, "admin": True},
            "alice": {"tenant": a, "user": "alice", "admin": True},
        },
        extra_args=("--ui", "--rate", "5000", "--burst", "5000"),
    ).start()
    try:
        yield server
    finally:
        server.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with launch_chromium() as b:
        yield b


class _Tee:
    """A CDP websocket that hands `Fetch.requestPaused` events to `sink` too."""

    def __init__(self, ws: Any, sink: Callable[[dict[str, Any]], None]) -> None:
        self._ws, self._sink = ws, sink

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[Any]:
        async for raw in self._ws:
            if '"Fetch.requestPaused"' in raw:
                self._sink(json.loads(raw)["params"])
            yield raw

    async def send(self, data: str) -> None:
        await self._ws.send(data)

    async def close(self) -> None:
        await self._ws.close()


class NetPage(Page):
    """A tab that can hold requests in the browser (CDP Fetch) and let them go."""

    paused: asyncio.Queue[dict[str, Any]]

    async def hold(self, url_pattern: str) -> None:
        """Hold every request whose URL matches (`*` wildcards) until `release`."""
        await self.send(
            "Fetch.enable", patterns=[{"urlPattern": url_pattern, "requestStage": "Request"}]
        )

    async def held(self, timeout: float = 10.0) -> dict[str, Any]:
        return await asyncio.wait_for(self.paused.get(), timeout)

    async def release(self, request: dict[str, Any]) -> None:
        await self.send("Fetch.continueRequest", requestId=request["requestId"])

    async def stop_holding(self) -> None:
        await self.send("Fetch.disable")


async def _page(browser: Browser, server: LiveServer) -> NetPage:
    from websockets.asyncio.client import connect

    async with httpx.AsyncClient() as http:
        r = await http.put(f"http://127.0.0.1:{browser.port}/json/new?about:blank", timeout=10)
        r.raise_for_status()
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    ws = await connect(r.json()["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024)
    page = NetPage(_Tee(ws, queue.put_nowait))
    page.paused = queue
    await page.start()
    browser._pages.append(page)
    await page.goto(server.base + "/ui")
    return page


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser, hunt: LiveServer) -> AsyncIterator[NetPage]:
    tab = await _page(browser, hunt)
    try:
        yield tab
    finally:
        await tab.goto("about:blank")


def _api(server: LiveServer, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.base, headers=server.headers(key), timeout=30)


def _remember(server: LiveServer, key: str, user: str, facts: list[str], ns: str = "n") -> None:
    with _api(server, key) as api:
        r = api.post(
            "/v1/users/remember",
            json={
                "user_id": user,
                "namespace": ns,
                "facts": [{"content": f, "category": "preference"} for f in facts],
            },
        )
        assert r.status_code == 200, r.text


def _open_request(server: LiveServer, key: str, domain: str, **extra: Any) -> str:
    rid = unique("req-")
    with _api(server, key) as api:
        r = api.post(
            "/v1/requests",
            json={"agent": "bot", "domain": domain, "request_id": rid, **extra},
        )
        assert r.status_code == 201, r.text
    return rid


def _finish(server: LiveServer, key: str, *rids: str) -> None:
    with _api(server, key) as api:
        for rid in rids:
            api.post("/v1/requests/finish", json={"request_id": rid})


def _files_containing(root: Path, text: str) -> list[Path]:
    """Files under `root` holding `text` (files the browser removes meanwhile skipped)."""
    needle, found = text.encode(), []
    for path in root.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file() and needle in path.read_bytes():
                found.append(path)
    return found


def _chip(domain: str) -> str:
    """A JS expression: the domain's chip button in the domains list, or undefined."""
    return (
        "[...document.querySelectorAll('#domains button')]"
        f".find(b => b.dataset.domain === {json.dumps(domain)})"
    )


async def _text(page: Page, selector: str) -> str:
    value: str = await page.eval(f"document.querySelector({json.dumps(selector)}).textContent")
    return value


async def _show_facts(page: Page, user: str, ns: str = "") -> None:
    await page.fill("#user", user)
    await page.fill("#namespace", ns)
    await _submit(page, "user-form", "facts")


# -- stored text is inert --------------------------------------------------------------------
async def test_hostile_text_is_inert_in_every_panel(hunt: LiveServer, page: NetPage) -> None:
    """Markup in facts, user ids, namespaces, domains, agents, entities, events and
    audit subjects is shown as text: nothing runs, no element is injected, no
    CSP violation is even attempted, and the page keeps its security headers."""
    user, domain = XSS + "u", XSS + "d"
    _remember(hunt, "a-admin", user, [XSS + " fact"], ns=XSS)
    rid = _open_request(
        hunt, "a-admin", domain, doing=XSS, entities=[{"type": XSS, "id": XSS}], agent=XSS
    )
    try:
        with _api(hunt, "a-admin") as api:
            r = api.post("/v1/requests/steps", json={
                "request_id": rid,
                "steps": [{"action": XSS, "response": XSS, "outcome": XSS, "metadata": {XSS: XSS}}],
            })  # fmt: skip
            assert r.status_code == 200, r.text
        await _login(page, hunt, "a-admin")
        await page.wait_for(f"!!{_chip(domain)}")
        await page.fill("#domain", domain)
        await _submit(page, "domain-form", "events")
        await page.wait_for("document.querySelectorAll('#events tbody tr').length > 0")
        await _show_facts(page, user, XSS)
        await page.fill("#query", "fact")
        await _submit(page, "search-form", "results")
        for _ in range(2):
            await page.click("#forget-user")
        await page.wait_for("!document.getElementById('receipt-card').hidden")
        await page.wait_for(
            "[...document.querySelectorAll('#audit tbody tr')]"
            f".some(tr => tr.cells[2].textContent === {json.dumps(user)})"
        )
        assert (await _rows(page, "signals"))[0][:3] == [XSS, rid, XSS]
        assert XSS in await page.eval("document.body.textContent")
        assert await page.eval("window.__xss") is None
        injected = "main img, main svg, main script, main style, main a, main iframe, main object"
        assert await page.eval(f"document.querySelectorAll({json.dumps(injected)}).length") == 0
        assert await page.eval("getComputedStyle(document.body).display") == "block"
        assert page.errors == []
    finally:
        _finish(hunt, "a-admin", rid)
    with _api(hunt, "a") as api:
        r = api.get("/ui")
    csp = {d.split()[0]: d.split()[1:] for d in r.headers["content-security-policy"].split("; ")}
    assert csp["default-src"] == ["'none'"]
    assert csp["script-src"] == ["'self'"]
    assert csp["frame-ancestors"] == ["'none'"]
    assert csp["base-uri"] == ["'none'"]
    assert r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["cache-control"] == "no-store"
    assert r.headers["x-content-type-options"] == "nosniff"


async def test_long_unbroken_text_stays_inside_its_card(hunt: LiveServer, page: NetPage) -> None:
    """An unbroken 400-character domain, user id or namespace wraps inside its
    card: the page does not grow sideways and no card's content spills over its
    neighbour (the domain chip and the receipt used to run across the page)."""
    user, domain = "u" + LONG, "d" + LONG
    _remember(hunt, "a", user, ["short fact"], ns="n" + LONG)
    rid = _open_request(hunt, "a", domain, entities=[{"type": "t", "id": LONG}])
    try:
        await _login(page, hunt, "a")
        await page.wait_for(f"!!{_chip(domain)}")
        await page.fill("#domain", domain)
        await _submit(page, "domain-form", "events")
        await _show_facts(page, user, "n" + LONG)
        for _ in range(2):
            await page.click("#forget-user")
        await page.wait_for("!document.getElementById('receipt-card').hidden")
        await page.wait_for("document.getElementById('receipt').textContent.includes('WWW')")
        width = await page.eval(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert width[0] <= width[1], f"the page scrolls sideways: {width}"
        spilled = await page.eval(
            "[...document.querySelectorAll('.card')].filter(c => !c.hidden && "
            "c.scrollWidth > c.clientWidth + 1).map(c => c.id)"
        )
        assert spilled == [], f"content wider than its card: {spilled}"
    finally:
        _finish(hunt, "a", rid)


async def test_bidi_override_in_a_domain_cannot_reorder_its_count(
    hunt: LiveServer, page: NetPage
) -> None:
    """A domain ending in U+202E (right-to-left override) must not reverse the
    server's count next to it: 12 open requests read "(12)", not "(21)"."""
    domain = unique("ops-") + "\u202e"
    rids = [_open_request(hunt, "b", domain) for _ in range(12)]
    try:
        await _login(page, hunt, "b")
        await page.wait_for(f"!!{_chip(domain)}")
        # the on-screen x of the characters "1" and "2" of the count
        xs = await page.eval(f"""(() => {{
            const b = {_chip(domain)};
            const walker = document.createTreeWalker(b, NodeFilter.SHOW_TEXT);
            const at = {{}};
            for (let n = walker.nextNode(); n; n = walker.nextNode()) {{
              const i = n.data.indexOf("(12)");
              if (i < 0) continue;
              for (const [k, off] of [["one", i + 1], ["two", i + 2]]) {{
                const r = document.createRange();
                r.setStart(n, off); r.setEnd(n, off + 1);
                at[k] = r.getBoundingClientRect().x;
              }}
            }}
            return at;
        }})()""")
        assert set(xs) == {"one", "two"}, xs
        assert xs["one"] < xs["two"], f"the count is shown reversed: {xs}"
    finally:
        _finish(hunt, "b", *rids)


async def test_private_data_is_not_written_to_the_browser_cache(
    hunt: LiveServer, browser: Browser, page: NetPage
) -> None:
    """The page is `no-store`, and so are the facts it fetches: a user's facts
    do not end up in the browser's disk cache."""
    secret = unique("SECRETFACT")
    _remember(hunt, "a", "cache-user", [f"{secret} has a locker"])
    await _login(page, hunt, "a")
    await _show_facts(page, "cache-user")
    assert any(secret in r[0] for r in await _rows(page, "facts"))
    await page.goto("about:blank")
    await asyncio.sleep(1.5)  # the cache writes in the background
    found = _files_containing(browser.profile, secret)
    assert found == [], f"a fact in the browser's disk cache: {found}"


# -- stale answers -------------------------------------------------------------------------------
async def test_a_failed_query_does_not_leave_the_previous_users_facts(
    hunt: LiveServer, page: NetPage
) -> None:
    """Facts of user A, then a query for another user that the server refuses:
    the error is shown and A's facts are gone, not left under the new user id
    with Forget buttons as if they were that user's."""
    user = unique("ann-")
    _remember(hunt, "a", user, ["Ann keeps a kayak"])
    await _login(page, hunt, "a")
    await _show_facts(page, user)
    assert [r[0] for r in await _rows(page, "facts")] == ["Ann keeps a kayak"]
    await page.fill("#query", "kayak")
    await _submit(page, "search-form", "results")
    assert len(await _rows(page, "results")) == 1

    await page.fill("#user", "x" * 600)  # over the id limit: a 422 from the server
    await page.click("#user-form button[type=submit]")
    await page.wait_for("document.getElementById('user-error').textContent")
    assert (await _text(page, "#user-error")).startswith("422")
    assert await _rows(page, "facts") == []
    await page.click("#search-form button[type=submit]")
    await page.wait_for("document.getElementById('user-error').textContent.startsWith('422')")
    assert await _rows(page, "results") == []
    assert "kayak" not in await page.eval("document.getElementById('app').innerText")


async def test_a_late_answer_for_the_previous_user_is_not_shown(
    hunt: LiveServer, page: NetPage
) -> None:
    """Show user A (its answer is slow), then user B: when A's answer arrives
    after B's, the table still shows B's facts under B's id."""
    slow, fast = unique("slow-"), unique("fast-")
    _remember(hunt, "a", slow, ["Slow owns a sloth"])
    _remember(hunt, "a", fast, ["Fast owns a falcon"])
    await _login(page, hunt, "a")
    await page.hold(f"*user_id={slow}*")
    await page.fill("#user", slow)
    await page.click("#user-form button[type=submit]")
    held = await page.held()
    await _show_facts(page, fast)
    assert [r[0] for r in await _rows(page, "facts")] == ["Fast owns a falcon"]
    renders = await page.eval("document.getElementById('facts').dataset.renders")
    await page.release(held)
    await page.stop_holding()
    await asyncio.sleep(1.0)
    assert [r[0] for r in await _rows(page, "facts")] == ["Fast owns a falcon"], (
        "the late answer for the previous user replaced the current one"
    )
    assert await page.eval("document.getElementById('facts').dataset.renders") == renders


async def test_while_a_query_runs_the_previous_result_is_not_shown_as_current(
    hunt: LiveServer, page: NetPage
) -> None:
    """While the facts of the newly asked user are on their way, the table does
    not present the previous user's facts (and their Forget buttons) as current."""
    first, second = unique("first-"), unique("second-")
    _remember(hunt, "a", first, ["First plays the flute"])
    _remember(hunt, "a", second, ["Second plays the cello"])
    await _login(page, hunt, "a")
    await _show_facts(page, first)
    await page.hold(f"*user_id={second}*")
    await page.fill("#user", second)
    await page.click("#user-form button[type=submit]")
    held = await page.held()
    shown = await page.eval("document.getElementById('app').innerText")
    busy = await page.eval("document.getElementById('facts').getAttribute('aria-busy')")
    await page.release(held)
    await page.stop_holding()
    await page.wait_for("document.querySelector('#facts tbody').textContent.includes('cello')")
    assert "flute" not in shown, "the previous user's facts shown while loading another's"
    assert busy == "true"


async def test_a_late_domain_answer_is_not_shown_under_another_domain(
    hunt: LiveServer, page: NetPage
) -> None:
    """Click domain A (slow), then domain B: A's agents arriving last do not
    replace B's under the heading "in B"."""
    da, db = unique("dom-a-"), unique("dom-b-")
    ra = _open_request(hunt, "a", da, doing="working on A")
    rb = _open_request(hunt, "a", db, doing="working on B")
    try:
        await _login(page, hunt, "a")
        await page.hold(f"*/v1/activity?domain={da}*")
        await page.fill("#domain", da)
        await page.click("#domain-form button[type=submit]")
        held = await page.held()
        await page.fill("#domain", db)
        await page.click("#domain-form button[type=submit]")
        await page.wait_for(
            "document.querySelector('#signals tbody').textContent.includes('working on B')"
        )
        await page.release(held)
        await asyncio.sleep(1.0)
        assert await _text(page, "#domain-name") == f"in {db}"
        assert [r[2] for r in await _rows(page, "signals")] == ["working on B"]
    finally:
        _finish(hunt, "a", ra, rb)


async def test_a_stalled_server_gives_a_clear_error(
    tmp_path_factory: pytest.TempPathFactory, browser: Browser
) -> None:
    """A server that stops answering (the process is stopped): the query ends
    with a visible error within the page's deadline, and the previous user's
    facts are not left standing as the answer."""
    server = LiveServer(
        f"sqlite:///{tmp_path_factory.mktemp('stall') / 'memory.db'}",
        {"k": {"tenant": unique("stall-")}},
        extra_args=("--ui",),
    ).start()
    try:
        _remember(server, "k", "sam", ["Sam sails"])
        page = await _page(browser, server)
        await _login(page, server, "k")
        await _show_facts(page, "sam")
        await page.eval("document.documentElement.dataset.timeoutMs = '1500'")
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            await page.fill("#user", "tom")
            await page.click("#user-form button[type=submit]")
            await page.wait_for("document.getElementById('user-error').textContent", timeout=8)
            error = await _text(page, "#user-error")
            assert "timed out" in error or "no answer" in error, error
            assert await _rows(page, "facts") == []
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        await page.goto("about:blank")
    finally:
        server.close()


# -- keys and sessions --------------------------------------------------------------------------
async def test_logging_out_leaves_nothing_of_the_previous_key(
    hunt: LiveServer, page: NetPage
) -> None:
    """After Log out (and after logging in with another tenant's key) nothing
    the first key could read is left in the page, hidden parts included: not
    its domains, digest, user ids, facts, receipt or the note about them."""
    user, domain = unique("priv-user-"), unique("priv-domain-")
    _remember(hunt, "a-admin", user, [f"fact{i} of {user}" for i in range(3)])
    rid = _open_request(hunt, "a-admin", domain, doing="private doing")
    try:
        await _login(page, hunt, "a-admin")
        await page.fill("#domain", domain)
        await _submit(page, "domain-form", "events")
        await _show_facts(page, user, "n")
        await page.fill("#query", "fact1")
        await _submit(page, "search-form", "results")
        forget = "#facts tbody tr button"
        await page.click(forget)
        await page.click(forget)
        await page.wait_for("!document.getElementById('receipt-card').hidden")
        await page.click("#logout")
        await page.wait_for("!document.getElementById('login').hidden")
        everything = await page.eval(
            "document.body.textContent + [...document.querySelectorAll('input')]"
            ".map(i => i.value).join(' ')"
        )
        for secret in (user, domain, "private doing"):
            assert secret not in everything, f"{secret!r} left in the page after logging out"
        await _login(page, hunt, "b")
        everything = await page.eval(
            "document.body.textContent + [...document.querySelectorAll('input')]"
            ".map(i => i.value).join(' ')"
        )
        for secret in (user, domain, "private doing"):
            assert secret not in everything, f"{secret!r} shown to another tenant's key"
        assert await _text(page, "#facts-more") == ""
        assert await _text(page, "#search-mode") == ""
    finally:
        _finish(hunt, "a-admin", rid)


async def test_an_answer_from_before_logging_out_is_not_shown_to_the_next_key(
    hunt: LiveServer, page: NetPage
) -> None:
    """Tenant a's facts query is on its way when the user logs out and logs in
    with tenant b's key: a's answer, arriving now, is dropped."""
    user = unique("late-")
    _remember(hunt, "a", user, ["Late tenant-a fact"])
    await _login(page, hunt, "a")
    await page.hold(f"*user_id={user}*")
    await page.fill("#user", user)
    await page.click("#user-form button[type=submit]")
    held = await page.held()
    await _login(page, hunt, "b")
    with contextlib.suppress(CdpError):  # logging out may have cancelled it already
        await page.release(held)
    await page.stop_holding()
    await asyncio.sleep(1.0)
    assert "Late tenant-a fact" not in await page.eval("document.body.textContent")
    assert await _rows(page, "facts") == []


async def test_a_user_bound_key_shows_no_other_users_data(hunt: LiveServer, page: NetPage) -> None:
    """A key bound to alice: asking the page for bob's facts, searching them or
    forgetting bob is refused with the reason; bob's facts never appear."""
    _remember(hunt, "a", "alice", ["Alice likes alpacas"])
    _remember(hunt, "a", "bob", ["Bob likes bobcats"])
    await _login(page, hunt, "alice")
    await _show_facts(page, "alice")
    assert [r[0] for r in await _rows(page, "facts")] == ["Alice likes alpacas"]
    await page.fill("#user", "bob")
    await page.click("#user-form button[type=submit]")
    await page.wait_for("document.getElementById('user-error').textContent.startsWith('403')")
    await page.fill("#query", "bobcats")
    await page.click("#search-form button[type=submit]")
    await asyncio.sleep(0.5)
    await page.wait_for("document.getElementById('user-error').textContent.startsWith('403')")
    for _ in range(2):
        await page.click("#forget-user")
    await asyncio.sleep(0.5)
    await page.wait_for("document.getElementById('user-error').textContent.startsWith('403')")
    assert "bobcats" not in await page.eval("document.body.textContent")
    assert await page.eval("document.getElementById('receipt-card').hidden")
    with _api(hunt, "a") as api:
        facts = api.get("/v1/users/facts", params={"user_id": "bob"}).json()["facts"]
    assert [f["content"] for f in facts] == ["Bob likes bobcats"]


# -- forget ----------------------------------------------------------------------------------------
async def test_forget_user_confirmation_is_for_the_user_it_names(
    hunt: LiveServer, page: NetPage
) -> None:
    """A "Forget this user" armed for one user and then pressed for another user
    (or after logging out and in) asks again: one press never forgets."""
    first, second, third = unique("keep-1-"), unique("keep-2-"), unique("keep-3-")
    for user in (first, second, third):
        _remember(hunt, "a", user, [f"{user} is kept"])
    await _login(page, hunt, "a")
    await _show_facts(page, first)
    await page.click("#forget-user")  # armed for `first`
    assert (await _text(page, "#forget-user")).startswith("Really forget")
    await _show_facts(page, second)
    await page.click("#forget-user")  # a first press for `second`
    await asyncio.sleep(0.5)
    assert await page.eval("document.getElementById('receipt-card').hidden"), (
        "one press forgot another user"
    )
    await page.click("#logout")
    await _login(page, hunt, "a")
    await _show_facts(page, third)
    assert await _text(page, "#forget-user") == "Forget this user"
    with _api(hunt, "a") as api:
        for user in (first, second, third):
            left = api.get("/v1/users/facts", params={"user_id": user}).json()["facts"]
            assert [f["content"] for f in left] == [f"{user} is kept"]


async def test_forgetting_a_fact_that_is_already_gone_refreshes_the_list(
    hunt: LiveServer, page: NetPage
) -> None:
    """A fact forgotten elsewhere (another tab, the API) and then forgotten in
    the page: the page says it is not found and no longer lists it."""
    user = unique("gone-")
    _remember(hunt, "a", user, ["Gone fact", "Kept fact"])
    await _login(page, hunt, "a")
    await _show_facts(page, user)
    fact_id = await page.eval(
        "[...document.querySelectorAll('#facts tbody tr')]"
        ".find(tr => tr.cells[0].textContent === 'Gone fact').dataset.factId"
    )
    with _api(hunt, "a") as api:
        r = api.post("/v1/users/facts/forget", json={"user_id": user, "fact_id": fact_id})
        assert r.status_code == 200, r.text
    button = f'#facts tr[data-fact-id="{fact_id}"] button'
    await page.click(button)
    await page.click(button)
    await page.wait_for("document.getElementById('user-error').textContent.startsWith('404')")
    await page.wait_for(f"!document.querySelector('#facts tr[data-fact-id=\"{fact_id}\"]')")
    assert [r[0] for r in await _rows(page, "facts")] == ["Kept fact"]


# -- what was not loaded, and paging ------------------------------------------------------------
async def test_events_cut_by_the_limit_say_so(hunt: LiveServer, page: NetPage) -> None:
    """30 events in a domain, 20 shown: the page says older events were not
    loaded (as it does for facts), and says nothing when all are shown."""
    busy, quiet = unique("busy-"), unique("quiet-")
    rid = _open_request(hunt, "a", busy)
    rq = _open_request(hunt, "a", quiet)
    try:
        with _api(hunt, "a") as api:
            for r_id, n in ((rid, 30), (rq, 3)):
                r = api.post("/v1/requests/steps", json={
                    "request_id": r_id,
                    "steps": [{"action": f"step {i}", "response": "ok"} for i in range(n)],
                })  # fmt: skip
                assert r.status_code == 200, r.text
        await _login(page, hunt, "a")
        await page.fill("#domain", busy)
        await _submit(page, "domain-form", "events")
        assert len(await _rows(page, "events")) == 20
        note = await page.eval("document.getElementById('domain-view').innerText")
        assert "older events" in note, note
        await page.fill("#domain", quiet)
        await _submit(page, "domain-form", "events")
        assert len(await _rows(page, "events")) == 3
        note = await page.eval("document.getElementById('domain-view').innerText")
        assert "older events" not in note, note
    finally:
        _finish(hunt, "a", rid, rq)


async def test_older_audit_entries_clicked_twice_are_not_listed_twice(
    hunt: LiveServer, page: NetPage
) -> None:
    """A double click on "Older entries" loads the next page once: every entry
    is listed once, newest first, as the API has them."""
    user = unique("audited-")
    _remember(hunt, "c-admin", user, [f"fact {i}" for i in range(45)])
    with _api(hunt, "c-admin") as api:
        facts = api.get("/v1/users/facts", params={"user_id": user, "limit": 100}).json()
        for f in facts["facts"]:
            r = api.post("/v1/users/facts/forget", json={"user_id": user, "fact_id": f["id"]})
            assert r.status_code == 200, r.text
        want = [e["id"] for e in api.get("/v1/audit", params={"limit": 200}).json()["entries"]]
    await _login(page, hunt, "c-admin")
    await page.wait_for("document.querySelectorAll('#audit tbody tr').length === 20")
    await page.hold("*/v1/audit?*before=*")
    await page.click("#audit-more")
    await page.click("#audit-more")
    first = await page.held()
    await page.release(first)
    await asyncio.sleep(0.3)
    with contextlib.suppress(TimeoutError):
        await page.release(await page.held(timeout=1.0))
    await page.stop_holding()
    await page.wait_for("document.querySelectorAll('#audit tbody tr').length >= 40")
    await asyncio.sleep(0.5)
    rows = await _rows(page, "audit")
    assert len(rows) == 40, f"{len(rows)} rows for the first 40 entries"
    assert len(want) >= 45

"""A real headless Chromium for the browser tests, driven over the Chrome
DevTools Protocol (CDP) with `websockets`: no WebDriver, no browser download.

Chromium is the Debian package `chromium`. When /usr/bin/chromium is missing,
`ensure_chromium()` installs it with apt-get (once per machine, under a file
lock so parallel pytest processes do not run apt together). A browser that
cannot be installed or started fails the test with its output: it is never
skipped.

    async with launch_chromium() as browser:
        page = await browser.new_page()
        await page.goto("http://127.0.0.1:8080/ui")
        await page.fill("#key", "...")
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

__all__ = ["CHROMIUM", "Browser", "Page", "ensure_chromium", "launch_chromium"]

CHROMIUM = Path(os.environ.get("AGENT_MEMORY_CHROMIUM", "/usr/bin/chromium"))
_LOCK = Path(tempfile.gettempdir()) / "agent-memory-chromium-install.lock"
_PACKAGES = ("chromium",)

# Without the background-networking flags Chromium keeps dialling out (updates,
# sync, field trials); on a closed network that stalls or refuses its connections.
FLAGS = (
    "--headless",
    "--no-sandbox",  # running as root in a container
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


def ensure_chromium(timeout: float = 900.0) -> Path:
    """The Chromium binary, installed from Debian's packages when missing."""
    if CHROMIUM.exists():
        return CHROMIUM
    apt = shutil.which("apt-get")
    if apt is None:
        raise RuntimeError(f"{CHROMIUM} is missing and there is no apt-get to install `chromium`")
    with _LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be installing it right now
        if CHROMIUM.exists():
            return CHROMIUM
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (
            [apt, "update", "-q"],
            [apt, "install", "-y", "-q", "--no-install-recommends", *_PACKAGES],
        ):
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
            if proc.returncode != 0:
                raise RuntimeError(
                    f"installing Chromium failed: {' '.join(cmd)} exited {proc.returncode}\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
                )
    if not CHROMIUM.exists():
        raise RuntimeError(f"apt-get installed {_PACKAGES} but {CHROMIUM} is still missing")
    return CHROMIUM


class CdpError(RuntimeError):
    pass


class Page:
    """One tab over its own CDP websocket: navigate, evaluate, type, click, screenshot."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.errors: list[str] = []
        """Uncaught JavaScript exceptions and console errors of the page (not the
        browser's own lines about HTTP error statuses, which the page handles)."""
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for raw in self._ws:
            msg = json.loads(raw)
            if "id" in msg:
                fut = self._pending.pop(msg["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
            elif msg.get("method") == "Runtime.exceptionThrown":
                details = msg["params"]["exceptionDetails"]
                self.errors.append(str(details.get("exception", {}).get("description", details)))
            elif msg.get("method") == "Runtime.consoleAPICalled":
                if msg["params"].get("type") == "error":
                    args = msg["params"].get("args", [])
                    self.errors.append(" ".join(str(a.get("value", a)) for a in args))
            elif msg.get("method") == "Log.entryAdded":
                entry = msg["params"]["entry"]
                if entry.get("level") == "error" and entry.get("source") != "network":
                    self.errors.append(f"{entry.get('source')}: {entry.get('text')}")

    async def send(self, method: str, timeout: float = 15.0, **params: Any) -> dict[str, Any]:
        n = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[n] = fut
        await self._ws.send(json.dumps({"id": n, "method": method, "params": params}))
        msg = await asyncio.wait_for(fut, timeout)
        if "error" in msg:
            raise CdpError(f"{method}: {msg['error']}")
        result: dict[str, Any] = msg.get("result", {})
        return result

    async def start(self) -> Page:
        for domain in ("Page", "Runtime", "Log"):
            await self.send(f"{domain}.enable")
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            width=1280,
            height=900,
            deviceScaleFactor=1,
            mobile=False,
        )
        return self

    async def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression (promises awaited)."""
        out = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in out:
            raise CdpError(f"{expression!r}: {out['exceptionDetails']}")
        return out["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 10.0) -> Any:
        """Poll until the expression is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = await self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"not true after {timeout}s: {expression}")
            await asyncio.sleep(0.05)

    async def goto(self, url: str) -> None:
        out = await self.send("Page.navigate", url=url)
        if out.get("errorText"):
            raise CdpError(f"navigating to {url}: {out['errorText']}")
        await self.wait_for("document.readyState === 'complete'")

    async def fill(self, selector: str, text: str) -> None:
        """Focus the field, clear it and type `text` as keyboard input."""
        sel = json.dumps(selector)
        await self.eval(f"(() => {{ const e = document.querySelector({sel}); e.focus(); "
                        "e.select(); return true; })()")  # fmt: skip
        await self.send("Input.dispatchKeyEvent", type="keyDown", key="Delete", code="Delete",
                        windowsVirtualKeyCode=46)  # fmt: skip
        await self.send("Input.dispatchKeyEvent", type="keyUp", key="Delete", code="Delete",
                        windowsVirtualKeyCode=46)  # fmt: skip
        await self.send("Input.insertText", text=text)

    async def click(self, selector: str) -> None:
        """A real mouse click in the middle of the (visible) element."""
        sel = json.dumps(selector)
        box = await self.wait_for(
            f"(() => {{ const e = document.querySelector({sel}); if (!e) return null; "
            "e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); "
            "return r.width && r.height ? [r.x + r.width / 2, r.y + r.height / 2] : null; })()"
        )
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            await self.send(
                "Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1
            )

    async def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page."""
        height = await self.eval("document.documentElement.scrollHeight")
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            width=1280,
            height=int(min(max(height, 600), 4000)),
            deviceScaleFactor=1,
            mobile=False,
        )
        out = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        return _write(path, base64.b64decode(out["data"]))

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader
        await self._ws.close()


class Browser:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, profile: Path) -> None:
        self.proc = proc
        self.port = port
        self.profile = profile
        self._pages: list[Page] = []

    async def new_page(self) -> Page:
        from websockets.asyncio.client import connect

        async with httpx.AsyncClient() as http:
            r = await http.put(f"http://127.0.0.1:{self.port}/json/new?about:blank", timeout=10)
            r.raise_for_status()
        ws = await connect(r.json()["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024)
        page = await Page(ws).start()
        self._pages.append(page)
        return page

    async def close(self) -> None:
        for page in self._pages:
            with contextlib.suppress(Exception):
                await page.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def _spawn(binary: Path, profile: Path, timeout: float) -> tuple[subprocess.Popen[bytes], int]:
    """Start Chromium and wait for its DevTools port (it writes DevToolsActivePort)."""
    log = profile / "chromium.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(binary), *FLAGS, f"--user-data-dir={profile / 'profile'}", "about:blank"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    port_file = profile / "profile" / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            text = log.read_text(errors="replace")[-4000:]
            shutil.rmtree(profile, ignore_errors=True)
            raise RuntimeError(
                f"Chromium did not start ({binary}, exit {proc.returncode}):\n{text}"
            )
        time.sleep(0.05)
    return proc, int(port_file.read_text().split()[0])


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@contextlib.asynccontextmanager
async def launch_chromium(timeout: float = 30.0) -> AsyncIterator[Browser]:
    """Start headless Chromium on a fresh profile; it is stopped on exit."""
    profile = Path(tempfile.mkdtemp(prefix="agent-memory-chromium-"))
    proc, port = _spawn(ensure_chromium(), profile, timeout)
    browser = Browser(proc, port, profile)
    try:
        yield browser
    finally:
        await browser.close()

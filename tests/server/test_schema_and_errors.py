"""The checked-in OpenAPI schema matches the app; an unhandled error is a 500
problem without a traceback; `import agent_memory` stays framework-free."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_memory.entrypoints.server.keys import KeyRing
from agent_memory.entrypoints.server.middleware import Guard

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "server-openapi.json"


def test_openapi_schema_has_not_drifted() -> None:
    from agent_memory.entrypoints.server.app import ServerConfig, create_app

    current = create_app(ServerConfig(), KeyRing(text='{"keys": []}')).openapi()
    checked_in = json.loads(SCHEMA.read_text())
    assert current == checked_in, (
        "docs/server-openapi.json is out of date: regenerate it with "
        "`agent-memory serve --openapi > docs/server-openapi.json`"
    )


def test_every_operation_documents_problem_responses() -> None:
    schema = json.loads(SCHEMA.read_text())
    for path, item in schema["paths"].items():
        for method, op in item.items():
            if path.startswith("/v1/health") or path.startswith("/v1/ready"):
                continue
            assert {"401", "422", "429"} <= set(op["responses"]), (method, path)
            assert op.get("security") == [{"HTTPBearer": []}], (method, path)


async def _boom(scope: dict[str, Any], receive: Any, send: Any) -> None:
    raise RuntimeError("secret internals /var/lib/x")


async def test_unhandled_error_is_a_500_problem(caplog: pytest.LogCaptureFixture) -> None:
    transport = httpx.ASGITransport(app=Guard(_boom, max_body_bytes=100))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        r = await client.get("/anything")
    assert r.status_code == 500
    assert r.headers["content-type"] == "application/problem+json"
    doc = r.json()
    assert doc["type"].endswith("/internal-error")
    assert "secret" not in r.text
    assert "Traceback" not in r.text
    assert any("RuntimeError" in rec.getMessage() for rec in caplog.records)  # logged, not sent


def test_import_agent_memory_does_not_load_the_web_framework() -> None:
    code = (
        "import sys, agent_memory, agent_memory.cli\n"
        "agent_memory.cli._parser()\n"
        "import agent_memory.entrypoints.server\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette', 'uvicorn')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_serve_without_keys_is_a_usage_error(tmp_path: Path) -> None:
    env = {"PATH": "", "HOME": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-m", "agent_memory.cli", "serve", "--url", "memory://"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "no API keys configured" in r.stderr
    assert "Traceback" not in r.stderr


def _cli(*args: str, keys: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("AGENT_MEMORY")}
    if keys is not None:
        env["AGENT_MEMORY_SERVER_KEYS_FILE"] = str(keys)
    return subprocess.run(
        [sys.executable, "-m", "agent_memory.cli", "serve", *args],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


def test_serve_help_and_usage_errors(tmp_path: Path) -> None:
    helped = _cli("--help")
    assert helped.returncode == 0
    assert "HTTP" in helped.stdout
    assert _cli("--no-such-option").returncode == 2
    keys = tmp_path / "keys.json"
    keys.write_text('{"keys": []}')
    bad_url = _cli("--url", "mongodb://x", keys=keys)
    assert bad_url.returncode == 2, bad_url.stderr
    assert bad_url.stderr.startswith("agent-memory serve: UnsupportedBackend"), bad_url.stderr
    keys.write_text(
        '{"keys": [{"id": "k", "tenant": "Not/A/Tenant", "sha256": "' + "0" * 64 + '"}]}'
    )
    bad_keys = _cli("--url", "memory://", keys=keys)
    assert bad_keys.returncode == 2
    assert "tenant" in bad_keys.stderr
    for result in (bad_url, bad_keys):
        assert "Traceback" not in result.stderr


def test_new_key_prints_a_usable_entry() -> None:
    out = _cli("--new-key", "acme", "--read-only").stdout.splitlines()
    key = out[0].rsplit(" ", 1)[1]
    entry = json.loads(out[1].split(": ", 1)[1])
    ring = KeyRing(text=json.dumps({"keys": [entry]}))
    found = ring.authenticate(key)
    assert found is not None
    assert found.tenant.name == "acme"
    assert found.read_only is True
    assert ring.authenticate(key + "x") is None

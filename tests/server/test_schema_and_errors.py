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
        "import sys, agent_memory, agent_memory.entrypoints.cli\n"
        "agent_memory.entrypoints.cli._parser()\n"
        "import agent_memory.entrypoints.server\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette', 'uvicorn')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_serve_help_and_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process (`agent_memory.entrypoints.cli.main`): each is one line on stderr, exit 2."""
    from agent_memory.entrypoints.cli import main

    with pytest.raises(SystemExit) as helped:
        main(["serve", "--help"])
    assert helped.value.code == 0
    assert "HTTP" in capsys.readouterr().out
    for name in list(__import__("os").environ):
        if name.startswith("AGENT_MEMORY"):
            monkeypatch.delenv(name)
    assert main(["serve", "--url", "memory://"]) == 2
    assert "no API keys configured" in capsys.readouterr().err
    keys = tmp_path / "keys.json"
    keys.write_text('{"keys": []}')
    monkeypatch.setenv("AGENT_MEMORY_SERVER_KEYS_FILE", str(keys))
    assert main(["serve", "--url", "mongodb://x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agent-memory serve: UnsupportedBackend"), err
    bad = '{"keys": [{"id": "k", "tenant": "Not/A/Tenant", "sha256": "' + "0" * 64 + '"}]}'
    keys.write_text(bad)
    assert main(["serve", "--url", "memory://"]) == 2
    assert "tenant" in capsys.readouterr().err


def test_new_key_prints_a_usable_entry(capsys: pytest.CaptureFixture[str]) -> None:
    from agent_memory.entrypoints.cli import main

    assert main(["serve", "--new-key", "acme", "--read-only"]) == 0
    out = capsys.readouterr().out.splitlines()
    key = out[0].rsplit(" ", 1)[1]
    entry = json.loads(out[1].split(": ", 1)[1])
    ring = KeyRing(text=json.dumps({"keys": [entry]}))
    found = ring.authenticate(key)
    assert found is not None
    assert found.tenant.name == "acme"
    assert found.read_only is True
    assert ring.authenticate(key + "x") is None


def test_new_key_can_be_admin_and_bound_to_one_user(capsys: pytest.CaptureFixture[str]) -> None:
    from agent_memory.entrypoints.cli import main

    assert main(["serve", "--new-key", "acme", "--admin", "--bind-user", "alice"]) == 0
    out = capsys.readouterr().out.splitlines()
    key = out[0].rsplit(" ", 1)[1]
    entry = json.loads(out[1].split(": ", 1)[1])
    found = KeyRing(text=json.dumps({"keys": [entry]})).authenticate(key)
    assert found is not None
    assert (found.admin, found.user, found.read_only) == (True, "alice", False)
    plain = KeyRing(text=json.dumps({"keys": [{"id": "p", "tenant": "t", "sha256": "a" * 64}]}))
    assert plain.authenticate("x") is None  # a plain entry parses, defaults below
    (parsed,) = plain._keys.values()
    assert (parsed.admin, parsed.user) == (False, None)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"admin": "yes"}, "'admin'"),
        ({"user": ""}, "'user'"),
        ({"user": 7}, "'user'"),
        ({"user": "a\x00b"}, "'user'"),
        ({"role": "x"}, "unknown fields"),
    ],
)
def test_bad_admin_or_user_fields_are_named(extra: dict[str, object], named: str) -> None:
    from agent_memory.domain.errors import ConfigurationError

    entry = {"id": "k", "tenant": "acme", "sha256": "b" * 64, **extra}
    with pytest.raises(ConfigurationError, match=named):
        KeyRing(text=json.dumps({"keys": [entry]}))

"""`agent-memory audit`: lists and exports what real forgets recorded."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agent_memory.bootstrap.connect import connect
from agent_memory.entrypoints.cli import main
from agent_memory.services.audit import acting_as


async def _forget(url: str) -> None:
    async with connect(url) as memory:
        await memory.users.forget("ana")
        with acting_as("key-7", "acme"):
            await memory.users.forget_fact("t/acme/u/bo", "f1")


def test_lists_json_and_exports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENT_MEMORY_URL", raising=False)
    url = f"sqlite:///{tmp_path}/m.db"
    asyncio.run(_forget(url))
    assert main(["audit", "--url", url, "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(x["operation"], x["subject"], x["caller"], x["tenant"]) for x in lines] == [
        ("forget_fact", "bo", "key-7", "acme"),
        ("forget_user", "ana", "library", ""),
    ]
    assert lines[0]["at"].endswith("Z")
    assert main(["audit", "--url", url, "--tenant", "acme", "--limit", "5"]) == 0
    captured = capsys.readouterr()
    assert "forget_fact" in captured.out
    assert "forget_user" not in captured.out
    assert "1 audit entries" in captured.err
    out = tmp_path / "audit.jsonl"
    assert main(["audit", "--url", url, "--export", str(out)]) == 0
    assert [json.loads(x) for x in out.read_text().splitlines()] == lines
    assert main(["audit", "--url", url, "--json", "--since", "2999-01-01T00:00:00Z"]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--since", "yesterday"], "--since"),
        (["--since", "2025-01-01T00:00:00"], "--since"),
        (["--limit", "0"], "--limit"),
    ],
)
def test_bad_arguments_exit_2_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], named: str
) -> None:
    code = main(["audit", "--url", f"sqlite:///{tmp_path}/m.db", *args])
    assert code == 2
    err = capsys.readouterr().err
    assert "InvalidInput" in err
    assert named in err

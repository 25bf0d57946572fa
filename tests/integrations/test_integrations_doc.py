"""docs/integrations.md stays true: its LangGraph examples (async and
synchronous) run as printed, and its MCP client configuration starts a
server the SDK's client can use."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def example(name: str) -> str:
    match = re.search(rf"<!-- example: {name} -->\n```\w+\n(.*?)```", DOC.read_text(), flags=re.S)
    assert match, f"docs/integrations.md has no {name} example"
    return match.group(1)


@pytest.mark.parametrize("name", ["langgraph", "langgraph-sync"])
def test_langgraph_example_runs(tmp_path: Path, name: str) -> None:
    script = tmp_path / "example.py"
    script.write_text(example(name))
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "['I drink dark roast']"
    assert (tmp_path / "memory.db").exists()


async def test_mcp_client_configuration_starts_a_server(tmp_path: Path) -> None:
    config = json.loads(example("mcp-config"))["mcpServers"]["agent-memory"]
    command = shutil.which(config["command"], path=str(Path(sys.executable).parent))
    assert command, "the agent-memory command is installed beside the interpreter"
    # The SDK's minimal environment, plus PYTHONPATH: the server runs the code under test.
    env = get_default_environment() | {k: v for k, v in os.environ.items() if k == "PYTHONPATH"}
    params = StdioServerParameters(command=command, args=config["args"], cwd=tmp_path, env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        assert "remember" in tools
        facts = [{"content": "User likes tea", "category": "preference"}]
        result = await session.call_tool(
            "remember", {"user_id": "u1", "namespace": "n", "facts": facts}
        )
        assert not result.is_error, result
    assert (tmp_path / "memory.db").exists()

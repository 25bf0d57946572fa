"""docs/server.md: every curl example runs against a live server, and every
path of the schema is documented."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from server.live import LiveServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "server.md"
SCHEMA = DOC.parent / "server-openapi.json"


def _blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S)


def test_curl_examples_run(live: LiveServer) -> None:
    blocks = _blocks()
    assert len(blocks) >= 6
    env = {**os.environ, "AM": live.base, "KEY": live.key["acme"]}
    outputs = []
    for block in blocks:
        r = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert r.returncode == 0, (block, r.stdout, r.stderr)
        outputs.append(r.stdout)
    text = "\n".join(outputs)
    assert "window seats" in text  # the profile view
    assert '"acquired":true' in text  # the claim
    assert "OOMKilled" in text  # the recorded step, in the context and the events
    assert '"complete":true' in text  # the forget receipt
    assert "problem/validation-failed" in outputs[-1]


def test_every_path_is_documented() -> None:
    doc = DOC.read_text()
    for path, item in json.loads(SCHEMA.read_text())["paths"].items():
        for method in item:
            assert f"`{method.upper()} {path}`" in doc, (method, path)

"""Every option value of the `agent-memory` command under adversarial input:
negative, zero, huge, NaN/inf, other scripts' digits, `1_000`, empty and
blank strings, unknown enum values.

Each bad value is a usage error: exit 2 and ONE line on stderr,
`agent-memory COMMAND: InvalidInput: --option: what was wrong`, before anything
runs; never a traceback, never exit 1 with an untyped error, never accepted
silently. The whole matrix runs through `main()` in-process (a bad value never
gets past argument parsing; an accepted one is made harmless by the base
arguments); a representative set runs as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_memory.entrypoints.cli import main

MAX_BATCH = 10_000  # options.MAX_BATCH: --batch-size and --sample
MAX_SECONDS = 365 * 24 * 3600.0  # options.MAX_SECONDS: the longest duration option

NOT_ASCII = ["٣", "\uff15", "1_000", " 5", "5 ", "", " ", "+", "0x10", "1e3"]
NOT_NUMBER = ["nan", "NaN", "inf", "-inf", "1e999", "", " ", "٣", "\uff15", "1_0.5", "abc", "0x1p3"]


def _bad_ints(minimum: int, maximum: int) -> list[str]:
    return [str(minimum - 1), str(maximum + 1), str(10**30), "-1", *NOT_ASCII]


def _bad_seconds(zero: bool, maximum: float = MAX_SECONDS) -> list[str]:
    low = ["-1", "-0.001"] if zero else ["0", "-0", "0.0", "-1"]
    return [*low, str(maximum * 2), "1e30", *NOT_NUMBER]


BLANK = ["", " ", "\t", "\n"]

# (command, option, the other arguments that make an accepted value harmless,
#  bad values)
CASES: list[tuple[str, str, list[str], list[str]]] = [
    ("import", "--batch-size", ["--url", "memory://x", "missing.jsonl"], _bad_ints(1, MAX_BATCH)),
    (
        "migrate",
        "--batch-size",
        ["--from", "memory://a", "--to", "memory://b"],
        _bad_ints(1, MAX_BATCH),
    ),
    (
        "migrate",
        "--sample",
        ["--from", "memory://a", "--to", "memory://b"],
        _bad_ints(0, MAX_BATCH),
    ),
    (
        "reembed",
        "--batch-size",
        ["--url", "memory://x", "--to-model", "hashing"],
        _bad_ints(1, MAX_BATCH),
    ),
    (
        "reembed",
        "--dimension",
        ["--url", "memory://x", "--to-model", "hashing"],
        _bad_ints(1, 65_536),
    ),
    ("audit", "--limit", ["--url", "memory://x"], _bad_ints(1, 10_000)),
    ("serve", "--port", ["--openapi"], _bad_ints(0, 65_535)),
    ("serve", "--max-body-bytes", ["--openapi"], _bad_ints(1, 1024**3)),
    ("serve", "--burst", ["--openapi"], _bad_ints(1, 1_000_000)),
    ("serve", "--rate", ["--openapi"], _bad_seconds(False, 1_000_000.0)),
    ("serve", "--idle-timeout", ["--openapi"], _bad_seconds(False)),
    ("serve", "--request-timeout", ["--openapi"], _bad_seconds(False)),
    ("serve", "--drain-timeout", ["--openapi"], _bad_seconds(True)),
    ("mcp", "--port", ["--transport", "http"], _bad_ints(0, 65_535)),
    ("mcp", "--call-timeout", ["--transport", "http"], _bad_seconds(False)),
    ("mcp", "--transport", [], ["tcp", "HTTP", "", " stdio"]),
    ("export", "--skip", ["--url", "memory://x", "-o", "-"], ["bogus", "", "Events"]),
    ("import", "--skip", ["--url", "memory://x", "missing.jsonl"], ["bogus", ""]),
    ("migrate", "--skip", ["--from", "memory://a", "--to", "memory://b"], ["bogus"]),
    # strings: an empty one would mean "not given" (the default store!) or "."
    ("export", "--url", ["-o", "-"], BLANK),
    ("export", "--output", ["--url", "memory://x"], BLANK),
    ("export", "--user", ["--url", "memory://x", "-o", "-"], BLANK),
    ("export", "--namespace", ["--url", "memory://x", "-o", "-"], BLANK),
    ("import", "--url", ["missing.jsonl"], BLANK),
    ("migrate", "--from", ["--to", "memory://b"], BLANK),
    ("migrate", "--to", ["--from", "memory://a"], BLANK),
    ("reembed", "--url", ["--to-model", "hashing"], BLANK),
    ("reembed", "--to-model", ["--url", "memory://x"], BLANK),
    ("audit", "--url", [], BLANK),
    ("audit", "--export", ["--url", "memory://x"], BLANK),
    ("doctor", "--url", ["--config"], BLANK),
    ("reflect", "--url", ["--domain", "k8s"], BLANK),
    ("reflect", "--domain", ["--url", "memory://x"], BLANK),
    ("demo", "--url", [], BLANK),
    ("serve", "--url", ["--openapi"], BLANK),
    ("serve", "--keys", ["--openapi"], BLANK),
    ("mcp", "--url", ["--transport", "http", "--no-auth", "--keys", "k.json"], BLANK),
    ("mcp", "--keys", ["--transport", "http"], BLANK),
    ("processor", "--url", ["--nats", "nats://127.0.0.1:1"], BLANK),
    ("processor", "--nats", [], BLANK),
    ("processor", "--config", [], BLANK),
]

MATRIX = [
    pytest.param(command, option, base, value, id=f"{command} {option} {value!r}")
    for command, option, base, values in CASES
    for value in values
]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("AGENT_MEMORY_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AGENT_MEMORY_EMBEDDER", "hashing")
    monkeypatch.chdir(tmp_path)


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(("command", "option", "base", "value"), MATRIX)
def test_a_bad_option_value_is_one_typed_usage_line(
    command: str, option: str, base: list[str], value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([command, *base, f"{option}={value}"])
    err = capsys.readouterr().err
    assert code == 2, f"exit {code}: {err!r}"
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"agent-memory {command}: InvalidInput: {option}: "), err
    assert repr(value) in lines[0], "the line shows the value given"


# the same option given as a separate word (`--sample -1` is read as a value too)
@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    "argv",
    [
        ["migrate", "--from", "memory://a", "--to", "memory://b", "--sample", "-1"],
        ["reembed", "--url", "memory://x", "--to-model", "hashing", "--batch-size", "0"],
        ["serve", "--openapi", "--port", "-5"],
    ],
)
def test_a_bad_value_as_a_separate_word(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"agent-memory {argv[0]}: InvalidInput: --"), err
    assert err.count("\n") == 1, err


GOOD = [
    (["migrate", "--from", "memory://ga", "--to", "memory://gb", "--sample", "0"], "migrated"),
    (["migrate", "--from", "memory://ga", "--to", "memory://gb", "--batch-size", "10000"],
     "migrated"),
    (["audit", "--url", "memory://x", "--limit", "+5"], ""),
    (["serve", "--openapi", "--port", "0", "--rate", "0.5", "--drain-timeout", "0",
      "--idle-timeout", "1e3", "--request-timeout", ".5"], '"openapi"'),
]  # fmt: skip


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(("argv", "shown"), GOOD)
def test_good_values_at_the_edges_are_accepted(
    argv: list[str], shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    assert shown in out.out


def test_the_library_names_a_bad_batch_size_and_sample() -> None:
    """`migrate`, `import_file` and `reembed` refuse a bad batch size (and
    migrate a negative sample) as InvalidInput naming the argument, before
    anything is read, not as an untyped ValueError after the export."""
    import asyncio

    from agent_memory import portability as p
    from agent_memory.domain.errors import InvalidInput

    async def check() -> None:
        for kwargs, field in (({"batch_size": 0}, "batch_size"), ({"sample": -1}, "sample")):
            with pytest.raises(InvalidInput) as caught:
                await p.migrate("memory://lib-a", "memory://lib-b", **kwargs)  # type: ignore[arg-type]
            assert caught.value.field == field
        with pytest.raises(InvalidInput) as caught:
            await p.reembed("memory://lib-c", to_model="hashing", dimension=16, batch_size=0)
        assert caught.value.field == "batch_size"

    asyncio.run(check())


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    env["AGENT_MEMORY_EMBEDDER"] = "hashing"
    return subprocess.run(
        [sys.executable, "-m", "agent_memory.entrypoints.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["migrate", "--from", "memory://a", "--to", "memory://b", "--sample", "-1"], "--sample"),
        (["reembed", "--url", "memory://x", "--to-model", "hashing", "--batch-size", "0"],
         "--batch-size"),
        (["import", "x.jsonl", "--batch-size", "٣"], "--batch-size"),
        (["audit", "--url", "memory://x", "--limit", "\uff15"], "--limit"),
        (["serve", "--port", "-5"], "--port"),
        (["serve", "--rate", "nan"], "--rate"),
        (["mcp", "--port", "99999999"], "--port"),
        (["mcp", "--call-timeout", "inf"], "--call-timeout"),
        (["export", "--url", "", "-o", "out.jsonl"], "--url"),
        (["export", "--skip", "bogus"], "--skip"),
        (["reflect", "--domain", " "], "--domain"),
    ],
)  # fmt: skip
def test_as_a_real_process(argv: list[str], option: str, tmp_path: Path) -> None:
    result = _cli(*argv, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"agent-memory {argv[0]}: InvalidInput: {option}: ")
    assert not (tmp_path / "out.jsonl").exists()
    assert result.stdout == ""

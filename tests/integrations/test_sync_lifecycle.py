"""The blocking facade (`agent_memory.sync.connect`) and the LangGraph store on
it, at the edges of their life: a call racing `close()` from another thread, and
a call in a child process forked after the connection was opened. Each must end
with a typed error (`StoreClosed`; a `ConfigurationError` naming the fork),
never hang, and never surface a bare `CancelledError`."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import agent_memory.sync
from agent_memory import ConfigurationError, StoreClosed
from agent_memory.langgraph import AgentMemoryStore

_TRIALS = 60
_WORKERS = 3


def _facade_call(memory: agent_memory.sync.SyncMemory) -> Callable[[int], Any]:
    return lambda i: memory.cache.put("s", f"k{i % 5}", b"v")


def _store_call(memory: agent_memory.sync.SyncMemory) -> Callable[[int], Any]:
    store = AgentMemoryStore(memory)
    return lambda i: store.put(("u", "notes"), f"k{i % 5}", {"v": i})


def _hammer(call: Callable[[int], Any], seen: list[BaseException]) -> None:
    """Call until the first error, and record it."""
    i = 0
    while True:
        i += 1
        try:
            call(i)
        except BaseException as exc:
            seen.append(exc)
            return


@pytest.mark.parametrize("make_call", [_facade_call, _store_call], ids=["facade", "store"])
def test_calls_racing_close_end_with_store_closed_never_hang(
    make_call: Callable[[agent_memory.sync.SyncMemory], Callable[[int], Any]],
) -> None:
    """Threads keep calling while the main thread closes the connection: every
    thread must stop within seconds with `StoreClosed` (no call may be left
    waiting on a loop that has stopped, nor see the `CancelledError` of the
    task `close()` cancelled)."""
    errors: dict[str, int] = {}
    for trial in range(_TRIALS):
        memory = agent_memory.sync.connect(f"memory://race-{trial}")
        call = make_call(memory)
        seen: list[BaseException] = []
        threads = [
            threading.Thread(target=_hammer, args=(call, seen), daemon=True)
            for _ in range(_WORKERS)
        ]
        for t in threads:
            t.start()
        time.sleep(0.002 * (trial % 4))
        memory.close()
        for t in threads:
            t.join(10)
            assert not t.is_alive(), (
                f"trial {trial}: a call racing close() never returned; errors so far {errors}"
            )
        for err in seen:
            name = f"{type(err).__module__}.{type(err).__name__}"
            errors[name] = errors.get(name, 0) + 1
            assert isinstance(err, StoreClosed), f"trial {trial}: {err!r} (so far {errors})"


def test_a_closed_connection_raises_store_closed_from_the_facade_and_the_store() -> None:
    """After close() the facade's error is a `StoreClosed` (what the stores raise
    to a call that lost the race with close) and still a `ConfigurationError`;
    the LangGraph store on it says the memory is closed, not that it needs a
    loop."""
    memory = agent_memory.sync.connect("memory://closed-once")
    store = AgentMemoryStore(memory)
    memory.close()
    with pytest.raises(StoreClosed, match="closed"):
        memory.cache.get("s", "k")
    with pytest.raises(ConfigurationError, match="closed"):
        memory.cache.get("s", "k")
    with pytest.raises(StoreClosed, match="closed"):
        store.get(("u", "notes"), "k")


_FORK_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import agent_memory.sync
    from agent_memory.langgraph import AgentMemoryStore

    memory = agent_memory.sync.connect(sys.argv[1])
    store = AgentMemoryStore(memory)
    memory.cache.put("s", "k", b"v")
    store.put(("u", "notes"), "k", {"v": 1})

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        out = []
        for name, call in (
            ("facade", lambda: memory.cache.get("s", "k")),
            ("store", lambda: store.get(("u", "notes"), "k")),
            ("close", memory.close),
        ):
            try:
                call()
                out.append(f"{name}=ok")
            except BaseException as exc:
                out.append(f"{name}={type(exc).__name__}:{exc}")
        os.write(write, "|".join(out).encode())
        os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print("CHILD HUNG")
    print(os.read(read, 65536).decode())
    # the parent's connection is untouched by the child
    assert memory.cache.get("s", "k") == b"v"
    assert store.get(("u", "notes"), "k").value == {"v": 1}
    memory.close()
    print("PARENT OK")
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="os.fork")
@pytest.mark.parametrize("url", ["memory://forked", "sqlite:///{tmp}/forked.db"])
def test_a_forked_child_gets_a_configuration_error_not_a_hang(tmp_path: Any, url: str) -> None:
    """multiprocessing's default start method on Linux forks: the child inherits
    the connection but not its helper thread. Its calls must fail at once with a
    `ConfigurationError` that says so; its close() is a no-op (the parent's
    clients are not the child's to close); the parent keeps working."""
    script = tmp_path / "fork.py"
    script.write_text(_FORK_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), url.format(tmp=tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CHILD HUNG" not in done.stdout, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    child = dict(part.split("=", 1) for part in lines[0].split("|"))
    assert child["facade"].startswith("ConfigurationError:"), child
    assert "fork" in child["facade"], child
    assert child["store"].startswith("ConfigurationError:"), child
    assert "fork" in child["store"], child
    assert child["close"] == "ok", child
    assert lines[-1] == "PARENT OK", done.stdout + done.stderr

"""The blocking facade (`agent_memory.sync`) dropped without `close()`, used from
many threads and from its own loop.

A connection nothing references any more is closed and its helper thread ends
(a notebook that re-runs `memory = connect(url)` no longer keeps one thread,
one loop and one set of backend connections per run until the kernel exits);
an object it handed out (`connect(url).store`) keeps it open while it is used."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from agent_memory.domain.errors import ConfigurationError, StoreClosed
from agent_memory.sync import connect


def _thread_of(memory: object) -> threading.Thread:
    thread = memory._loop._thread  # type: ignore[attr-defined]
    assert isinstance(thread, threading.Thread)
    return thread


def test_a_dropped_connection_is_closed_and_its_thread_ends() -> None:
    """It used to run forever: the daemon thread, its loop and the store's
    clients stayed until the interpreter exited."""
    memory = connect(f"memory://dropped-{uuid.uuid4().hex}")
    memory.cache.put("s", "k", b"v")
    thread = _thread_of(memory)
    store = memory.memory.store
    del memory
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive(), "the helper thread of a dropped connection still runs"
    with pytest.raises(StoreClosed):
        asyncio.run(store.get("o", "i"))


def test_a_part_kept_from_a_dropped_connection_keeps_it_open() -> None:
    """`connect(url).cache` drops the SyncMemory at once; the part holds the
    loop thread, so nothing is closed under it while it is in use."""
    cache = connect(f"memory://kept-{uuid.uuid4().hex}").cache
    gc.collect()
    cache.put("s", "k", b"v")
    assert cache.get("s", "k") == b"v"
    thread = cache._run.__self__._thread  # type: ignore[attr-defined]
    assert thread.is_alive()
    del cache
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_closed_connection_that_is_dropped_stays_closed_quietly() -> None:
    memory = connect(f"memory://closed-{uuid.uuid4().hex}")
    thread = _thread_of(memory)
    memory.close()
    assert not thread.is_alive()
    del memory
    gc.collect()  # the finalizer finds the loop closed: nothing to do, no error


def test_a_connection_dropped_on_another_thread_is_closed_too() -> None:
    """The finalizer runs where the last reference goes: here a worker thread."""
    threads: list[threading.Thread] = []

    def work() -> None:
        memory = connect(f"memory://worker-{uuid.uuid4().hex}")
        memory.cache.put("s", "k", b"v")
        threads.append(_thread_of(memory))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    gc.collect()
    threads[0].join(timeout=10)
    assert not threads[0].is_alive()


def test_calls_from_many_threads_all_land() -> None:
    """16 threads write and read through one connection at once: every write
    lands once, every read sees its own write (the calls go to one loop)."""
    barrier = threading.Barrier(16)
    errors: list[BaseException] = []
    with connect(f"memory://threads-{uuid.uuid4().hex}") as memory:

        def work(i: int) -> None:
            try:
                barrier.wait(timeout=10)
                for j in range(20):
                    memory.cache.put("s", f"{i}-{j}", str(j).encode())
                    assert memory.cache.get("s", f"{i}-{j}") == str(j).encode()
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=30)
        assert not errors, errors[:3]
        assert all(memory.cache.get("s", f"{i}-19") == b"19" for i in range(16))


def test_a_callback_on_the_loop_that_calls_the_facade_is_refused_not_deadlocked() -> None:
    with connect(f"memory://reentrant-{uuid.uuid4().hex}") as memory:

        async def inner() -> None:
            memory.cache.get("s", "k")  # a blocking call from the facade's own loop

        with pytest.raises(ConfigurationError, match="its own event loop"):
            memory.run(inner())
        assert memory.cache.get("s", "k") is None  # still usable


_EXIT_SCRIPT = """
import sys
from agent_memory.sync import connect
kept = connect(sys.argv[1])
kept.cache.put("s", "k", b"v")
dropped = connect(sys.argv[1])
dropped.cache.get("s", "k")
del dropped
print("done", flush=True)
"""


def test_an_unclosed_connection_at_exit_neither_hangs_nor_warns(tmp_path: Path) -> None:
    """One connection dropped, one left open at interpreter exit (dev mode:
    ResourceWarnings and unraisable exceptions shown)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    env["AGENT_MEMORY_EMBEDDER"] = "hashing"
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-c", _EXIT_SCRIPT, f"sqlite:///{tmp_path / 'm.db'}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
    # dev mode also reports slow event-loop callbacks (a loaded machine), not a fault
    slow = re.compile(r"Executing .* took [0-9.]+ seconds")
    shown = [line for line in result.stderr.splitlines() if not slow.fullmatch(line)]
    assert shown == [], result.stderr

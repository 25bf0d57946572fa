"""Adversarial hunt (round 2) on the ways a plain program and a shell user reach
the library: the blocking facade (`agent_memory.sync`) and the `agent-memory`
command, on memory, SQLite, Redis and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.bootstrap.connect import connect as agent_memory_connect
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.errors import StoreClosed
from agent_memory.sync import SyncMemory, connect


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory://hunt2-{uuid.uuid4().hex}"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/m.db"
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


def _settings(tmp_path: Path) -> Settings:
    deployment = "sh" + uuid.uuid4().hex[:10]
    return attrs.evolve(
        Settings.from_env(),
        deployment=deployment,
        coordination_url=f"sqlite:///{tmp_path}/coord-{deployment}.db",
    )


def _open(backend: str, tmp_path: Path) -> SyncMemory:
    return connect(backend, settings=_settings(tmp_path))


def test_close_while_calls_run_in_other_threads_ends_them_typed(
    backend: str, tmp_path: Path
) -> None:
    """Eight threads call the stores in a loop; the main thread closes the
    connection under them: close returns, every call either succeeded or
    raised StoreClosed (no backend-specific error leaks), no thread hangs."""
    memory = _open(backend, tmp_path)
    errors: list[BaseException] = []
    started = threading.Barrier(9)

    def work(i: int) -> None:
        started.wait(timeout=10)
        for j in range(10_000):
            try:
                if j % 3 == 0:
                    memory.cache.put("s", f"{i}-{j}", b"v")
                elif j % 3 == 1:
                    memory.cache.get("s", f"{i}-{j - 1}")
                else:
                    memory.events.domains()
            except StoreClosed:
                return
            except BaseException as exc:
                errors.append(exc)
                return

    workers = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for w in workers:
        w.start()
    started.wait(timeout=10)
    time.sleep(0.2)
    closer = threading.Thread(target=memory.close)
    closer.start()
    closer.join(timeout=30)
    assert not closer.is_alive(), "close() hangs while calls run"
    for w in workers:
        w.join(timeout=30)
        assert not w.is_alive(), "a call hangs after close()"
    assert not errors, [f"{type(e).__name__}: {e}" for e in errors[:5]]


# -- the command ---------------------------------------------------------------------


def _cli(*args: str | bytes, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    full_env["AGENT_MEMORY_EMBEDDER"] = "hashing"
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "agent_memory.entrypoints.cli", *args],
        capture_output=True,
        text=True,
        errors="replace",
        env=full_env,
        timeout=120,
        check=False,
    )


def _one_typed_line(result: subprocess.CompletedProcess[str], command: str, error: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"agent-memory {command}: {error}: "), result.stderr


def _forget_someone(url: str) -> None:
    with connect(url) as memory:
        memory.users.forget("ana")
        memory.users.forget("bo")


def test_an_audit_export_to_a_fifo_writes_into_it_and_keeps_it(tmp_path: Path) -> None:
    """`--export` wrote FILE.tmp and renamed it over FILE: a named pipe (or
    /dev/stdout, /dev/full as root) was replaced by a regular file, its reader
    never saw a byte."""
    url = f"sqlite:///{tmp_path}/m.db"
    _forget_someone(url)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        result = _cli("audit", "--url", url, "--export", str(fifo))
        assert result.returncode == 0, result.stderr
        assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the named pipe was replaced by a file"
        received = os.read(reader, 1 << 16).decode()
    finally:
        os.close(reader)
    assert [json.loads(x)["subject"] for x in received.splitlines()] == ["bo", "ana"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "m.db") == ["pipe"]


def test_a_failed_audit_export_leaves_no_temporary_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/m.db"
    _forget_someone(url)
    target = tmp_path / "out"
    target.mkdir()
    result = _cli("audit", "--url", url, "--export", str(target))
    assert result.returncode == 1
    _one_typed_line(result, "audit", "IsADirectoryError")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.db", "out"], list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["backup.jsonl", "backup.jsonl.gz"])
def test_a_failed_export_keeps_the_previous_file(tmp_path: Path, name: str) -> None:
    """`export -o FILE` truncated FILE first: an export that then failed (here a
    user id that is not valid Unicode, refused after the header was written)
    left a header-only FILE where a good backup was, and a half-written one."""
    url = f"sqlite:///{tmp_path}/m.db"
    _forget_someone(url)
    out = tmp_path / name
    assert _cli("export", "--url", url, "-o", str(out)).returncode == 0
    before = out.read_bytes()
    assert _cli("import", "--url", f"sqlite:///{tmp_path}/copy.db", str(out)).returncode == 0
    result = _cli("export", "--url", url, "-o", str(out), "--user", os.fsdecode(b"\xff"))
    assert result.returncode == 2
    _one_typed_line(result, "export", "InvalidInput")
    assert out.read_bytes() == before, "the previous export was overwritten by a failed one"
    leftovers = sorted(p.name for p in tmp_path.iterdir() if "copy.db" not in p.name)
    assert leftovers == sorted(["m.db", name]), leftovers


def test_an_export_to_a_fifo_still_streams_into_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/m.db"
    _forget_someone(url)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        result = _cli("export", "--url", url, "-o", str(fifo))
        assert result.returncode == 0, result.stderr
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)
        received = os.read(reader, 1 << 16).decode()
    finally:
        os.close(reader)
    kinds = [json.loads(x)["type"] for x in received.splitlines()]
    assert kinds[0] == "header", kinds
    assert kinds[-1] == "footer", kinds


@pytest.mark.parametrize("dimension", ["99999999999", "0", "-3"])
def test_reembed_refuses_a_dimension_no_store_can_hold(tmp_path: Path, dimension: str) -> None:
    """`--dimension 99999999999` was accepted: an empty store switched its reads
    to that space, and every later embedding raised MemoryError (373 GiB a
    vector); 0 was taken as 'not given' and reported as 'the new space is the
    old one'."""
    url = f"sqlite:///{tmp_path}/m.db"
    _forget_someone(url)
    result = _cli("reembed", "--url", url, "--to-model", "hashing", "--dimension", dimension)
    assert result.returncode == 2, result.stdout + result.stderr
    _one_typed_line(result, "reembed", "InvalidInput")
    assert "dimension" in result.stderr
    with connect(url) as memory:
        assert memory.store.space.dimension == Settings.from_env().embedding_dimension


# -- the facade: interrupts, exit ----------------------------------------------------


def test_a_call_interrupted_by_ctrl_c_is_cancelled_not_left_running(tmp_path: Path) -> None:
    """Ctrl-C in a blocking call raised KeyboardInterrupt in the script, but the
    operation went on running on the helper thread (a script that catches it and
    goes on, or a notebook cell stopped, kept writing in the background)."""
    before = set(threading.enumerate())
    memory = connect(f"sqlite:///{tmp_path}/m.db")
    cancelled = threading.Event()

    async def long_call() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    main = threading.get_ident()
    timer = threading.Timer(0.3, signal.pthread_kill, args=(main, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            memory.run(long_call())
        assert cancelled.wait(5), "the interrupted call still runs on the helper thread"
        memory.cache.put("s", "k", b"v")  # the connection is still usable
        assert memory.cache.get("s", "k") == b"v"
    finally:
        timer.cancel()
        timer.join()
        memory.close()
    # threads of earlier tests may end meanwhile: none of this test's is left
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert left == [], left


_EXIT_SCRIPT = """
import sys
from agent_memory.sync import connect
kept = connect(sys.argv[1])
kept.cache.put("s", "k", b"v")
request = kept.agents.request(agent="a", domain="d", request_id="r-1")
request.__enter__()  # a request left open: its renewal tasks run at exit
dropped = connect(sys.argv[1])
dropped.cache.get("s", "k")
del dropped
print("done", flush=True)
"""


def test_unclosed_connections_at_exit_neither_hang_nor_warn(backend: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_MEMORY_")}
    env["AGENT_MEMORY_EMBEDDER"] = "hashing"
    env["AGENT_MEMORY_DEPLOYMENT"] = "sx" + uuid.uuid4().hex[:10]
    env["AGENT_MEMORY_COORDINATION_URL"] = f"sqlite:///{tmp_path}/coord.db"
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-c", _EXIT_SCRIPT, backend],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
    noise = [x for x in result.stderr.splitlines() if "took" not in x or "Executing" not in x]
    assert noise == [], result.stderr


# -- the facade against the async API: the same typed refusal --------------------------

_TEXT = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["", "\x00", "a\x00b", "\udcff", " ", "x" * 5000, "\u2028", "../x"]),
)
_ANY = st.one_of(_TEXT, st.none(), st.integers(-3, 3), st.binary(max_size=4), st.floats())
_TTL = st.one_of(
    st.sampled_from([timedelta(seconds=-1), timedelta(0), timedelta(days=99999)]),
    st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(hours=1)),
    _ANY,
)
_CALLS = st.one_of(
    st.tuples(st.just(("cache", "get")), st.tuples(_ANY, _ANY)),
    st.tuples(st.just(("cache", "put")), st.tuples(_ANY, _ANY, _ANY, _TTL)),
    st.tuples(st.just(("cache", "delete_prefix")), st.tuples(_ANY, _ANY)),
    st.tuples(st.just(("leases", "acquire")), st.tuples(_ANY, _ANY, _ANY, _TTL, _ANY)),
    st.tuples(st.just(("leases", "scan")), st.tuples(_ANY, _ANY)),
    st.tuples(st.just(("store", "get")), st.tuples(_ANY, _ANY)),
    st.tuples(st.just(("store", "delete_scope")), st.tuples(_ANY)),
    st.tuples(st.just(("events", "erase_user")), st.tuples(_ANY)),
    st.tuples(st.just(("users", "forget")), st.tuples(_ANY, _ANY)),
    st.tuples(st.just(("users", "forget_fact")), st.tuples(_ANY, _ANY)),
)


def _outcome(call: Callable[[], object]) -> tuple[str, object]:
    try:
        call()
    except Exception as exc:
        return type(exc).__name__, getattr(exc, "field", None)
    return "ok", None


@settings(max_examples=60, deadline=None)
@given(calls=st.lists(_CALLS, min_size=1, max_size=6))
def test_the_facade_refuses_bad_input_as_the_async_api_does(
    calls: list[tuple[tuple[str, str], tuple[object, ...]]],
) -> None:
    name = uuid.uuid4().hex
    with connect(f"memory://sync-{name}") as blocking:

        async def run_async() -> list[tuple[str, object]]:
            seen = []
            async with agent_memory_connect(f"memory://async-{name}") as memory:
                for (port, method), args in calls:
                    target = getattr(memory, port)
                    try:
                        await getattr(target, method)(*args)
                    except Exception as exc:
                        seen.append((type(exc).__name__, getattr(exc, "field", None)))
                    else:
                        seen.append(("ok", None))
            return seen

        expected = asyncio.run(run_async())
        got = [
            _outcome(lambda p=port, m=method, a=args: getattr(getattr(blocking, p), m)(*a))
            for (port, method), args in calls
        ]
    assert got == expected

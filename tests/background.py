"""Slow subprocesses that run beside the suite instead of inside its timeline.

Some tests wait on one long subprocess: mypy, a generated contract run, a full
`agent-memory conformance` run. This process runs its tests one at a time, so
while it waits the machine's other core is idle. Such a subprocess is registered
here as a *job*; a test that reads a job's result carries
`@pytest.mark.background("job", ...)`. When collection has finished, conftest
starts the selected tests' jobs, one at a time, on a worker thread, and moves
those tests to the end of the session, so the jobs run while the rest of the
suite does. A test run alone (or a job the worker has not reached) runs its job
in the test's own thread: the result never depends on the scheduling.

Each job gets its own empty work directory, removed when the session ends.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

__all__ = [
    "DELEGATED",
    "Command",
    "Result",
    "asked_for",
    "delegated_job",
    "job",
    "report",
    "result",
    "shutdown",
    "start",
]

#: Test directories the whole suite runs as background jobs, each in a pytest of
#: its own (tests/test_delegated_dirs.py), on the core the rest leaves idle. Most
#: need none of the suite's servers (views: 1,000 hypothesis examples per property
#: under ci; sqlite: files; qdrant: its local mode, in process; milvus: Milvus
#: Lite, a local process of its own; openai: loopback HTTP servers of the tests'
#: own); redis_cluster and integrations start the servers they use in their own
#: pytest, from the same fixtures as the suite's (a six-node cluster; a Redis and
#: a PostgreSQL), so a server that cannot start fails the job as it would fail
#: the suite. A session asked for such a directory by path collects it inline
#: instead.
DELEGATED = ("views", "sqlite", "qdrant", "milvus", "openai", "redis_cluster", "integrations")


def delegated_job(directory: str) -> str:
    """The name of the job that runs the delegated `directory`."""
    return f"tests-{directory}"


@dataclass(frozen=True)
class Command:
    """What a job runs: argv, working directory, environment (None: inherit)."""

    argv: Sequence[str]
    cwd: Path
    env: Mapping[str, str] | None = None
    timeout: float = 600.0


@dataclass(frozen=True)
class Result:
    """How a job's subprocess ended; `returncode` is None when it timed out."""

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    workdir: Path

    @property
    def text(self) -> str:
        return self.stdout + self.stderr

    def tail(self) -> str:
        return (
            f"exit {self.returncode} after {self.seconds:.1f}s\n"
            f"{self.stdout[-4000:]}\n{self.stderr[-3000:]}"
        )


@dataclass
class _Job:
    prepare: Callable[[Path], Command]
    done: threading.Event = field(default_factory=threading.Event)
    outcome: Result | None = None
    proc: subprocess.Popen[str] | None = None
    began: float | None = None  # monotonic, when its subprocess was started
    waited: float = 0.0  # how long tests sat waiting for it


_JOBS: dict[str, _Job] = {}
_PYTEST_SUMMARY = re.compile(r"\d+ (passed|failed)")
_LOCK = threading.Lock()
_QUEUE: deque[str] = deque()
_CLAIMED: set[str] = set()
_WORKDIRS: list[Path] = []
_STOPPING = threading.Event()


def job(name: str) -> Callable[[Callable[[Path], Command]], Callable[[Path], Command]]:
    """Register `prepare(workdir) -> Command` as the job `name` (at import of
    the test module, so collection knows it before the session starts)."""

    def register(prepare: Callable[[Path], Command]) -> Callable[[Path], Command]:
        if name in _JOBS and _JOBS[name].prepare is not prepare:
            raise RuntimeError(f"background job {name!r} registered twice")
        _JOBS[name] = _Job(prepare)
        return prepare

    return register


def _claim(name: str) -> bool:
    """True for the one caller that gets to run `name`."""
    with _LOCK:
        if name in _CLAIMED:
            return False
        _CLAIMED.add(name)
        return True


def _run(name: str) -> None:
    entry = _JOBS[name]
    workdir = Path(tempfile.mkdtemp(prefix=f"agent-memory-bg-{name}-"))
    with _LOCK:
        _WORKDIRS.append(workdir)
    started = entry.began = time.monotonic()
    try:
        command = entry.prepare(workdir)
        env = dict(command.env) if command.env is not None else dict(os.environ)
        proc = subprocess.Popen(
            list(command.argv),
            cwd=command.cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        entry.proc = proc
        try:
            out, err = proc.communicate(timeout=command.timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            code = None
            err += f"\n[background job {name!r} killed after {command.timeout:.0f}s]"
        entry.outcome = Result(code, out, err, time.monotonic() - started, workdir)
    except BaseException as exc:  # reported to the waiting test, never lost
        entry.outcome = Result(-1, "", f"background job {name!r} failed to run: {exc!r}",
                               time.monotonic() - started, workdir)  # fmt: skip
    finally:
        entry.done.set()


def _worker() -> None:
    while not _STOPPING.is_set():
        with _LOCK:
            if not _QUEUE:
                return
            name = _QUEUE.popleft()
        if _claim(name):
            _run(name)


def start(names: Iterable[str]) -> None:
    """Queue the jobs `names` (unknown names are an error) on one worker thread."""
    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in _JOBS]
    if unknown:
        raise RuntimeError(f"unknown background jobs: {unknown}")
    with _LOCK:
        _QUEUE.extend(wanted)
    threading.Thread(target=_worker, name="background-jobs", daemon=True).start()


def result(name: str) -> Result:
    """The job's result: waits for the worker, or runs the job here if nobody has."""
    if name not in _JOBS:
        raise RuntimeError(f"unknown background job {name!r}")
    entry = _JOBS[name]
    waiting = time.monotonic()
    if _claim(name):
        _run(name)
    entry.done.wait()
    entry.waited += time.monotonic() - waiting
    assert entry.outcome is not None
    return entry.outcome


def report() -> list[str]:
    """One line per job that ran: when it started (seconds after the first
    job), how long it took, and how long tests waited for it: the suite's
    wall time pays only the waits. A delegated directory's job adds its skip
    reasons and its summary line, so a skip there is as visible as one in the
    suite itself. (Other jobs run pytest on deliberately broken adapters: their
    counts would only mislead here.)"""
    ran = sorted(
        (e.began, n, e.outcome, e.waited)
        for n, e in _JOBS.items()
        if e.began is not None and e.outcome is not None
    )
    lines: list[str] = []
    origin = ran[0][0] if ran else 0.0
    for began, name, outcome, waited in ran:
        lines.append(
            f"{name}: started +{began - origin:.0f}s, ran {outcome.seconds:.1f}s,"
            f" waited for {waited:.1f}s"
        )
        if name not in {delegated_job(d) for d in DELEGATED}:
            continue
        out = outcome.stdout.splitlines()
        inner = [line for line in out if line.startswith("SKIPPED")]
        if out and _PYTEST_SUMMARY.search(out[-1]):
            inner.append(out[-1])
        lines += [f"    {line}" for line in inner]
    return lines


def shutdown() -> None:
    """Stop queued jobs, kill running ones, remove every work directory."""
    _STOPPING.set()
    with _LOCK:
        _QUEUE.clear()
    for entry in _JOBS.values():
        if entry.proc is not None and entry.proc.poll() is None:
            entry.proc.kill()
    for workdir in _WORKDIRS:
        shutil.rmtree(workdir, ignore_errors=True)


def asked_for(config: pytest.Config, directory: Path) -> bool:
    """True when the pytest session `config` was asked for `directory`, or a
    file or test inside it, by path."""
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if path == directory or directory in path.parents:
            return True
    return False

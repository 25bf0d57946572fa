"""Load on `agent-memory serve`: concurrent asyncio httpx clients of two tenants
mixing recall (the profile view), record (steps of an open agent request) and
search (a user's facts) against a real server on SQLite, PostgreSQL and Redis;
then a kill run on PostgreSQL.

    python benchmarks/server_load.py                  # all backends, 100 clients, 60 s, + kill run
    python benchmarks/server_load.py --backend postgres --duration 10 --clients 50 --kill-duration 0

Reports requests/s, p50/p99 latency and the error count per backend, plus
isolation breaks: every client's facts carry its tenant's marker, and any
response that shows the other tenant's marker counts as a break (target: 0
errors, 0 breaks).

The kill run: 100 clients write (a fact for a user of their own, a step with
its own id) and search while the embedded PostgreSQL server (durable default
settings) is SIGKILLed, postmaster and backends, and restarted on the same data
directory. Targets: every call made while the backend is down is answered
`503` with the `backend-unavailable` problem document; no call outlasts the
client's request timeout (`--timeout`, 30 s for the whole call: latency under
this load on a busy 2-core machine reaches 15 s at p99 without any failure);
no other kind of answer at any time; the service answers again after the
restart; every acknowledged write (a `200`) is readable afterwards.

Loopback only. The test suite runs `run_load` for a few seconds and a short
kill run (tests/server/test_load_smoke.py) and checks the counts, never a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

__all__ = ["run_load"]

MIX = (("recall", 0.4), ("record", 0.3), ("search", 0.3))


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _client(
    n: int,
    base: str,
    tenant: str,
    token: str,
    other_marker: str,
    deadline: float,
    out: dict[str, Any],
    http: httpx.AsyncClient,
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    # Clients 2k (tenant one) and 2k+1 (tenant two) use the same user id, the
    # same domain and the same entity: only the tenant prefix keeps them apart.
    user, request_id = f"user {n // 2} :*{{}}|@", f"req-{n}-{uuid.uuid4().hex[:6]}"
    marker = f"marker-{tenant}"
    rng = random.Random(n)

    async def call(op: str, method: str, path: str, **kw: Any) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            r = await http.request(method, base + path, headers=headers, **kw)
        except httpx.HTTPError as exc:
            out["errors"][f"{op}: {type(exc).__name__}"] += 1
            return None
        out["latency"].append((time.perf_counter() - started) * 1000)
        out["ops"][op] += 1
        if r.status_code >= 300:
            out["errors"][f"{op}: {r.status_code}"] += 1
        if other_marker in r.text:
            out["breaks"] += 1
        return r

    await call("setup", "POST", "/v1/users/remember", json={
        "user_id": user, "namespace": "load",
        "facts": [{"content": f"User prefers {marker} number {n}", "category": "preference"}],
    })  # fmt: skip
    await call("setup", "POST", "/v1/requests", json={
        "agent": f"agent-{n}", "domain": "load", "request_id": request_id,
        "entities": [{"type": "job", "id": str(n // 2)}],
    })  # fmt: skip
    step = 0
    while time.monotonic() < deadline:
        op = rng.choices([m for m, _ in MIX], weights=[w for _, w in MIX])[0]
        if op == "recall":
            body = {"user_id": user, "namespace": "load", "request": "preferences"}
            await call(op, "POST", "/v1/users/profile", json=body)
        elif op == "record":
            step += 1
            await call(op, "POST", "/v1/requests/steps", json={
                "request_id": request_id,
                "steps": [{"action": f"step {step}", "response": f"ok {marker}"}],
            })  # fmt: skip
        else:
            await call(op, "POST", "/v1/users/search",
                       json={"user_id": user, "query": "prefers number", "limit": 5})  # fmt: skip
    await call("teardown", "POST", "/v1/requests/finish", json={"request_id": request_id})


async def run_load(
    base: str, tokens: dict[str, str], *, clients: int, duration: float
) -> dict[str, Any]:
    """`tokens` maps two tenant names to an API key each; clients alternate
    between them. Returns the counts and latencies (ms) of the run."""
    (t1, k1), (t2, k2) = tokens.items()
    out: dict[str, Any] = {"latency": [], "ops": Counter(), "errors": Counter(), "breaks": 0}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=60.0) as http:
        started = time.monotonic()
        deadline = started + duration
        await asyncio.gather(
            *(
                _client(
                    i,
                    base,
                    *((t1, k1, f"marker-{t2}") if i % 2 == 0 else (t2, k2, f"marker-{t1}")),
                    deadline,
                    out,
                    http,
                )
                for i in range(clients)
            )
        )
        elapsed = time.monotonic() - started
    latency: list[float] = out["latency"]
    return {
        "requests": len(latency),
        "seconds": round(elapsed, 1),
        "rps": round(len(latency) / elapsed, 1),
        "p50_ms": round(statistics.median(latency), 1) if latency else 0.0,
        "p99_ms": round(_percentile(latency, 0.99), 1),
        "errors": sum(out["errors"].values()),
        "error_kinds": dict(out["errors"]),
        "isolation_breaks": out["breaks"],
        "ops": dict(out["ops"]),
    }


# -- the kill run: the backend is SIGKILLed mid-load and restarted -----------------------
async def run_kill(
    base: str,
    token: str,
    *,
    kill: Callable[[], None],
    restart: Callable[[], None],
    clients: int,
    duration: float,
    kill_at: float,
    gap: float,
    after: float = 2.0,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """`clients` clients of one tenant write (a fact for a user of its own, a step
    with its own id) and read (search) for `duration` seconds; at `kill_at` s
    `kill()` runs (SIGKILL the backend), `gap` s later `restart()`, and the load
    goes on for at least `after` s once it has returned. Every call has
    the client timeout `timeout`. Returns the counts: answers by phase, the
    problems of the failures, timeouts (hangs), the recovery time after the
    restart, and how many acknowledged writes were not readable afterwards."""
    headers = {"Authorization": f"Bearer {token}"}
    marks: dict[str, float] = {}
    calls: list[dict[str, Any]] = []
    facts: list[tuple[str, str]] = []  # acknowledged (user id, content)
    steps: dict[str, set[str]] = {}  # acknowledged step ids per domain
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    http = httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=timeout)

    async def call(op: str, method: str, path: str, **kw: Any) -> httpx.Response | None:
        started = time.monotonic()
        entry: dict[str, Any] = {"op": op, "start": started}
        calls.append(entry)
        try:
            async with asyncio.timeout(timeout):  # the whole call, not each read
                r = await http.request(method, path, **kw)
        except (TimeoutError, httpx.TimeoutException):
            entry.update(end=time.monotonic(), outcome="timeout")
            return None
        except httpx.HTTPError as exc:
            entry.update(end=time.monotonic(), outcome=f"transport: {type(exc).__name__}")
            return None
        entry.update(end=time.monotonic(), status=r.status_code)
        if r.status_code < 300:
            report = r.json().get("report") if op in ("fact", "step") else None
            entry["outcome"] = "ok" if report is None or report["ok"] else "200 report not ok"
            if report is not None and not report["ok"]:
                entry["failures"] = report["failures"]
        else:
            problem = _problem_of(r)
            entry["outcome"] = f"{r.status_code} {problem}"
        return r

    def running(deadline: float) -> bool:
        now, back = time.monotonic(), marks.get("restarted")
        return now < deadline or back is None or now < back + after

    async def client(n: int, deadline: float) -> None:
        domain, request_id = f"kill {n}", f"kill-req-{n}"
        acked = steps.setdefault(domain, set())
        r = await call("setup", "POST", "/v1/requests", json={
            "agent": f"agent-{n}", "domain": domain, "request_id": request_id,
        })  # fmt: skip
        open_request = r is not None and r.status_code == 201
        i = 0
        rng = random.Random(n)
        while running(deadline):
            i += 1
            op = rng.choice(("fact", "step", "search"))
            if op == "fact" or (op == "step" and not open_request):
                user, content = f"kill user {n}-{i}", f"Kill run fact {n}-{i}"
                r = await call("fact", "POST", "/v1/users/remember", json={
                    "user_id": user, "namespace": "kill",
                    "facts": [{"content": content, "category": "context"}],
                })  # fmt: skip
                if r is not None and r.status_code == 200 and r.json()["report"]["ok"]:
                    facts.append((user, content))
            elif op == "step":
                step_id = f"step-{n}-{i}"
                r = await call("step", "POST", "/v1/requests/steps", json={
                    "request_id": request_id,
                    "steps": [{"action": f"step {i}", "response": "ok", "id": step_id}],
                })  # fmt: skip
                if r is not None and r.status_code == 200 and r.json()["report"]["ok"]:
                    acked.add(step_id)
            else:
                body = {"user_id": f"kill user {n}-1", "query": "kill run fact"}
                await call("search", "POST", "/v1/users/search", json=body)
        if open_request:
            await call("teardown", "POST", "/v1/requests/finish", json={"request_id": request_id})

    async def chaos(started: float) -> None:
        await asyncio.sleep(max(0.0, started + kill_at - time.monotonic()))
        marks["kill"] = time.monotonic()
        await asyncio.to_thread(kill)
        marks["killed"] = time.monotonic()
        await asyncio.sleep(gap)
        marks["restart"] = time.monotonic()
        await asyncio.to_thread(restart)
        marks["restarted"] = time.monotonic()

    async with http:
        started = time.monotonic()
        deadline = started + duration
        await asyncio.gather(chaos(started), *(client(i, deadline) for i in range(clients)))
        elapsed = time.monotonic() - started
        missing_facts, missing_steps = await _unreadable(http, facts, steps)

    kill_t, killed, restart_t, back_t = (
        marks[k] for k in ("kill", "killed", "restart", "restarted")
    )

    def phase(c: dict[str, Any]) -> str:
        if c["end"] < kill_t:
            return "before"
        if c["start"] >= killed and c["end"] <= restart_t:
            return "down"  # the whole call while the backend was dead
        return "after" if c["start"] >= back_t else "transition"

    phases: dict[str, Counter[str]] = {
        p: Counter() for p in ("before", "transition", "down", "after")
    }
    for c in calls:
        if "end" in c:
            phases[phase(c)][f"{c['op']} {c['outcome']}"] += 1
    first_ok = min(
        (c["end"] for c in calls if c.get("outcome") == "ok" and c["start"] >= back_t),
        default=None,
    )
    bad = Counter(
        c["outcome"] for c in calls if c.get("outcome") not in ("ok", "503 backend-unavailable")
    )
    durations = [c["end"] - c["start"] for c in calls if "end" in c]
    slowest = {p: 0.0 for p in phases}
    for c in calls:
        if "end" in c:
            slowest[phase(c)] = max(slowest[phase(c)], round(c["end"] - c["start"], 2))
    return {
        "seconds": round(elapsed, 1),
        "requests": len(calls),
        "backend_down_s": round(back_t - kill_t, 2),
        "kill_s": round(killed - kill_t, 2),
        "restart_s": round(back_t - restart_t, 2),
        "phases": {k: dict(v) for k, v in phases.items()},
        "outage_503": sum(1 for c in calls if c.get("outcome") == "503 backend-unavailable"),
        "down_calls": sum(phases["down"].values()),
        "down_503": sum(
            n for o, n in phases["down"].items() if o.endswith(" 503 backend-unavailable")
        ),
        "after_ok": sum(n for o, n in phases["after"].items() if o.endswith(" ok")),
        "timeouts": sum(1 for c in calls if c.get("outcome") == "timeout"),
        "unexpected": dict(bad),
        "max_call_s": round(max(durations, default=0.0), 2),
        "slowest_call_s": slowest,
        "timeout_s": timeout,
        "recovered_after_s": None if first_ok is None else round(first_ok - back_t, 2),
        "acked_facts": len(facts),
        "acked_steps": sum(len(v) for v in steps.values()),
        "unreadable_facts": missing_facts,
        "unreadable_steps": missing_steps,
        "report_failures": dict(
            Counter(json.dumps(c["failures"]) for c in calls if "failures" in c)
        ),
    }


def _problem_of(r: httpx.Response) -> str:
    """The problem slug of an error response ("untyped" when it is not a problem document)."""
    if not r.headers.get("content-type", "").startswith("application/problem+json"):
        return "untyped"
    try:
        kind = str(r.json()["type"])
    except (ValueError, KeyError, TypeError):
        return "untyped"
    return kind.rsplit("/", 1)[-1] if kind.startswith("tag:agent-memory,") else "untyped"


async def _unreadable(
    http: httpx.AsyncClient, facts: list[tuple[str, str]], steps: dict[str, set[str]]
) -> tuple[int, int]:
    """How many acknowledged facts and steps the server does not return now."""
    sem = asyncio.Semaphore(20)

    async def has_fact(user: str, content: str) -> bool:
        async with sem:
            r = await http.get("/v1/users/facts", params={"user_id": user, "limit": 50})
        r.raise_for_status()
        return any(f["content"] == content for f in r.json()["facts"])

    async def seen_steps(domain: str) -> set[str]:
        seen: set[str] = set()
        params: dict[str, Any] = {"domain": domain, "limit": 200, "since": "2000-01-01T00:00:00Z"}
        while True:
            async with sem:
                r = await http.get("/v1/events", params=params)
            r.raise_for_status()
            page = r.json()
            seen.update(e["id"] for e in page["events"])  # a step's id is its event's id
            if not page["limited"] or not page["events"]:
                return seen
            params["until"] = page["events"][-1]["occurred_at"]

    found = await asyncio.gather(*(has_fact(u, c) for u, c in facts))
    missing_steps = 0
    for domain, ids in steps.items():
        missing_steps += len(ids - await seen_steps(domain))
    return found.count(False), missing_steps


def _serve(url: str) -> Any:
    from server.live import LiveServer, unique

    keys = {"a": {"tenant": unique("load-a-")}, "b": {"tenant": unique("load-b-")}}
    live = LiveServer(url, keys, extra_args=("--rate", "1000000", "--burst", "1000000"))
    return live.start(), {keys[n]["tenant"]: live.key[n] for n in ("a", "b")}


def kill_ok(k: dict[str, Any]) -> bool:
    """The kill run's targets: every call while the backend was down answered with
    the 503 problem, no call hung, nothing else went wrong, the service came back,
    and every acknowledged write is readable."""
    return bool(
        k["outage_503"] > 0
        and k["down_calls"] == k["down_503"]
        and not k["timeouts"]
        and not k["unexpected"]
        and k["after_ok"] > 0
        and not k["unreadable_facts"]
        and not k["unreadable_steps"]
    )


def kill_run(
    *,
    clients: int,
    duration: float,
    gap: float,
    kill_at: float | None = None,
    timeout: float = 30.0,
    connect_timeout: int | None = None,
) -> dict[str, Any]:
    """An embedded PostgreSQL (durable defaults) behind a server; `run_kill` with
    the postmaster and its backends SIGKILLed at `kill_at` (default: a third of
    the way in). `connect_timeout` goes on the server's URL (libpq's, which also
    bounds the pool's wait for a connection; default 5 s): an outage shorter
    than it is ridden out."""
    from servers.postgres_server import start_postgres, wait_until_accepting

    pg = start_postgres()
    live = None
    try:
        uri = pg.uri
        if connect_timeout is not None:
            uri += ("&" if "?" in uri else "?") + f"connect_timeout={connect_timeout}"
        live, tokens = _serve(uri)
        token = next(iter(tokens.values()))

        def restart() -> None:
            wait_until_accepting(pg.start())

        return asyncio.run(
            run_kill(
                live.base,
                token,
                kill=pg.kill,
                restart=restart,
                clients=clients,
                duration=duration,
                kill_at=duration / 3 if kill_at is None else kill_at,
                gap=gap,
                timeout=timeout,
            )
        )
    finally:
        if live is not None:
            live.close()
        pg.destroy()


BACKENDS = ("sqlite", "postgres", "redis")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=(*BACKENDS, "all", "none"), default="all")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--kill-duration", type=float, default=30.0, help="0: no kill run")
    parser.add_argument("--gap", type=float, default=8.0, help="seconds the backend stays dead")
    parser.add_argument("--timeout", type=float, default=30.0, help="kill run: request timeout")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = parser.parse_args()
    backends = {"all": BACKENDS, "none": ()}.get(args.backend, (args.backend,))
    results = {}
    for backend in backends:
        server: Any = None
        if backend == "sqlite":
            url = f"sqlite:///{tempfile.mkdtemp(prefix='am-load-')}/memory.db"
        elif backend == "postgres":
            from servers.postgres_server import start_postgres

            server = start_postgres()
            url = server.uri
        else:
            from servers.redis_server import launch_redis

            server = launch_redis()
            url = server.url
        live, tokens = _serve(url)
        try:
            results[backend] = asyncio.run(
                run_load(live.base, tokens, clients=args.clients, duration=args.duration)
            )
        finally:
            live.close()
            if server is not None:
                (server.destroy if backend == "postgres" else server.close)()
    bad = False
    if results:
        print(
            f"{args.clients} clients, {args.duration:.0f} s, "
            "mix recall 40% / record 30% / search 30%"
        )
        print("| backend | requests | requests/s | p50 ms | p99 ms | errors | isolation breaks |")
        print("|---|---|---|---|---|---|---|")
        for backend, r in results.items():
            print(f"| {backend} | {r['requests']} | {r['rps']} | {r['p50_ms']} | {r['p99_ms']} "
                  f"| {r['errors']} | {r['isolation_breaks']} |")  # fmt: skip
        bad = any(r["errors"] or r["isolation_breaks"] for r in results.values())
    if args.kill_duration > 0:
        k = kill_run(
            clients=args.clients, duration=args.kill_duration, gap=args.gap, timeout=args.timeout
        )
        results["postgres-kill"] = k
        print(
            f"\nPostgreSQL SIGKILLed at {args.kill_duration / 3:.0f} s "
            f"of {args.kill_duration:.0f} s, "
            f"{args.clients} clients, down {k['backend_down_s']} s "
            f"(request timeout {k['timeout_s']:.0f} s)"
        )
        s = k["slowest_call_s"]
        print("| requests | 503 problems | calls while down | of them 503 | timeouts | unexpected "
              "| slowest s (before / around the outage / after) | first ok after restart s "
              "| acked writes | unreadable |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|")
        print(f"| {k['requests']} | {k['outage_503']} | {k['down_calls']} | {k['down_503']} "
              f"| {k['timeouts']} | {sum(k['unexpected'].values())} "
              f"| {s['before']} / {max(s['transition'], s['down'])} / {s['after']} "
              f"| {k['recovered_after_s']} "
              f"| {k['acked_facts'] + k['acked_steps']} "
              f"| {k['unreadable_facts'] + k['unreadable_steps']} |")  # fmt: skip
        bad = bad or not kill_ok(k)
    if args.json:
        print(json.dumps(results, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Load on `agent-memory serve`: concurrent asyncio httpx clients of two tenants
mixing recall (the profile view), record (steps of an open agent request) and
search (a user's facts) against a real server on SQLite and on Redis.

    python benchmarks/server_load.py                     # both backends, 100 clients, 60 s
    python benchmarks/server_load.py --backend redis --duration 10 --clients 50

Reports requests/s, p50/p99 latency and the error count per backend, plus
isolation breaks: every client's facts carry its tenant's marker, and any
response that shows the other tenant's marker counts as a break (target: 0
errors, 0 breaks). Loopback only. The test suite runs `run_load` for a few
seconds (tests/server/test_load_smoke.py) and checks the counts, never a time.
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


def _serve(url: str) -> Any:
    from server.live import LiveServer, unique

    keys = {"a": {"tenant": unique("load-a-")}, "b": {"tenant": unique("load-b-")}}
    live = LiveServer(url, keys, extra_args=("--rate", "1000000", "--burst", "1000000"))
    return live.start(), {keys[n]["tenant"]: live.key[n] for n in ("a", "b")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "redis", "both"), default="both")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = parser.parse_args()
    backends = ("sqlite", "redis") if args.backend == "both" else (args.backend,)
    results = {}
    for backend in backends:
        redis = None
        if backend == "sqlite":
            url = f"sqlite:///{tempfile.mkdtemp(prefix='am-load-')}/memory.db"
        else:
            from servers.redis_server import launch_redis

            redis = launch_redis()
            url = redis.url
        live, tokens = _serve(url)
        try:
            results[backend] = asyncio.run(
                run_load(live.base, tokens, clients=args.clients, duration=args.duration)
            )
        finally:
            live.close()
            if redis is not None:
                redis.close()
    print(
        f"{args.clients} clients, {args.duration:.0f} s, mix recall 40% / record 30% / search 30%"
    )
    print("| backend | requests | requests/s | p50 ms | p99 ms | errors | isolation breaks |")
    print("|---|---|---|---|---|---|---|")
    for backend, r in results.items():
        print(f"| {backend} | {r['requests']} | {r['rps']} | {r['p50_ms']} | {r['p99_ms']} "
              f"| {r['errors']} | {r['isolation_breaks']} |")  # fmt: skip
    if args.json:
        print(json.dumps(results, indent=2))
    bad = any(r["errors"] or r["isolation_breaks"] for r in results.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

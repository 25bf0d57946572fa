"""Search at scale: one owner with N records (384-dimensional unit vectors) on each
backend, measured through the public API against a numpy floor on the same data
in the same run.

What each side does:
- **floor** (the most competent direct code for the same answer): the N x 384
  float32 matrix of unit vectors already in process memory; `X @ q` (BLAS) and
  `np.argpartition` for the 10 best rows, then those 10 sorted. No I/O, no
  record decoding: the fastest exact top-10 there is on this machine.
- **ours**: `store.search(owner, q, limit=10)` through `agent_memory.connect(url)`,
  returning 10 decoded `ScoredRecord`s (content, attributes, timestamps, vector).

Per backend and N it reports: load rate (records/s from the vectors: building
the `MemoryRecord`s is counted, then batched `add`, or `bulk_add` where the
store has one: PostgreSQL drops its HNSW index, COPYs, and builds it once; the
index build is counted), the cold search (the first search after the load,
timed: it loads the owner's rows, and past the exact-search threshold on
memory:// and SQLite builds the HNSW graph), search p50/p95, the search ratio
(median of interleaved per-query ratios ours / floor; below the exact-search
threshold that is the exact-search ratio), recall@10 against the floor's exact
answer, the planted-neighbour hit rate (a record at cosine ~0.71 to the query,
planted among the N, must be found; counted over the queries whose exact top 10
holds it: on `clustered` a query's cluster-mates are nearer, so it is `nan`
there), and search-after-write: p50 of a search
right after an `add` to the same owner, as a ratio to p50 of a search with no
write in between. Datasets (benchmarks/datasets.py says how each is built):
`random` (uniform on the sphere: the hardest case for graph indexes),
`clustered` (64 Gaussian clusters, queries drawn from the clusters) and
`realistic` (MiniLM vectors of LoCoMo dev turns and generated variants, the
LoCoMo questions as held-out queries; embedded once and cached outside the
repository, ~15-40 minutes per 100k texts on two cores). A 1M realistic set takes
hours to embed here, so the 1M rows use `clustered`.

It ends with one line:
`scale: worst recall@10 R (memory R1, sqlite R2, ...), worst exact-search ratio X,
worst after-write ratio Y`
(the recall per backend over its rows; the exact-search ratio over the rows of
memory and SQLite searched exactly, N at or below their exact-search threshold),
then the two ratios as the shared harness lines,
`ratio scale_exact_search Xx (target <= 1.3x)` and `ratio scale_after_write Yx
(target <= 1.3x)`.

    .venv/bin/python benchmarks/scale.py                      # memory, sqlite; 10k and 100k
    .venv/bin/python benchmarks/scale.py --backends memory,sqlite,redis,postgres,qdrant,milvus
    .venv/bin/python benchmarks/scale.py --backends redis --save rows.jsonl   # one at a time
    .venv/bin/python benchmarks/scale.py --report rows.jsonl             # table + final line
    .venv/bin/python benchmarks/scale.py --sizes 10000 --queries 50
    .venv/bin/python benchmarks/scale.py --datasets realistic --sizes 100000 \
        --index exact_threshold=0                          # the approximate index alone
    .venv/bin/python benchmarks/scale.py --backends redis --datasets realistic \
        --sizes 100000 --index ';exact_threshold=0' --save rows.jsonl   # both, one load
    .venv/bin/python benchmarks/scale.py --datasets clustered --size 1000000 --queries 20  # 1M

Servers: `REDIS_URL` / `DATABASE_URL` / `QDRANT_URL` / `MILVUS_URL`, or started
the way the tests start them (tests/servers/); Qdrant without `QDRANT_URL` is
qdrant-client's local mode (exact search in Python, no HNSW), Milvus without
`MILVUS_URL` is Milvus Lite in this process (FLAT, exact). A slow backend can run
alone: `--save FILE` appends each finished row to FILE (JSON lines) as it
completes, and `--report FILE` prints the table and the final line over every
row saved there, so separate runs (one backend each) end in one final line.
Index parameters go on the URL (`REDIS_URL=redis://...?hnsw_ef_runtime=400`) or,
for every backend that has them (memory, sqlite, redis, postgres, qdrant),
`--index exact_threshold=0` to measure the approximate index alone. Several
variants separated by `;` share one load (`--index ';exact_threshold=0'`: the
defaults, then the graph alone; each variant is a row, its `settings` column):
on Redis and PostgreSQL the load is the slow part at 100k. A variant after the
first sees the records the earlier ones added (their after-write records, which
the floor also gets), and may only change what applies to every query
(exact_threshold, ef_search); M and ef_construction are the first variant's.
On a shared machine `--lock FILE` holds an flock on FILE during each row's
searches (recall, p50, the ratios), not during the load and the cold search
(the graph build: minutes at 1M), so a timed phase never overlaps another
locked benchmark; the load rate and cold ms are then measured without it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import fcntl
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from agent_memory import connect
from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.domain.records import MemoryRecord

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _harness import percentile, ratio_line
from datasets import Dataset, build

DIM = 384
K = 10
OWNER = "scale-owner"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
EXACT_BACKENDS = ("memory", "sqlite")
# memory:// and SQLite search an owner exactly up to this many records (the default).
DEFAULT_EXACT_THRESHOLD = 100_000


@dataclass
class Row:
    backend: str
    dataset: str
    n: int
    load_rate: float
    p50_ms: float
    p95_ms: float
    exact_ratio: float
    recall: float
    planted: float
    after_write_ratio: float
    cold_ms: float = float("nan")
    exact: bool = True  # searched exactly (N at or below the exact-search threshold)
    index: str = ""  # the index parameters of the row ("": the defaults)


def unit(rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def planted_near(q: npt.NDArray[np.float32], rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """A vector at cosine ~0.71 to the unit vector `q`."""
    noise = unit(rng.standard_normal((1, DIM)))[0]
    noise -= (noise @ q) * q
    noise /= np.linalg.norm(noise)
    return (0.71 * q + np.sqrt(1 - 0.71**2) * noise).astype(np.float32)


def floor_topk(matrix: npt.NDArray[np.float32], q: npt.NDArray[np.float32]) -> list[int]:
    scores = matrix @ q
    part = np.argpartition(-scores, K)[:K]
    return [int(i) for i in part[np.argsort(-scores[part])]]


def records(vectors: npt.NDArray[np.float32], start: int) -> list[MemoryRecord]:
    return [
        MemoryRecord(
            owner=OWNER,
            id=f"r{start + i:07d}",
            namespace="bench",
            kind="fact",
            content=f"record {start + i}",
            vector=v,
            created_at=T0,
            updated_at=T0,
        )
        for i, v in enumerate(vectors)
    ]


def backend_url(backend: str, stack: ExitStack, tmp: Path) -> str:
    """A URL for `backend`: from the environment, else a server started like the tests do."""
    if backend == "memory":
        return "memory://scale"
    if backend == "sqlite":
        return f"sqlite:///{tmp / 'scale.db'}"
    if backend == "redis":
        if os.environ.get("REDIS_URL"):
            return os.environ["REDIS_URL"]
        from servers.redis_server import launch_redis

        server = launch_redis()
        stack.callback(server.close)
        return server.url
    if backend == "postgres":
        if os.environ.get("DATABASE_URL"):
            return os.environ["DATABASE_URL"]
        from servers.postgres_server import start_postgres

        pg = start_postgres(tmp / "pg")
        stack.callback(pg.destroy)
        return pg.uri
    if backend in ("qdrant", "milvus"):
        os.environ.setdefault("AGENT_MEMORY_COORDINATION_URL", f"sqlite:///{tmp / 'coord.db'}")
    if backend == "qdrant":
        return os.environ.get("QDRANT_URL", "qdrant+memory://")
    if backend == "milvus":
        return os.environ.get("MILVUS_URL", f"milvus+lite:///{tmp / 'milvus.db'}")
    raise SystemExit(f"unknown backend {backend!r}")


def with_index(url: str, index: str) -> str:
    """`url` with the index parameters `index` (a query string) added."""
    return url + (("&" if "?" in url else "?") + index if index else "")


async def measure(
    backend: str,
    url: str,
    ds: Dataset,
    seed: int,
    done: Callable[[Row], None],
    variants: list[tuple[str, bool]],
    lock: str | None = None,
) -> list[Row]:
    """One row per index variant `(query string, searched exactly)` over one load
    (the first variant's URL loads; each variant then gets its own handle, cold
    search and timed searches on the same records, so a variant may change only
    what applies to every query: exact_threshold, ef_search). `done(row)` runs
    before the owner's records are deleted again (on Redis that delete alone takes
    minutes at 100k, so the rows are out first)."""
    rng = np.random.default_rng(seed)
    data = ds.vectors.copy()
    n, kind = len(data), ds.name
    queries = len(ds.queries)
    pairs = [(q, planted_near(q, rng)) for q in ds.queries]
    # Planted neighbours replace the last `queries` rows, one per query.
    for i, (_, near) in enumerate(pairs):
        data[n - queries + i] = near
    rows: list[Row] = []
    async with await connect(
        with_index(url, variants[0][0]), embedder=HashingEmbedder(dimension=DIM)
    ) as memory:
        store = memory.store
        await store.delete_scope(OWNER)
        # Redis indexes each vector as it is written, inside the add script: batches
        # of 250 keep one call well under the client's 30 s socket timeout even on a
        # loaded machine (1,000 timed out at 100k with a load average of 14).
        batch = 250 if backend == "redis" else 5_000
        bulk = getattr(store, "bulk_add", None)  # PostgreSQL: index built once, after COPY
        start = time.perf_counter()  # building the records counts
        batches = [records(data[at : at + batch], at) for at in range(0, n, batch)]
        if bulk is not None:
            await bulk(batches)
        else:
            for chunk in batches:
                await store.add(chunk)
        load_rate = n / (time.perf_counter() - start)
        del batches
        for at, (index, exact_path) in enumerate(variants):
            async with AsyncExitStack() as opened:
                # The first variant searches through the loading handle (Qdrant's
                # local mode keeps its points in the handle); later ones get their own.
                searcher = (
                    store
                    if at == 0
                    else (
                        await opened.enter_async_context(
                            await connect(
                                with_index(url, index), embedder=HashingEmbedder(dimension=DIM)
                            )
                        )
                    ).store
                )
                row, data = await _searches(
                    searcher, data, n, pairs, rng, lock, backend, kind, exact_path, index
                )
            row.load_rate = load_rate
            rows.append(row)
            done(row)
        await store.delete_scope(OWNER)
    return rows


async def _searches(
    store: Any,
    data: npt.NDArray[np.float32],
    n: int,
    pairs: list[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]],
    rng: np.random.Generator,
    lock: str | None,
    backend: str,
    kind: str,
    exact_path: bool,
    index: str,
) -> tuple[Row, npt.NDArray[np.float32]]:
    """The cold search, the timed searches and the after-write pairs of one
    variant; returns the row and the floor's rows with the records it added."""
    queries = len(pairs)
    # The cold search: loads the owner's rows (SQLite) and builds an approximate
    # index past the exact-search threshold (memory, SQLite).
    start = time.perf_counter()
    await store.search(OWNER, pairs[0][0], limit=K)
    cold_ms = (time.perf_counter() - start) * 1000
    with ExitStack() as held:
        if lock:  # the warm searches only: the load and the cold search ran without it
            held.enter_context(_flock(lock))
        ratios: list[float] = []
        ours_ms: list[float] = []
        recall: list[float] = []
        planted, plantable = 0, 0
        for i, (q, _) in enumerate(pairs):
            exact = floor_topk(data, q)
            order = (0, 1) if i % 2 else (1, 0)
            timings = [0.0, 0.0]
            hits = []
            for side in order:
                t = time.perf_counter()
                if side == 0:
                    hits = await store.search(OWNER, q, limit=K)
                else:
                    floor_topk(data, q)
                timings[side] = time.perf_counter() - t
            ratios.append(timings[0] / timings[1])
            ours_ms.append(timings[0] * 1000)
            got = {h.record.id for h in hits}
            want = {f"r{j:07d}" for j in exact}
            recall.append(len(got & want) / K)
            mine = f"r{n - queries + i:07d}"
            if mine in want:
                plantable += 1
                planted += mine in got

        after: list[float] = []
        plain: list[float] = []
        extra = unit(rng.standard_normal((queries, DIM)))
        first = len(data)  # ids continue the floor's row numbers
        for i, (q, _) in enumerate(pairs):
            t = time.perf_counter()
            await store.search(OWNER, q, limit=K)
            plain.append(time.perf_counter() - t)
            await store.add(records(extra[i : i + 1], first + i))
            t = time.perf_counter()
            await store.search(OWNER, q, limit=K)
            after.append(time.perf_counter() - t)
    row = Row(
        backend=backend,
        dataset=kind,
        n=n,
        load_rate=float("nan"),
        p50_ms=statistics.median(ours_ms),
        p95_ms=percentile(ours_ms, 0.95),
        exact_ratio=statistics.median(ratios),
        recall=statistics.mean(recall),
        planted=planted / plantable if plantable else float("nan"),
        after_write_ratio=statistics.median(after) / statistics.median(plain),
        cold_ms=cold_ms,
        exact=exact_path,
        index=index,
    )
    return row, np.concatenate([data, extra])


@contextmanager
def _flock(path: str) -> Iterator[None]:
    """An exclusive flock on `path` (created if missing) for the block."""
    with open(path, "a", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def table(rows: list[Row]) -> str:
    out = [
        "| backend | data | N | search | settings | load rec/s | cold ms |"
        " search p50 / p95 ms | vs floor | recall@10 | planted hit | after-write |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        path = "exact" if r.exact else "index"
        out.append(
            f"| {r.backend} | {r.dataset} | {r.n:,} | {path} | {r.index or 'defaults'} |"
            f" {r.load_rate:,.0f} |"
            f" {r.cold_ms:,.0f} | {r.p50_ms:.1f} / {r.p95_ms:.1f} | {r.exact_ratio:.2f}x |"
            f" {r.recall:.3f} | {r.planted:.2f} | {r.after_write_ratio:.2f}x |"
        )
    return "\n".join(out)


# The targets of the exact-search and after-write ratios at 100k (benchmarks/README.md).
RATIO_TARGET = 1.3


def exact_ratios(rows: list[Row]) -> list[float]:
    """Search ratios of memory and SQLite rows searched exactly."""
    return [r.exact_ratio for r in rows if r.backend in EXACT_BACKENDS and r.exact]


def summary(rows: list[Row]) -> str:
    """The final line: worst recall over every row and per backend, worst
    exact-search ratio over the exact memory and SQLite rows, worst after-write
    ratio over every row."""
    exact = exact_ratios(rows)
    backends = list(dict.fromkeys(r.backend for r in rows))
    per = ", ".join(f"{b} {min(r.recall for r in rows if r.backend == b):.3f}" for b in backends)
    return (
        f"scale: worst recall@10 {min(r.recall for r in rows):.3f} ({per}),"
        f" worst exact-search ratio {max(exact) if exact else float('nan'):.2f},"
        f" worst after-write ratio {max(r.after_write_ratio for r in rows):.2f}"
    )


def report(rows: list[Row]) -> None:
    print()
    print(table(rows))
    print(summary(rows))
    # The two ratios again as the shared harness lines (worst case over the rows).
    exact = exact_ratios(rows)
    if exact:
        print(ratio_line("scale_exact_search", max(exact), RATIO_TARGET))
    print(ratio_line("scale_after_write", max(r.after_write_ratio for r in rows), RATIO_TARGET))


def done(path: str | None, row: Row) -> None:
    """Print a finished row at once (and append it to `path`, JSON lines)."""
    print(table([row]).splitlines()[-1], flush=True)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(dataclasses.asdict(row)) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="memory,sqlite")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--size", type=int, help="one N (overrides --sizes), e.g. 1000000")
    parser.add_argument("--datasets", default="random,clustered,realistic")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--index",
        default="",
        help="index URL parameters (memory, sqlite, redis, postgres, qdrant), e.g."
        " exact_threshold=0; several variants separated by ';' are measured on one load"
        " ('exact_threshold=0;' : the graph, then the defaults), each its own row",
    )
    parser.add_argument(
        "--lock",
        help="hold an flock on this file during each row's timed searches only (the load"
        " and the cold search, minutes at 1M, run without it)",
    )
    parser.add_argument("--save", help="append each finished row to this file (JSON lines)")
    parser.add_argument(
        "--report",
        help="print the table and final line over the rows saved in this file, and exit",
    )
    args = parser.parse_args()
    if args.report:
        with open(args.report, encoding="utf-8") as saved:
            report([Row(**json.loads(line)) for line in saved if line.strip()])
    else:
        asyncio.run(run(args))


def exact_threshold(index: str) -> int:
    """memory:// and SQLite's exact-search threshold under `--index`."""
    for part in index.split("&"):
        name, _, value = part.partition("=")
        if name == "exact_threshold":
            return int(value)
    return DEFAULT_EXACT_THRESHOLD


async def run(args: argparse.Namespace) -> None:
    backends = [b for b in args.backends.split(",") if b]
    sizes = [args.size] if args.size else [int(s) for s in args.sizes.split(",") if s]
    indexes = args.index.split(";")  # one load, one row per variant
    if len(indexes) > 1 and "qdrant" in backends and not os.environ.get("QDRANT_URL"):
        raise SystemExit("qdrant's local mode keeps its points in one handle: one --index only")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        urls = {backend: backend_url(backend, stack, Path(tmp)) for backend in backends}
        for n in sizes:
            for kind in args.datasets.split(","):
                ds = build(kind, n, args.seed, args.queries)
                for backend in backends:
                    # Milvus takes no index parameters (Lite: FLAT, exact); the others
                    # search exactly at or below their exact-search threshold.
                    variants = [
                        ("", True) if backend == "milvus" else (index, n <= exact_threshold(index))
                        for index in indexes
                    ]
                    rows += await measure(
                        backend,
                        urls[backend],
                        ds,
                        args.seed,
                        partial(done, args.save),
                        variants,
                        args.lock,
                    )
    report(rows)


if __name__ == "__main__":
    main()

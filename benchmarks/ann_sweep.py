"""Recall and latency of the embedded HNSW path against `ef_search`, on one graph.

Builds one `AnnIndex` (the index memory:// and SQLite use past the exact-search
threshold: a faiss HNSW graph whose candidates are re-scored exactly) over a
dataset of benchmarks/datasets.py, then searches it at each `--ef` value: the
graph is built once, so a sweep over ef_search costs one build instead of one
per value, without the store around it (scale.py measures through the store;
its `--index` variants do the same sweep there, which is what chose the
embedded default, docs/scale.md).

What each side does:
- **floor** (the most competent direct code for the same answer): the N x 384
  float32 matrix in process memory, `X @ q` (BLAS), `np.argpartition` for the
  10 best rows, those 10 sorted.
- **ours**: `AnnIndex.search(q, 10)` with `ef_search` set: the graph's best
  `ef_search` labels, the dead ones skipped, re-scored exactly in float64 and
  ordered (score descending, id ascending). No store, no record decoding: the
  index alone (scale.py measures through the store).

Per ef it prints recall@10 against the floor (mean and the worst query), the
p50 / p95 of a search and its ratio to the floor (median of interleaved
per-query ratios). The build runs before `--lock` is taken, so with
`--lock /path/bench.lock` only the timed searches hold it.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ann_sweep.py --size 1000000 \
        --ef 800,1000,1500,2000 --queries 200 --lock ../bench.lock
"""

from __future__ import annotations

import argparse
import fcntl
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import attrs
import numpy as np
import numpy.typing as npt

from agent_memory.adapters._common.ann import AnnIndex, AnnSettings

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import percentile
from datasets import build

K = 10


def floor_topk(matrix: npt.NDArray[np.float32], q: npt.NDArray[np.float32]) -> set[int]:
    scores = matrix @ q
    part = np.argpartition(-scores, K)[:K]
    return {int(i) for i in part[np.argsort(-scores[part])]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="clustered")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--m", type=int, default=16)
    parser.add_argument("--ef-construction", type=int, default=40)
    parser.add_argument("--ef", default="200,400,800,1000")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--lock", help="flock this file for the timed searches only")
    args = parser.parse_args()

    ds = build(args.dataset, args.size, args.seed, args.queries)
    data = ds.vectors
    ids = [f"r{i:07d}" for i in range(len(data))]
    settings = AnnSettings(exact_threshold=0, m=args.m, ef_construction=args.ef_construction)
    index = AnnIndex(data.shape[1], settings)
    index.add(ids, data)
    start = time.perf_counter()
    index.search(ds.queries[0], K)  # builds the graph
    build_s = time.perf_counter() - start
    print(
        f"{ds.name} N={len(data):,} M={args.m} ef_construction={args.ef_construction}:"
        f" graph built in {build_s:.0f} s",
        flush=True,
    )
    exact = [floor_topk(data, q) for q in ds.queries]
    with ExitStack() as stack:
        if args.lock:
            lock = stack.enter_context(open(args.lock, "a"))
            fcntl.flock(lock, fcntl.LOCK_EX)
        print("| ef_search | recall@10 mean / worst | p50 / p95 ms | vs floor |")
        print("| --- | --- | --- | --- |")
        for ef in [int(e) for e in args.ef.split(",")]:
            index.settings = attrs.evolve(settings, ef_search=ef)
            recall, ms, ratios = [], [], []
            for i, q in enumerate(ds.queries):
                timings = [0.0, 0.0]
                got: list[tuple[int, float]] = []
                for side in (0, 1) if i % 2 else (1, 0):
                    t = time.perf_counter()
                    if side == 0:
                        got = index.search(q, K)
                    else:
                        floor_topk(data, q)
                    timings[side] = time.perf_counter() - t
                recall.append(len({p for p, _ in got} & exact[i]) / K)
                ms.append(timings[0] * 1000)
                ratios.append(timings[0] / timings[1])
            print(
                f"| {ef:,} | {statistics.mean(recall):.3f} / {min(recall):.1f} |"
                f" {statistics.median(ms):.1f} / {percentile(ms, 0.95):.1f} |"
                f" {statistics.median(ratios):.3f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()

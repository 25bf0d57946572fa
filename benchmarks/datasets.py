"""Deterministic vector datasets for the scale benchmarks.

Each builder returns a `Dataset`: `vectors` (n x 384 float32, L2-normalised, the
records to index) and `queries` (float32, L2-normalised, never among `vectors`),
plus a name and a one-line description. The same arguments always give the same
arrays, so two runs (or two backends) measure the same thing.

- `random_unit(n, dim, seed)`: uniform on the sphere (standard normal rows,
  normalised); queries drawn the same way. The worst case for every graph index:
  in 384 dimensions all pairwise cosines are close to 0, so "nearest" barely
  differs from "any" and a graph's greedy walk has nothing to follow. Not what an
  embedding model produces; measured to say what a user gets there.
- `clustered(n, dim, seed)`: 64 Gaussian clusters (centre + 0.35 x noise per
  coordinate, normalised); each query is a fresh point of a cluster chosen at
  random, so a query has real neighbours in the index (as a text query has near
  texts in a memory). Cheap at any n: the 1M rows of the scale benchmark use it.
- `realistic(n)`: all-MiniLM-L6-v2 vectors (the bundled model, `MiniLMEmbedder`)
  of real conversation text: every turn of the LoCoMo dev set, then generated
  variants of those turns until there are n texts, each embedded for real. A
  variant is a deterministic word-level recombination: the first part of one turn
  joined to the last part of another turn of the same conversation, some words
  dropped (a paraphrase-like near neighbour that keeps the corpus' vocabulary and
  topics). Queries are the LoCoMo dev questions: held-out text, never indexed.
  Embedding runs at ~150 texts/s on one core here, so vectors are cached on disk
  outside the repository (`$AGENT_MEMORY_BENCH_CACHE`, default
  `~/.cache/agent-memory-bench/`), keyed by the data file's content hash and the
  generator version; a cache built for n serves every smaller n (the text order
  is fixed, so realistic(m) is a prefix of realistic(n) for m < n).

The LoCoMo file is read from `--data`/`data=` or `$LOCOMO_DATA` (default
`../shared/data/locomo-dev.json` next to the repository); it is not copied into
the repository.

    python benchmarks/datasets.py realistic 100000   # build (or check) the cache
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["DATASETS", "Dataset", "build", "clustered", "random_unit", "realistic"]

DIM = 384
REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO / ".." / "shared" / "data" / "locomo-dev.json"
# Bump when the text generator changes: the cache key includes it.
GENERATOR_VERSION = 1
F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    vectors: F32  # (n, dim), unit rows: the records
    queries: F32  # (q, dim), unit rows: never among `vectors`


def unit(rows: npt.NDArray[Any]) -> F32:
    rows = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    return (rows / norms).astype(np.float32)


def random_unit(n: int, dim: int = DIM, seed: int = 7, queries: int = 100) -> Dataset:
    """Uniform unit vectors (the hardest case for graph indexes)."""
    rng = np.random.default_rng(seed)
    vectors = _chunked(lambda m: rng.standard_normal((m, dim)), n)
    return Dataset(
        "random",
        "uniform on the 384-d sphere",
        vectors,
        unit(rng.standard_normal((queries, dim))),
    )


def clustered(n: int, dim: int = DIM, seed: int = 7, queries: int = 100) -> Dataset:
    """64 Gaussian clusters; queries are fresh points of random clusters."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((64, dim))

    def block(m: int) -> npt.NDArray[np.float64]:
        labels = rng.integers(0, 64, m)
        out: npt.NDArray[np.float64] = centres[labels] + 0.35 * rng.standard_normal((m, dim))
        return out

    vectors = _chunked(block, n)
    return Dataset(
        "clustered", "64 Gaussian clusters, queries from them", vectors, unit(block(queries))
    )


def _chunked(make: Any, n: int, chunk: int = 100_000) -> F32:
    """n unit rows made `chunk` at a time (1M rows without a 3 GB float64 temporary)."""
    out = np.empty((n, DIM), dtype=np.float32)
    for at in range(0, n, chunk):
        m = min(chunk, n - at)
        out[at : at + m] = unit(make(m))
    return out


# --- realistic: MiniLM vectors of LoCoMo turns and their variants ---------------


def data_path(data: str | Path | None = None) -> Path:
    path = Path(data or os.environ.get("LOCOMO_DATA") or DEFAULT_DATA).resolve()
    if not path.is_file():
        raise SystemExit(f"LoCoMo data not found at {path}: pass data= or set LOCOMO_DATA")
    return path


def locomo_texts(path: Path) -> tuple[list[list[str]], list[str]]:
    """(turn texts per conversation, every question), in file order."""
    samples = json.loads(path.read_text(encoding="utf-8"))
    conversations: list[list[str]] = []
    questions: list[str] = []
    for sample in samples:
        conv = sample["conversation"]
        turns: list[str] = []
        s = 1
        while f"session_{s}" in conv or f"session_{s}_date_time" in conv:
            for turn in conv.get(f"session_{s}") or []:
                text = str(turn["text"])
                if turn.get("blip_caption"):
                    text += f" [shares {turn['blip_caption']}]"
                turns.append(text)
            s += 1
        conversations.append(turns)
        questions.extend(str(qa["question"]) for qa in sample["qa"])
    return conversations, questions


def texts(n: int, conversations: list[list[str]]) -> list[str]:
    """The first n texts: every turn, then variants (deterministic, seed 7).

    A variant joins the first 40-70% of the words of one turn to the last
    30-60% of another turn of the same conversation, then drops each word with
    probability 0.1 (at least 4 words kept). Variants repeat no text already made."""
    out = [t for turns in conversations for t in turns][:n]
    seen = set(out)
    rng = random.Random(7)
    while len(out) < n:
        turns = conversations[rng.randrange(len(conversations))]
        a = turns[rng.randrange(len(turns))].split()
        b = turns[rng.randrange(len(turns))].split()
        head = a[: max(1, round(len(a) * rng.uniform(0.4, 0.7)))]
        tail = b[len(b) - max(1, round(len(b) * rng.uniform(0.3, 0.6))) :]
        words = [w for w in head + tail if rng.random() >= 0.1]
        if len(words) < 4:
            words = head + tail
        text = " ".join(words)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def cache_dir() -> Path:
    root = os.environ.get("AGENT_MEMORY_BENCH_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "agent-memory-bench"


def realistic(n: int, data: str | Path | None = None, *, verbose: bool = True) -> Dataset:
    """MiniLM vectors of n LoCoMo turns and variants; LoCoMo questions as queries."""
    path = data_path(data)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    key = f"realistic-v{GENERATOR_VERSION}-{digest}"
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    conversations, questions = locomo_texts(path)
    vectors = _cached(directory, key, texts(n, conversations), verbose)
    queries = _cached(directory, f"{key}-questions", questions, verbose)
    return Dataset(
        "realistic",
        "MiniLM of LoCoMo turns + variants; LoCoMo questions as queries",
        vectors,
        queries,
    )


def _cached(directory: Path, key: str, items: list[str], verbose: bool) -> F32:
    """Vectors of `items`, from the largest cache file of `key` that covers them
    (a prefix), else embedded (resuming from the largest shorter one) and saved."""
    n = len(items)
    have = _cache_files(directory, key)
    for size, file in have:
        if size >= n:
            return np.load(file, mmap_mode="r")[:n].copy()
    done = np.load(have[-1][1]) if have else np.zeros((0, DIM), dtype=np.float32)
    from agent_memory.adapters.minilm.embedder import MiniLMEmbedder

    embedder = MiniLMEmbedder(batch_size=64)
    parts = [done]
    start, t0 = len(done), time.perf_counter()
    step = 5_000
    for at in range(start, n, step):
        parts.append(embedder.embed_sync(items[at : at + step]))
        made = at + len(parts[-1])
        if verbose:
            rate = (made - start) / (time.perf_counter() - t0)
            print(f"  embedded {made:,}/{n:,} ({rate:.0f} texts/s)", file=sys.stderr, flush=True)
        if len(parts) % 4 == 0 or made == n:  # checkpoint: an interrupted build resumes
            done = np.concatenate(parts)
            parts = [done]
            _save(directory, key, done)
    return np.concatenate(parts)[:n]


def _cache_files(directory: Path, key: str) -> list[tuple[int, Path]]:
    out: list[tuple[int, Path]] = []
    for file in directory.glob(f"{key}-*.npy"):
        size = file.stem[len(key) + 1 :]
        if size.isdigit():
            out.append((int(size), file))
    return sorted(out)


def _save(directory: Path, key: str, vectors: F32) -> None:
    final = directory / f"{key}-{len(vectors)}.npy"
    partial = final.with_suffix(".tmp.npy")
    np.save(partial, vectors)
    partial.replace(final)
    for size, file in _cache_files(directory, key):
        if size < len(vectors):
            file.unlink()  # superseded: a prefix of the new file


DATASETS = {"random": random_unit, "clustered": clustered, "realistic": realistic}


def build(name: str, n: int, seed: int = 7, queries: int = 100) -> Dataset:
    """The named dataset with n records and at most `queries` queries."""
    if name == "realistic":
        full = realistic(n)
        picked = np.random.default_rng(seed).permutation(len(full.queries))[:queries]
        return Dataset(full.name, full.description, full.vectors, full.queries[np.sort(picked)])
    if name == "random":
        return random_unit(n, DIM, seed, queries)
    if name == "clustered":
        return clustered(n, DIM, seed, queries)
    raise SystemExit(f"unknown dataset {name!r}: one of {', '.join(DATASETS)}")


if __name__ == "__main__":
    kind, size = sys.argv[1], int(sys.argv[2])
    ds = build(kind, size)
    print(f"{ds.name}: {ds.vectors.shape} records, {ds.queries.shape} queries ({ds.description})")

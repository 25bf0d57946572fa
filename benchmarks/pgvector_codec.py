"""Our hand-written pgvector codec (`adapters/postgres/_vector.py`) against the
`pgvector` package's, on the binary wire format both speak.

- **load**, both sides turn 200 binary `vector(384)` values into float32 numpy
  arrays: ours with one `np.frombuffer` of the big-endian payload per value;
  the package with `Vector.from_binary(...).to_numpy()` (an `array('f')` copy
  and byte swap, then a numpy view), which is what its psycopg loader does.
- **dump**, both sides turn 200 float32 numpy arrays into the binary wire
  value: ours with one numpy byte-order conversion; the package with
  `Vector(array).to_binary()`, what its psycopg dumper does.
A check first asserts both sides produce identical values.

Needs the package, which agent-memory does not depend on:
`.venv/bin/pip install pgvector && .venv/bin/python benchmarks/pgvector_codec.py`
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np

from agent_memory.adapters.postgres._vector import (
    PgVector,
    _VectorBinaryDumper,
    _VectorBinaryLoader,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import compare


def main() -> None:
    try:
        from pgvector import Vector
    except ImportError:
        raise SystemExit("pip install pgvector first (a comparison only)") from None
    rng = np.random.default_rng(1)
    vectors = [rng.standard_normal(384).astype(np.float32) for _ in range(200)]
    blobs = [struct.pack(">HH", 384, 0) + v.astype(">f4").tobytes() for v in vectors]
    loader = _VectorBinaryLoader.__new__(_VectorBinaryLoader)
    dumper = _VectorBinaryDumper.__new__(_VectorBinaryDumper)
    for v, b in zip(vectors, blobs, strict=True):
        assert np.array_equal(loader.load(b), Vector.from_binary(b).to_numpy())
        assert bytes(dumper.dump(PgVector(v))) == Vector(v).to_binary() == b

    def ours_load() -> None:
        for b in blobs:
            loader.load(b)

    def package_load() -> None:
        for b in blobs:
            Vector.from_binary(b).to_numpy()

    def ours_dump() -> None:
        for v in vectors:
            dumper.dump(PgVector(v))

    def package_dump() -> None:
        for v in vectors:
            Vector(v).to_binary()

    print(compare("pgvector-load-200", ours_load, package_load, rounds=200, warmup=10).line())
    print(compare("pgvector-dump-200", ours_dump, package_dump, rounds=200, warmup=10).line())


if __name__ == "__main__":
    main()

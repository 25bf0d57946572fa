"""pgvector's `vector` type on the wire, without the `pgvector` package.

Binary format (pgvector `vector_send`): int16 dimension, int16 unused, then
`dimension` big-endian float4. Dumping and loading are numpy byte-order
conversions, so a batch of vectors costs no Python loop over components.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format
from psycopg.types.string import ByteaBinaryLoader

__all__ = ["PgVector", "VectorBytesLoader", "register_vector", "vectors_from_bytes"]

_HEADER = struct.Struct(">HH")
_BIG_F4 = np.dtype(">f4")


class PgVector:
    """Marks a float32 vector to be sent as pgvector's `vector` (binary)."""

    __slots__ = ("values",)

    def __init__(self, values: npt.NDArray[np.float32]) -> None:
        self.values = values


class _VectorBinaryDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: Any) -> Buffer:
        values = np.asarray(obj.values, dtype=_BIG_F4)
        return _HEADER.pack(values.shape[0], 0) + values.tobytes()


class _VectorBinaryLoader(Loader):
    format = Format.BINARY

    def load(self, data: Buffer) -> npt.NDArray[np.float32]:
        raw = bytes(data)
        dim, _unused = _HEADER.unpack_from(raw)
        out: npt.NDArray[np.float32] = np.frombuffer(
            raw, dtype=_BIG_F4, count=dim, offset=_HEADER.size
        ).astype(np.float32)
        out.flags.writeable = False
        return out


# `vector` (binary) as the bytes of its wire format, for a statement whose
# vectors are decoded together (`vectors_from_bytes`): one numpy conversion for
# all the rows instead of a loader call per row. psycopg's `bytea` loader (its
# C version when psycopg's C extension is installed: no Python call per value).
VectorBytesLoader = ByteaBinaryLoader


def vectors_from_bytes(raws: list[bytes], dimension: int) -> npt.NDArray[np.float32]:
    """The `(len(raws), dimension)` read-only float32 matrix of vectors in
    pgvector's binary format (`VectorBytesLoader`), each of `dimension`: the
    values `_VectorBinaryLoader` gives row by row, converted in one go. Its rows
    are read-only views, fit to be records' vectors."""
    layout = _layouts.get(dimension)
    if layout is None:
        # Each vector: its 4-byte header, then `dimension` big-endian float4.
        layout = _layouts[dimension] = np.dtype([("header", ">u4"), ("values", _BIG_F4, dimension)])
    raw = b"".join(raws)
    if len(raw) != len(raws) * layout.itemsize:
        raise ValueError(f"vectors of {dimension} dimensions expected")
    out: npt.NDArray[np.float32] = np.frombuffer(raw, dtype=layout)["values"].astype(np.float32)
    out.flags.writeable = False
    return out


_layouts: dict[int, np.dtype[Any]] = {}


def register_vector(context: AdaptContext, oid: int) -> None:
    """Teach a connection (or adapters map) the `vector` type with this oid."""
    dumper = type("PgVectorBinaryDumper", (_VectorBinaryDumper,), {"oid": oid})
    context.adapters.register_dumper(PgVector, dumper)
    context.adapters.register_loader(oid, _VectorBinaryLoader)

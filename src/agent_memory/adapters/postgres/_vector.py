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

__all__ = ["PgVector", "register_vector"]

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


def register_vector(context: AdaptContext, oid: int) -> None:
    """Teach a connection (or adapters map) the `vector` type with this oid."""
    dumper = type("PgVectorBinaryDumper", (_VectorBinaryDumper,), {"oid": oid})
    context.adapters.register_dumper(PgVector, dumper)
    context.adapters.register_loader(oid, _VectorBinaryLoader)

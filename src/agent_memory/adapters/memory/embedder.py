"""A deterministic, offline `Embedder`: feature hashing of words and character
n-grams, L2-normalised. No model, no download; similar wording gives similar
vectors, which is enough for tests, demos and lexical-ish recall."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import MAX_DIMENSION, EmbeddingSpace

__all__ = ["HashingEmbedder"]

_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder:
    """`Embedder` by signed feature hashing (words weigh 1, char n-grams 0.5)."""

    def __init__(self, dimension: int = 256, ngram: int = 3) -> None:
        if not isinstance(dimension, int) or not 8 <= dimension <= MAX_DIMENSION:
            raise InvalidInput(
                "dimension", f"an integer from 8 to {MAX_DIMENSION} is required, got {dimension!r}"
            )
        if not isinstance(ngram, int) or ngram < 2:
            raise InvalidInput("ngram", f"an integer >= 2 is required, got {ngram!r}")
        self._ngram = ngram
        self._space = EmbeddingSpace(
            model=f"agent-memory/hashing-v1-ngram{ngram}", dimension=dimension, provable=True
        )

    @property
    def space(self) -> EmbeddingSpace:
        return self._space

    def _features(self, text: str) -> list[tuple[str, float]]:
        words = _WORD.findall(text.lower())
        feats: list[tuple[str, float]] = [("w:" + w, 1.0) for w in words]
        n = self._ngram
        for w in words:
            padded = f"#{w}#"
            feats.extend(("c:" + padded[i : i + n], 0.5) for i in range(len(padded) - n + 1))
        return feats

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        dim = self._space.dimension
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidInput("texts", f"strings are required, got {type(text).__name__}")
            feats = self._features(text)
            if not feats:
                continue
            idx = np.empty(len(feats), dtype=np.int64)
            val = np.empty(len(feats), dtype=np.float32)
            for j, (feat, weight) in enumerate(feats):
                h = int.from_bytes(hashlib.blake2b(feat.encode(), digest_size=8).digest(), "little")
                idx[j] = h % dim
                val[j] = weight if (h >> 63) & 1 else -weight
            np.add.at(out[row], idx, val)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0.0] = 1.0
        result: npt.NDArray[np.float32] = (out / norms).astype(np.float32)
        return result

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.embed_sync(texts)

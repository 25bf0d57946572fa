"""`Embedder` over a local sentence-transformers model (all-MiniLM-L6-v2 by default).

Nothing is imported or loaded until the first `embed`: importing this module is
cheap, and a missing extra fails there with `ConfigurationError` naming it. The
model runs on the CPU in a worker thread so the event loop stays free; vectors
are L2-normalised float32. Offline: the bundled model directory is passed to
sentence-transformers with the Hugging Face hub switched to offline mode.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from agent_memory.adapters._common.minilm import (
    MINILM_SPACE,
    bundled_model_dir,
    check_model_args,
)
from agent_memory.domain.errors import ConfigurationError, InvalidInput, ModelError
from agent_memory.domain.records import EmbeddingSpace

__all__ = ["MINILM_SPACE", "SentenceTransformerEmbedder"]

_EXTRA = "pip install 'agent-memory[semantic]'"
_MISSING = f"the semantic embedder needs the 'semantic' extra: {_EXTRA}"


class SentenceTransformerEmbedder:
    """`Embedder` for all-MiniLM-L6-v2 (384 dimensions), or another local model
    directory given with its declared `space`."""

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        space: EmbeddingSpace | None = None,
        batch_size: int = 64,
        device: str = "cpu",
    ) -> None:
        self._model_dir, self._space = check_model_args(model_dir, space, batch_size)
        self._batch_size = batch_size
        self._device = device
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def space(self) -> EmbeddingSpace:
        return self._space

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                path = (
                    self._model_dir if self._model_dir is not None else bundled_model_dir(_MISSING)
                )
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError:
                    raise ConfigurationError(_MISSING) from None
                model = SentenceTransformer(str(path), device=self._device)
                measure = getattr(model, "get_embedding_dimension", None)
                if measure is None:  # sentence-transformers < 5
                    measure = model.get_sentence_embedding_dimension
                dim = measure()
                if dim != self._space.dimension:
                    raise ConfigurationError(
                        f"model at {path} gives {dim}-dimensional vectors, "
                        f"the declared space has {self._space.dimension}"
                    )
                self._model = model
            return self._model

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if isinstance(texts, str | bytes):
            raise InvalidInput("texts", "a sequence of strings is required, got one string")
        try:
            items = list(texts)
        except TypeError:
            raise InvalidInput(
                "texts", f"a sequence of strings is required, got {type(texts).__name__}"
            ) from None
        for text in items:
            if not isinstance(text, str):
                raise InvalidInput("texts", f"strings are required, got {type(text).__name__}")
        if not items:
            return np.zeros((0, self._space.dimension), dtype=np.float32)
        model = self._load()
        try:
            out = model.encode(
                items,
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        except Exception as exc:  # the library raises many kinds
            raise ModelError(f"sentence-transformers failed: {exc}") from exc
        result: npt.NDArray[np.float32] = np.asarray(out, dtype=np.float32)
        return result

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await asyncio.to_thread(self.embed_sync, texts)

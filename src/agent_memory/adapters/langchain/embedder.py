"""`LangChainEmbedder`: an `Embedder` over LangChain embeddings or a function."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from agent_memory.domain.errors import ConfigurationError, DimensionMismatch, ModelError
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.ports.models import Embedder

__all__ = ["LangChainEmbedder", "as_embedder"]

_PROBE = "agent-memory dimension probe"


def _is_embeddings(obj: object) -> bool:
    return callable(getattr(obj, "aembed_documents", None)) or callable(
        getattr(obj, "embed_documents", None)
    )


def _model_name(embed: object) -> str:
    """A readable model name: `langchain/<class>[/<model>]` or the function's name."""
    if _is_embeddings(embed):
        model = getattr(embed, "model", None) or getattr(embed, "model_name", None)
        name = f"langchain/{type(embed).__qualname__}"
        return f"{name}/{model}" if isinstance(model, str) and model.strip() else name
    return f"function/{getattr(embed, '__qualname__', type(embed).__qualname__)}"


async def _rows(embed: Any, texts: list[str]) -> Any:
    if callable(getattr(embed, "aembed_documents", None)):
        return await embed.aembed_documents(texts)
    if callable(getattr(embed, "embed_documents", None)):
        return embed.embed_documents(texts)
    out = embed(texts)
    return await out if inspect.isawaitable(out) else out


class LangChainEmbedder:
    """`Embedder` over a LangChain `Embeddings` (its `aembed_documents`, else
    `embed_documents`) or a sync or async function of a list of texts, in a
    space of `dims` named `model` (default: the class and its `model` field).
    The space is not provable (the name is trusted, as for a generic endpoint)."""

    def __init__(self, embed: Any, *, dims: int, model: str | None = None) -> None:
        if not (_is_embeddings(embed) or callable(embed)):
            raise ConfigurationError(
                "embedder: a LangChain Embeddings or a function of texts is required, "
                f"got {embed!r}"
            )
        if not isinstance(dims, int) or isinstance(dims, bool) or dims < 1:
            raise ConfigurationError(f"embedder dims: a positive integer is required, got {dims!r}")
        self.embeddings = embed
        self._space = EmbeddingSpace(
            model=model or _model_name(embed), dimension=dims, provable=False
        )

    @property
    def space(self) -> EmbeddingSpace:
        return self._space

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._space.dimension), dtype=np.float32)
        try:
            rows = np.asarray(await _rows(self.embeddings, texts), dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise ModelError(f"embedder {self._space.model!r} returned no matrix: {exc}") from exc
        if rows.ndim != 2 or rows.shape[0] != len(texts):
            raise ModelError(
                f"embedder {self._space.model!r} returned shape {rows.shape} for {len(texts)} texts"
            )
        if rows.shape[1] != self._space.dimension:
            raise DimensionMismatch(self._space.dimension, int(rows.shape[1]))
        return rows


async def as_embedder(embed: object, *, dims: int | None = None) -> Embedder:
    """`embed` as an `Embedder`: an `Embedder` as is; a LangChain `Embeddings`
    wrapped, its dimension taken from `dims` or else from embedding one probe
    text; a plain function needs `dims` (wrap it: `LangChainEmbedder(f, dims=N)`)."""
    if isinstance(embed, Embedder):
        return embed
    if dims is None:
        if not _is_embeddings(embed):
            raise ConfigurationError(
                "embedder: a plain embedding function needs its dimension; pass "
                "LangChainEmbedder(function, dims=N) (agent_memory.adapters.langchain)"
                if callable(embed)
                else f"embedder: an Embedder or a LangChain Embeddings is required, got {embed!r}"
            )
        probe = np.asarray(await _rows(embed, [_PROBE]), dtype=np.float32)
        if probe.ndim != 2 or probe.shape[0] != 1 or probe.shape[1] < 1:
            raise ModelError(f"embedder {_model_name(embed)!r} returned shape {probe.shape}")
        dims = int(probe.shape[1])
    return LangChainEmbedder(embed, dims=dims)

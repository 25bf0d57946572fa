"""Model ports: embedder, language model, tokenizer, clock.

The domain never reads the wall clock or the network itself; services get
these injected.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from agent_memory.domain.records import EmbeddingSpace

__all__ = ["Clock", "Embedder", "LanguageModel", "Tokenizer"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of one declared embedding space."""

    @property
    def space(self) -> EmbeddingSpace: ...

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """A `(len(texts), space.dimension)` float32 matrix."""
        ...


@runtime_checkable
class LanguageModel(Protocol):
    """Completes a prompt. `fingerprint` is stable and secret-free (model name,
    endpoint family, parameters) so caches can be keyed by it; `stable` is False
    when the fingerprint cannot be trusted to identify the model's behaviour."""

    @property
    def fingerprint(self) -> str: ...

    @property
    def stable(self) -> bool: ...

    async def complete(
        self, prompt: str, *, max_tokens: int, timeout: float, system: str | None = None
    ) -> str:
        """The model's text; `ModelTimeout` past `timeout` seconds, `ModelError` else."""
        ...


@runtime_checkable
class Tokenizer(Protocol):
    """Exact token counts for one model family."""

    def count(self, text: str) -> int: ...


@runtime_checkable
class Clock(Protocol):
    """The current time, timezone-aware UTC."""

    def now(self) -> datetime: ...

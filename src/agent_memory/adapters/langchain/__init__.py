"""Bring-your-own embeddings: a LangChain `Embeddings` (OpenAI's, Cohere's, ...)
or a plain function of texts as the memory's `Embedder`, so the memory and a
LangGraph index embed with one model (`connect(url, embedder=embeddings)`).
Nothing here imports LangChain: any object with `aembed_documents` or
`embed_documents` works."""

from agent_memory.adapters.langchain.embedder import LangChainEmbedder, as_embedder

__all__ = ["LangChainEmbedder", "as_embedder"]

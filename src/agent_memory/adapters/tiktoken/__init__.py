"""tiktoken adapter."""

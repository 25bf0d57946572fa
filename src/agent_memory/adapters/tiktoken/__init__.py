"""tiktoken adapter: exact token counts (extra `tiktoken`; loaded lazily)."""

from agent_memory.adapters.tiktoken.tokenizer import DEFAULT_PATTERN, TiktokenTokenizer

__all__ = ["DEFAULT_PATTERN", "TiktokenTokenizer"]

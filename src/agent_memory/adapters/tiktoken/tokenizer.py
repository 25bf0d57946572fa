"""`Tokenizer` on tiktoken (extra `tiktoken`): exact token counts for OpenAI model families.

tiktoken is imported, and the encoding loaded, on first use, never at import.
`tiktoken.get_encoding(name)` downloads the BPE file on first use unless it is
already cached (`TIKTOKEN_CACHE_DIR`); where that is impossible, give a local
BPE file with `bpe_file=`. Whatever goes wrong while loading (extra missing,
unknown encoding, no network, unreadable file) raises `ConfigurationError`
naming the encoding, once per attempt, instead of a raw library error.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from agent_memory.domain.errors import ConfigurationError

__all__ = ["DEFAULT_PATTERN", "TiktokenTokenizer"]

#: The cl100k_base pre-tokenisation pattern (used with `bpe_file` unless another is given).
DEFAULT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)


class TiktokenTokenizer:
    """Counts tokens with a tiktoken encoding (e.g. `cl100k_base`, `o200k_base`).

    Satisfies `agent_memory.ports.Tokenizer`. `bpe_file` loads the mergeable
    ranks from a local `.tiktoken` file instead of tiktoken's registry/network,
    with `pattern` (default: cl100k's) and `special_tokens`.
    """

    def __init__(
        self,
        encoding: str = "cl100k_base",
        *,
        bpe_file: str | os.PathLike[str] | None = None,
        pattern: str = DEFAULT_PATTERN,
        special_tokens: Mapping[str, int] | None = None,
    ) -> None:
        if not isinstance(encoding, str) or not encoding.strip():
            raise ConfigurationError(
                f"tiktoken encoding: a non-empty name is required, got {encoding!r}"
            )
        self._name = encoding
        self._bpe_file = os.fspath(bpe_file) if bpe_file is not None else None
        self._pattern = pattern
        self._special = dict(special_tokens or {})
        self._encoding: Any = None
        self._lock = threading.Lock()

    @property
    def encoding_name(self) -> str:
        return self._name

    def load(self) -> None:
        """Load the encoding now (else it loads on the first `count`)."""
        self._get()

    def count(self, text: str) -> int:
        """Exact number of tokens of `text` (special-token text counts as ordinary text)."""
        return len(self._get().encode_ordinary(text))

    def _get(self) -> Any:
        if self._encoding is None:
            with self._lock:
                if self._encoding is None:
                    self._encoding = self._load()
        return self._encoding

    def _load(self) -> Any:
        try:
            import tiktoken
            import tiktoken.load
        except ImportError as exc:
            raise ConfigurationError(
                "tiktoken is not installed: install the extra `agent-memory[tiktoken]`"
            ) from exc
        where = self._bpe_file or "tiktoken's registry"
        try:
            if self._bpe_file is None:
                return tiktoken.get_encoding(self._name)
            ranks = tiktoken.load.load_tiktoken_bpe(self._bpe_file)
            return tiktoken.Encoding(
                self._name,
                pat_str=self._pattern,
                mergeable_ranks=ranks,
                special_tokens=self._special,
            )
        except Exception as exc:  # tiktoken raises ValueError, OSError, requests errors...
            raise ConfigurationError(
                f"tiktoken encoding {self._name!r} could not be loaded from {where}: "
                f"{type(exc).__name__}: {exc}. Without network access the BPE file must be "
                "cached already (TIKTOKEN_CACHE_DIR) or given as bpe_file="
            ) from exc

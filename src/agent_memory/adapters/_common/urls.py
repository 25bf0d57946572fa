"""The file path a storage URL names (`sqlite:///...`, `milvus+lite:///...`).

Percent-escapes are decoded strictly: an escape that is not UTF-8 (`%ff`), a
NUL (`%00` or a raw one) or a lone surrogate cannot name a file, so the URL is
refused with a `ConfigurationError` that names it, before any file is opened
(decoding with replacement characters would open another file instead)."""

from __future__ import annotations

from urllib.parse import unquote

from agent_memory.domain.errors import ConfigurationError

__all__ = ["file_path"]


def file_path(raw: str, url: str) -> str:
    """The decoded path `raw` (the path part of `url`), or `ConfigurationError`."""
    try:
        path = unquote(raw, errors="strict")
        path.encode("utf-8")
    except UnicodeError:
        raise ConfigurationError(
            f"the storage URL {url!r} names no valid file path: its path is not UTF-8 "
            "(a percent-escape or a lone surrogate)"
        ) from None
    if "\x00" in path:
        raise ConfigurationError(
            f"the storage URL {url!r} names no valid file path: it holds NUL (\\x00 or %00)"
        )
    return path

"""UTF-8-safe text helpers (pure)."""

from __future__ import annotations

__all__ = ["SHORTENED_MARKER", "shorten_utf8", "utf8_len"]

SHORTENED_MARKER = "[shortened]"


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def shorten_utf8(text: str, max_bytes: int, *, marker: str = SHORTENED_MARKER) -> tuple[str, bool]:
    """Cut `text` to at most `max_bytes` UTF-8 bytes, never inside a character.

    When cut, `marker` is appended *outside* the allowance (the kept text has at
    most `max_bytes` bytes, the marker comes on top). Returns (text, shortened).
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text, False
    kept = raw[:max_bytes].decode("utf-8", errors="ignore")
    return kept + marker, True

"""Placeholder: the CacheContract conformance class (being written)."""

from __future__ import annotations

__all__ = ["CacheContract"]


class CacheContract:
    """Not yet written."""

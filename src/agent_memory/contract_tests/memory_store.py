"""Placeholder: the MemoryStoreContract conformance class (being written)."""

from __future__ import annotations

__all__ = ["MemoryStoreContract"]


class MemoryStoreContract:
    """Not yet written."""

"""Placeholder: the LeaseStoreContract conformance class (being written)."""

from __future__ import annotations

__all__ = ["LeaseStoreContract"]


class LeaseStoreContract:
    """Not yet written."""

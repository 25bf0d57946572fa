"""Placeholder: the EventLogContract conformance class (being written)."""

from __future__ import annotations

__all__ = ["EventLogContract"]


class EventLogContract:
    """Not yet written."""

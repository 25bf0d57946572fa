"""`Capabilities`, re-exported from `agent_memory.ports.capabilities` (which
needs no test library) so existing imports from the contract suite keep working."""

from __future__ import annotations

from agent_memory.ports.capabilities import Capabilities, ConformanceFactory

__all__ = ["Capabilities", "ConformanceFactory"]

"""The system clock for adapters and bootstrap: `agent_memory.domain.time.SystemClock`
(one implementation; this module keeps the adapters' import path)."""

from __future__ import annotations

from agent_memory.domain.time import SystemClock

__all__ = ["SystemClock"]

"""Test helpers for graph memory: a rule-following LanguageModel and a clock."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta

from attrs import define, field

_FACT = re.compile(r"FACT:\s*(.+?)\s*\|\s*(.+?)\s*\|\s*(.+?)\s*$", re.MULTILINE)


@define
class RuleModel:
    """A real `LanguageModel` that answers by rule: every `FACT: s | p | o` line
    in the prompt becomes a triple; a prompt containing `GARBAGE` gets a
    non-JSON answer, `HALFBAD` one good and one malformed item. `delay` slows
    every call (to keep messages in flight)."""

    delay: float = 0.0
    calls: int = 0
    max_tokens_seen: list[int] = field(factory=list)
    fingerprint: str = "rule-model-v1"
    stable: bool = True

    async def complete(
        self, prompt: str, *, max_tokens: int, timeout: float, system: str | None = None
    ) -> str:
        self.calls += 1
        self.max_tokens_seen.append(max_tokens)
        if self.delay:
            await asyncio.sleep(self.delay)
        if "GARBAGE" in prompt:
            return "I am not sure what you mean."
        items: list[object] = [
            {"subject": s, "predicate": p, "object": o} for s, p, o in _FACT.findall(prompt)
        ]
        if "HALFBAD" in prompt:
            items.append({"subject": "x", "predicate": 3})
        return json.dumps(items)


class FixedClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self.at = start or datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


async def wait_for(predicate: object, timeout: float = 10.0, what: str = "condition") -> None:
    """Poll `predicate()` until true; fail with `what` after `timeout` seconds."""
    assert callable(predicate)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)

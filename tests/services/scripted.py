"""A scripted `LanguageModel` for service tests: a real implementation of the
port that answers from a list (text, an exception to raise, or a delay)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from attrs import define, field

from agent_memory.domain.errors import ModelTimeout


@define
class Delay:
    seconds: float
    then: str = "[]"


@define
class ScriptedModel:
    answers: list[str | BaseException | Delay]
    prompts: list[str] = field(factory=list)
    fingerprint: str = "scripted-v1"
    stable: bool = True

    async def complete(
        self, prompt: str, *, max_tokens: int, timeout: float, system: str | None = None
    ) -> str:
        self.prompts.append(prompt)
        if not self.answers:
            raise AssertionError("the scripted model was called more often than scripted")
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, Delay):
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.sleep(answer.seconds)
            except TimeoutError:
                raise ModelTimeout(f"scripted model exceeded {timeout}s") from None
            return answer.then
        return answer


def answers_for(summaries: Sequence[str]) -> str:
    import json

    return json.dumps([{"index": i, "summary": s} for i, s in enumerate(summaries)])

"""Recorder: one episodic event per eligible step, summarised by the model in one
batched call (or by a custom `Summarizer`), with a heuristic fallback (and its
reason) for every step without a usable summary. Entities come from the step
metadata and the model's summary, or from a custom `EntityExtractor`; the
request's own entities only when `include_request_entities` is set. Fail-open:
it reports, it never raises — except `CancelledError`, after which nothing more
is written (`parent_cancelled`).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from attrs import define

from agent_memory.domain.errors import ModelTimeout
from agent_memory.domain.records import Entity, Event, SummarySource
from agent_memory.domain.steps import (
    CAUSE_MAX_BYTES,
    EntityCounts,
    FallbackReason,
    Step,
    StepSummary,
    build_event,
    heuristic_summary,
    step_payload,
)
from agent_memory.domain.summary_parsing import parse_summaries
from agent_memory.ports.models import Clock, LanguageModel
from agent_memory.ports.storage import EventLog
from agent_memory.services.reports import StageReport

__all__ = [
    "SUMMARY_SYSTEM_PROMPT",
    "EntityExtractor",
    "Recorder",
    "RecorderOptions",
    "Summarizer",
]

SUMMARY_SYSTEM_PROMPT = (
    "You summarise the steps an operations agent executed, for other agents that will "
    "read them later. Answer with ONLY a JSON array, one object per step: "
    '{"index": <step index>, "summary": "<one factual sentence>", '
    '"entities": [{"type": "<kind>", "id": "<identifier>"}]}. '
    "Name only entities that appear in the step."
)


@runtime_checkable
class EntityExtractor(Protocol):
    """Names the entities one step operated on (a pod, an order, a patient...).
    Entity types and ids are opaque to agent-memory."""

    def extract_entities(self, text: str, metadata: Mapping[str, Any]) -> Sequence[Entity]: ...


@runtime_checkable
class Summarizer(Protocol):
    """Summarises a request's eligible steps: one entry per step, in order — a
    string, a `StepSummary` (with entities), or None for "no summary"."""

    async def summarize(self, steps: Sequence[Step]) -> Sequence[str | StepSummary | None]: ...


@define
class RecorderOptions:
    """Batch limit, per-step payload allowance (bytes), model timeout (s), tokens;
    whether the request's own entities are recorded (opt-in); a custom entity
    extractor (replaces the model's entities) and a custom summarizer (replaces
    the model call; its summaries are `custom`, with no batch observation)."""

    max_batch: int = 20
    payload_allowance: int = 4000
    cause_max_bytes: int = CAUSE_MAX_BYTES
    """Bytes of a failure cause kept in heuristic summaries and event metadata."""
    summary_timeout: float = 120.0
    max_tokens: int = 2048
    include_request_entities: bool = False
    entity_extractor: EntityExtractor | None = None
    summarizer: Summarizer | None = None


class Recorder:
    """Writes the events of one request's steps."""

    def __init__(
        self,
        events: EventLog,
        llm: LanguageModel | None,
        clock: Clock,
        options: RecorderOptions | None = None,
    ) -> None:
        self._events = events
        self._llm = llm
        self._clock = clock
        self._options = options or RecorderOptions()

    def _prompt(self, steps: Sequence[Step]) -> str:
        payloads = [
            {
                "index": i,
                **step_payload(
                    step, self._options.payload_allowance, self._options.cause_max_bytes
                ),
            }
            for i, step in enumerate(steps)
        ]
        return "Steps:\n" + json.dumps(payloads, ensure_ascii=False, indent=1)

    async def _summarise(
        self, steps: Sequence[Step], report: StageReport
    ) -> tuple[dict[int, StepSummary], dict[int, FallbackReason]]:
        """Model summaries by index, and the fallback reason for every other step."""
        if self._options.summarizer is not None:
            return await self._custom(steps, report)
        n = len(steps)
        batch = min(n, self._options.max_batch)
        reasons: dict[int, FallbackReason] = {
            i: FallbackReason.BATCH_LIMIT for i in range(batch, n)
        }
        if self._llm is None:
            reasons.update({i: FallbackReason.NO_MODEL for i in range(batch)})
            return {}, reasons
        if batch == 0:
            return {}, reasons
        try:
            answer = await self._llm.complete(
                self._prompt(steps[:batch]),
                max_tokens=self._options.max_tokens,
                timeout=self._options.summary_timeout,
                system=SUMMARY_SYSTEM_PROMPT,
            )
        except (ModelTimeout, TimeoutError) as exc:
            report.fail("summarise", exc)
            reasons.update({i: FallbackReason.SUMMARY_TIMEOUT for i in range(batch)})
            return {}, reasons
        except Exception as exc:
            report.fail("summarise", exc)
            reasons.update({i: FallbackReason.MODEL_ERROR for i in range(batch)})
            return {}, reasons
        parsed = parse_summaries(answer, batch)
        report.details["summary_coverage"] = {
            "batch": {
                "steps": batch,
                "summaries": len(parsed.items),
                "truncated": parsed.truncated,
                "entity_fields": parsed.entity_fields.as_dict(),
            }
        }
        if parsed.error is not None:
            report.details["parse_error"] = parsed.error
        if parsed.truncated:
            report.details["summary_truncated"] = True
        for i in range(batch):
            if i not in parsed.items:
                reasons[i] = FallbackReason.PARSE_ERROR
        return parsed.items, reasons

    async def _custom(
        self, steps: Sequence[Step], report: StageReport
    ) -> tuple[dict[int, StepSummary], dict[int, FallbackReason]]:
        """Summaries from the custom summarizer (no batch observation)."""
        assert self._options.summarizer is not None
        report.details["summary_coverage"] = {"batch": "unobserved"}
        try:
            async with asyncio.timeout(self._options.summary_timeout):
                answers = list(await self._options.summarizer.summarize(steps))
        except TimeoutError as exc:
            report.fail("summarise", exc)
            return {}, {i: FallbackReason.SUMMARY_TIMEOUT for i in range(len(steps))}
        except Exception as exc:
            report.fail("summarise", exc)
            return {}, {i: FallbackReason.SUMMARIZER_ERROR for i in range(len(steps))}
        items: dict[int, StepSummary] = {}
        reasons: dict[int, FallbackReason] = {}
        for i in range(len(steps)):
            answer = answers[i] if i < len(answers) else None
            if isinstance(answer, str) and answer.strip():
                items[i] = StepSummary(summary=answer.strip())
            elif isinstance(answer, StepSummary) and answer.summary.strip():
                items[i] = answer
            else:
                reasons[i] = FallbackReason.PARSE_ERROR
        return items, reasons

    def _extracted(self, step: Step, index: int, report: StageReport) -> tuple[Entity, ...]:
        """The custom extractor's entities for one step (none when it fails)."""
        assert self._options.entity_extractor is not None
        text = "\n".join(part for part in (step.action, step.response) if part)
        try:
            found = self._options.entity_extractor.extract_entities(text, dict(step.metadata))
            return tuple(e for e in found if isinstance(e, Entity))
        except Exception as exc:
            report.fail(f"entity-extractor[{index}]", exc)
            return ()

    async def record(
        self,
        *,
        domain: str,
        agent: str,
        request_id: str,
        steps: Sequence[Step],
        user_id: str | None = None,
        request_entities: Sequence[Entity] = (),
        report: StageReport | None = None,
    ) -> StageReport:
        """Summarise and append the eligible steps; the report says what happened."""
        report = report if report is not None else StageReport("memory-record")
        eligible = [(i, s) for i, s in enumerate(steps) if s.eligible]
        report.details.update({"steps": len(steps), "eligible": len(eligible), "events_written": 0})
        try:
            summaries, reasons = await self._summarise([s for _, s in eligible], report)
        except asyncio.CancelledError:
            report.details["fallback_reasons"] = {
                str(FallbackReason.PARENT_CANCELLED): len(eligible)
            }
            report.details["cancelled"] = True
            raise
        recorded_at = self._clock.now()
        events: list[Event] = []
        counts = EntityCounts()
        reason_counts: Counter[str] = Counter()
        sources: Counter[str] = Counter()
        entity_sources: Counter[str] = Counter()
        req_entities = tuple(request_entities) if self._options.include_request_entities else ()
        for position, (index, step) in enumerate(eligible):
            summary = summaries.get(position)
            reason = reasons.get(position)
            custom = self._options.summarizer is not None
            extracted: tuple[Entity, ...] = ()
            if self._options.entity_extractor is not None:
                extracted = self._extracted(step, index, report)
                step_entities: tuple[Entity, ...] = ()
            else:
                step_entities = summary.entities if summary else ()
            try:
                event, step_counts = build_event(
                    step,
                    event_id=step.id or f"{request_id}#{index}",
                    domain=domain,
                    agent=agent,
                    request_id=request_id,
                    user_id=user_id,
                    recorded_at=recorded_at,
                    summary=(
                        summary.summary
                        if summary
                        else heuristic_summary(step, self._options.cause_max_bytes)
                    ),
                    summary_source=(
                        SummarySource.HEURISTIC
                        if summary is None
                        else SummarySource.CUSTOM
                        if custom
                        else SummarySource.MODEL
                    ),
                    fallback_reason=None if summary else reason,
                    request_entities=req_entities,
                    model_entities=step_entities,
                    extracted_entities=extracted,
                    cause_max_bytes=self._options.cause_max_bytes,
                )
            except ValueError as exc:
                report.fail(f"build-event[{index}]", exc)
                continue
            events.append(event)
            counts += step_counts
            sources[str(event.summary_source)] += 1
            entity_sources[str(event.entity_source)] += 1
            if reason is not None and summary is None:
                reason_counts[str(reason)] += 1
        report.details.update(
            {
                "summary_sources": dict(sources),
                "entity_sources": dict(entity_sources),
                "fallback_reasons": dict(reason_counts),
                "metadata_entity_fields": {
                    "missing": counts.missing,
                    "empty": counts.empty,
                    "valid": counts.valid,
                    "invalid": counts.invalid,
                },
            }
        )
        if events:
            try:
                written = await self._events.append(events)
            except asyncio.CancelledError:
                report.details["cancelled"] = True
                raise
            except Exception as exc:
                report.fail("append", exc)
            else:
                report.details["events_written"] = written
        report.details["event_ids"] = [e.id for e in events]
        return report

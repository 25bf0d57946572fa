"""Recorder: batched model summaries with documented fallbacks (issue: episodic memory)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import InMemoryEventLog
from agent_memory.domain.errors import ModelError
from agent_memory.domain.records import Entity, EntitySource, SummarySource, TimeBasis
from agent_memory.domain.steps import Step
from agent_memory.domain.summary_parsing import parse_summaries
from agent_memory.services.recorder import Recorder, RecorderOptions

from .scripted import Delay, ScriptedModel, answers_for

NOW = datetime.now(UTC)


def steps(n: int) -> list[Step]:
    return [
        Step(action=f"step-{i}", outcome="success", response=f"did {i}", ended_at=NOW)
        for i in range(n)
    ]


async def run(model: ScriptedModel | None, the_steps: list[Step], **opts: object):
    log = InMemoryEventLog()
    recorder = Recorder(log, model, SystemClock(), RecorderOptions(**opts))  # type: ignore[arg-type]
    report = await recorder.record(domain="k8s", agent="A", request_id="r1", steps=the_steps)
    window = await log.window("k8s", since=NOW - timedelta(days=1), limit=100)
    events = sorted(window.events, key=lambda e: e.id)
    return report, events


async def test_model_summaries_are_used_in_one_batched_call() -> None:
    model = ScriptedModel([answers_for(["first", "second", "third"])])
    report, events = await run(model, steps(3))
    assert len(model.prompts) == 1
    assert [e.summary for e in events] == ["first", "second", "third"]
    assert {e.summary_source for e in events} == {SummarySource.MODEL}
    assert report.details["events_written"] == 3
    assert report.ok


@pytest.mark.parametrize(
    ("answer", "expected_model", "reason"),
    [
        ("Here you go:\n" + answers_for(["a", "b"]) + "\nHope this helps!", 2, None),
        ("```json\n" + answers_for(["a", "b"]) + "\n```", 2, None),
        (answers_for(["a", "b"])[:-25], 1, "parse_error"),  # truncated: keep complete entries
        ("```json\n" + answers_for(["a", "b"])[:-25], 1, "parse_error"),  # fenced, truncated
        ("Here you go:\n" + answers_for(["a", "b"])[:-25], 0, "parse_error"),  # prose + cut
        ("Sure!\n```json\n" + answers_for(["a", "b"])[:-25], 0, "parse_error"),
        ("I could not do that.", 0, "parse_error"),
        (answers_for(["a", "b"]) + " or maybe " + answers_for(["c", "d"]), 0, "parse_error"),
        ('{"summary": "not an array"}', 0, "parse_error"),
    ],
    ids=[
        "prose-wrapped",
        "fenced",
        "truncated",
        "fenced-truncated",
        "prose-truncated",
        "prose-fence-truncated",
        "garbage",
        "ambiguous",
        "object",
    ],
)
async def test_answer_shapes(answer: str, expected_model: int, reason: str | None) -> None:
    model = ScriptedModel([answer])
    _report, events = await run(model, steps(2))
    sources = [e.summary_source for e in events]
    assert sources.count(SummarySource.MODEL) == expected_model
    heuristic = [e for e in events if e.summary_source is SummarySource.HEURISTIC]
    assert len(heuristic) == 2 - expected_model
    assert all(e.fallback_reason == reason for e in heuristic)
    assert len(events) == 2, "every eligible step is recorded, whatever the model said"


async def test_timeout_falls_back_with_summary_timeout() -> None:
    model = ScriptedModel([Delay(5.0)])
    report, events = await run(model, steps(2), summary_timeout=0.05)
    assert [e.fallback_reason for e in events] == ["summary_timeout"] * 2
    assert [f.operation for f in report.failures] == ["summarise"]


async def test_model_error_falls_back_with_model_error() -> None:
    model = ScriptedModel([ModelError("HTTP 500")])
    report, events = await run(model, steps(2))
    assert [e.fallback_reason for e in events] == ["model_error"] * 2
    assert events[0].summary == "step-0 → success: did 0"
    assert not report.ok


async def test_batch_limit_caps_the_model_call() -> None:
    model = ScriptedModel([answers_for([f"s{i}" for i in range(3)])])
    report, events = await run(model, steps(5), max_batch=3)
    prompt_steps = json.loads(model.prompts[0].split("\n", 1)[1])
    assert len(prompt_steps) == 3
    by_id = {e.id: e for e in events}
    assert by_id["r1#3"].fallback_reason == "batch_limit"
    assert by_id["r1#4"].fallback_reason == "batch_limit"
    assert by_id["r1#0"].summary_source is SummarySource.MODEL
    assert report.details["fallback_reasons"] == {"batch_limit": 2}


async def test_no_model_gives_heuristic_summaries() -> None:
    _report, events = await run(None, steps(2))
    assert [e.fallback_reason for e in events] == ["no_model"] * 2


async def test_cancelled_caller_writes_nothing() -> None:
    log = InMemoryEventLog()
    model = ScriptedModel([Delay(10.0)])
    recorder = Recorder(log, model, SystemClock())
    task = asyncio.create_task(
        recorder.record(domain="k8s", agent="A", request_id="r1", steps=steps(2))
    )
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    window = await log.window("k8s", since=NOW - timedelta(days=1), limit=10)
    assert window.events == ()


async def test_payload_allowance_is_shared_between_cause_and_response() -> None:
    step = Step(action="x", outcome="failure", failure_cause="c" * 300, response="r" * 10_000)
    model = ScriptedModel([answers_for(["ok"])])
    await run(model, [step], payload_allowance=1000)
    sent = json.loads(model.prompts[0].split("\n", 1)[1])[0]
    assert sent["failure_cause"] == "c" * 256 + "[shortened]"
    assert len(sent["response"].removesuffix("[shortened]").encode()) == 1000 - len(
        sent["failure_cause"].encode()
    )
    assert sent["shortened"] is True


async def test_failure_cause_is_shortened_to_256_bytes_with_flag() -> None:
    cause = "é" * 200  # 400 bytes; the cut must not split a character
    _report, events = await run(None, [Step(action="x", outcome="failure", failure_cause=cause)])
    stored = events[0].metadata["failure_cause"]
    assert stored.endswith("[shortened]")
    assert len(stored.removesuffix("[shortened]").encode()) == 256
    assert events[0].metadata["failure_cause_shortened"] is True


async def test_event_time_basis() -> None:
    start, end = NOW - timedelta(minutes=5), NOW - timedelta(minutes=1)
    the_steps = [
        Step(action="a", started_at=start, ended_at=end),
        Step(action="b", started_at=start),
        Step(action="c"),
    ]
    _, events = await run(None, the_steps)
    assert [(e.time_basis, e.occurred_at) for e in events[:2]] == [
        (TimeBasis.STEP_END, end),
        (TimeBasis.STEP_START, start),
    ]
    assert events[2].time_basis is TimeBasis.RECORDED
    assert events[2].occurred_at == events[2].recorded_at


async def test_entities_from_request_metadata_and_model_with_counts() -> None:
    log = InMemoryEventLog()
    answer = json.dumps(
        [
            {"index": 0, "summary": "s0", "entities": [{"type": "node", "id": "n1"}]},
            {"index": 1, "summary": "s1"},
            {"index": 2, "summary": "s2"},
        ]
    )
    recorder = Recorder(
        log, ScriptedModel([answer]), SystemClock(), RecorderOptions(include_request_entities=True)
    )
    the_steps = [
        Step(action="a", metadata={"entity_type": "pod", "entity_id": "web-1"}),
        Step(action="b", metadata={"entities": [{"type": "svc", "id": "api"}, {"type": ""}]}),
        Step(action="c", metadata={"entity_type": "", "entity_id": ""}),
    ]
    report = await recorder.record(
        domain="k8s",
        agent="A",
        request_id="r1",
        steps=the_steps,
        request_entities=[Entity("incident", "i-9")],
    )
    window = await log.window("k8s", since=NOW - timedelta(days=1), limit=10)
    by_id = {e.id: e for e in window.events}
    first = by_id["r1#0"]
    assert first.entities == (
        Entity("incident", "i-9"),
        Entity("pod", "web-1"),
        Entity("node", "n1"),
    )
    assert first.entity_source is EntitySource.MIXED
    assert by_id["r1#2"].entities == (Entity("incident", "i-9"),)
    assert by_id["r1#2"].entity_source is EntitySource.REQUEST
    assert report.details["metadata_entity_fields"] == {
        "missing": 0,
        "empty": 1,
        "valid": 2,
        "invalid": 1,
    }


async def test_request_entities_are_recorded_only_when_asked() -> None:
    log = InMemoryEventLog()
    recorder = Recorder(log, None, SystemClock())
    await recorder.record(
        domain="k8s",
        agent="A",
        request_id="r1",
        steps=[Step(action="a")],
        request_entities=[Entity("incident", "i-9")],
    )
    (event,) = (await log.window("k8s", since=NOW - timedelta(days=1), limit=10)).events
    assert event.entities == ()
    assert event.entity_source is EntitySource.NONE
    assert RecorderOptions().include_request_entities is False


async def test_model_summaries_entity_fields_are_counted() -> None:
    answer = json.dumps(
        [
            {"index": 0, "summary": "s0"},
            {"index": 1, "summary": "s1", "entities": []},
            {"index": 2, "summary": "s2", "entities": [{"type": "pod", "id": "a"}]},
            {"index": 3, "summary": "s3", "entities": [{"type": ""}, "x"]},
            {"index": 4, "summary": "s4", "entities": [{"type": "pod", "id": "b"}, {"id": 1}]},
            {"index": 4, "summary": "duplicate", "entities": [{"type": "pod", "id": "c"}]},
        ]
    )
    report, events = await run(ScriptedModel([answer]), steps(5))
    batch = report.details["summary_coverage"]["batch"]
    assert batch["entity_fields"] == {
        "missing": 1,
        "empty": 1,
        "valid": 1,
        "invalid": 1,
        "mixed": 1,
        "accepted_entities": 2,
        "rejected_entities": 3,
    }
    assert events[4].entities == (Entity("pod", "b"),)


async def test_a_custom_summarizer_produces_custom_summaries() -> None:
    class Terse:
        async def summarize(self, the_steps: Sequence[Step]) -> list[str | None]:
            return [f"did {s.action}" if i else None for i, s in enumerate(the_steps)]

    model = ScriptedModel([])  # must not be called
    report, events = await run(model, steps(2), summarizer=Terse())
    assert [e.summary_source for e in events] == [SummarySource.HEURISTIC, SummarySource.CUSTOM]
    assert events[1].summary == "did step-1"
    assert events[0].fallback_reason == "parse_error"
    assert model.prompts == []
    assert report.details["summary_coverage"] == {"batch": "unobserved"}


async def test_a_failing_custom_summarizer_falls_back() -> None:
    class Broken:
        async def summarize(self, the_steps: Sequence[Step]) -> list[str | None]:
            raise RuntimeError("boom")

    report, events = await run(None, steps(2), summarizer=Broken())
    assert [e.fallback_reason for e in events] == ["summarizer_error"] * 2
    assert [f.operation for f in report.failures] == ["summarise"]


async def test_a_pluggable_entity_extractor_names_the_entities() -> None:
    class Patients:
        def extract_entities(self, text: str, metadata: Mapping[str, Any]) -> list[Entity]:
            return [Entity("patient", w) for w in text.split() if w.startswith("MRN-")]

    answer = json.dumps([{"index": 0, "summary": "s", "entities": [{"type": "x", "id": "y"}]}])
    the_steps = [Step(action="lookup", response="found MRN-12345")]
    _report, events = await run(ScriptedModel([answer]), the_steps, entity_extractor=Patients())
    assert events[0].entities == (Entity("patient", "MRN-12345"),), "the extractor replaces"
    assert events[0].entity_source is EntitySource.METADATA, "explicit, not the model's"


async def test_ineligible_steps_are_not_recorded_and_append_failure_is_reported() -> None:
    log = InMemoryEventLog()
    recorder = Recorder(log, None, SystemClock())
    await log.close()
    report = await recorder.record(
        domain="k8s",
        agent="A",
        request_id="r1",
        steps=[Step(action="a"), Step(action="hidden", eligible=False)],
    )
    assert report.details["eligible"] == 1
    assert report.details["events_written"] == 0
    assert [f.error_type for f in report.failures] == ["StoreClosed"]


_summary_texts = st.lists(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12).map(
        lambda s: "s" + s
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(texts=_summary_texts, cut=st.integers(min_value=1, max_value=400), prose=st.booleans())
def test_truncated_arrays_keep_complete_entries_only_when_bare(
    texts: list[str], cut: int, prose: bool
) -> None:
    """A cut array keeps a prefix of its complete entries when bare or fenced;
    with prose before it nothing is salvaged (the guide's rule)."""
    full = answers_for(texts)
    cut = min(cut, len(full) - 1)
    body = full[:-cut]
    answer = ("Here is the summary:\n" + body) if prose else body
    parsed = parse_summaries(answer, len(texts))
    if prose:
        assert parsed.items == {}
    else:
        assert all(parsed.items[i].summary == texts[i].strip() for i in parsed.items)
        assert sorted(parsed.items) == list(range(len(parsed.items))), "a prefix"


@pytest.mark.parametrize(
    ("guide_name", "ours"),
    [
        ("llm_entities", EntitySource.MODEL),
        ("explicit_metadata", EntitySource.METADATA),
        ("request_metadata", EntitySource.REQUEST),
        ("request_and_step", EntitySource.MIXED),
        ("none", EntitySource.NONE),
    ],
)
def test_the_guides_entity_source_names_are_accepted(guide_name: str, ours: EntitySource) -> None:
    assert EntitySource(guide_name) is ours

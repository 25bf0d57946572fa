"""`AGENT_MEMORY_*` settings: one list (the Settings fields), validated values
naming their variable, the configuration page's table, and each variable's
effect on the services bootstrap wires from the environment alone."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest

from agent_memory.bootstrap import (
    ENV_VARS,
    Settings,
    agent_memory_service,
    compactor,
    connect,
    reflection_job,
    user_memory_service,
)
from agent_memory.bootstrap.services import (
    compactor_options,
    reflection_options,
    request_options,
    user_memory_options,
)
from agent_memory.domain.digest import DecisionPath
from agent_memory.domain.errors import ConfigurationError
from agent_memory.domain.records import Entity, Event
from agent_memory.domain.steps import Step

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 11, 1, 12, tzinfo=UTC)


class AnsweringModel:
    """A `LanguageModel` that always gives the same answer."""

    fingerprint = "answering-v1"
    stable = True

    def __init__(self, answer: str) -> None:
        self.answer = answer

    async def complete(
        self, prompt: str, *, max_tokens: int, timeout: float, system: str | None = None
    ) -> str:
        return self.answer


class ManualClock:
    def __init__(self, now: datetime = NOW) -> None:
        self.at = now

    def now(self) -> datetime:
        return self.at


# -- one list ---------------------------------------------------------------------


def test_env_vars_are_the_settings_fields() -> None:
    fields = attrs.fields(Settings)
    assert list(ENV_VARS) == [f.metadata["env"].name for f in fields]
    for f in fields:
        var = f.metadata["env"]
        default = ENV_VARS[var.name].default
        assert default == (None if f.default is None else var.from_field(f.default))


def _doc_rows() -> dict[str, tuple[str, str]]:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    rows = re.findall(r"^\| `(AGENT_MEMORY_\w+)` \| (.+?) \| (.+?) \|$", doc, re.M)
    return {name: (default, meaning) for name, default, meaning in rows}


def test_configuration_table_is_exactly_the_settings() -> None:
    rows = _doc_rows()
    assert set(rows) == set(ENV_VARS), "the table lists every variable and nothing else"
    for name, (_parse, default, description) in ENV_VARS.items():
        shown = "—" if default is None else f"`{default}`"
        assert rows[name] == (shown, description), name


# -- validation ---------------------------------------------------------------------

_BAD = {
    "int": ["0", "-3", "1.5", "abc", ""],
    "limit": ["0", "10001", "x"],
    "number": ["0", "-1", "nan", "inf", "abc"],
    "fraction": ["-0.1", "1.5", "nan", "abc"],
    "url": ["not-a-url", "   "],
    "text": ["   "],
    "embedder": ["bert", "hash ing"],
}


@pytest.mark.parametrize("name", sorted(ENV_VARS))
def test_every_bad_value_fails_startup_naming_the_variable(name: str) -> None:
    var = next(f.metadata["env"] for f in attrs.fields(Settings) if f.metadata["env"].name == name)
    for raw in _BAD[var.kind]:
        if raw == "":
            continue  # empty means unset: the default
        with pytest.raises(ConfigurationError, match=re.escape(f"{name}={raw!r} is invalid")):
            Settings.from_env({name: raw})


def test_durations_out_of_range_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="AGENT_MEMORY_REFLECTION_INTERVAL_HOURS"):
        Settings.from_env({"AGENT_MEMORY_REFLECTION_INTERVAL_HOURS": "1e300"})
    with pytest.raises(ConfigurationError, match="AGENT_MEMORY_DIGEST_CACHE_TTL_SECONDS"):
        Settings.from_env({"AGENT_MEMORY_DIGEST_CACHE_TTL_SECONDS": str(4000 * 86400)})


def test_values_given_in_code_are_checked_alike() -> None:
    with pytest.raises(ConfigurationError, match=r"^AGENT_MEMORY_WINDOW_LIMIT: .*window_limit"):
        Settings(window_limit=0)
    with pytest.raises(ConfigurationError, match="AGENT_MEMORY_DIGEST_CACHE_TTL_SECONDS"):
        Settings(digest_cache_ttl=timedelta(0))
    with pytest.raises(ConfigurationError, match="AGENT_MEMORY_USER_SIMILARITY_THRESHOLD"):
        Settings(user_similarity_threshold=2.0)
    with pytest.raises(ConfigurationError, match="AGENT_MEMORY_REFLECTION_MIN_EVENTS"):
        Settings(reflection_min_events=True)


def test_cross_field_rules() -> None:
    with pytest.raises(ConfigurationError, match="AGENT_MEMORY_REFLECTION_MODEL"):
        Settings.from_env({"AGENT_MEMORY_REFLECTION_MODEL": "small"})
    with pytest.raises(ConfigurationError, match="must not all be 0"):
        Settings.from_env(
            {
                "AGENT_MEMORY_USER_WEIGHT_RELEVANCE": "0",
                "AGENT_MEMORY_USER_WEIGHT_RECENCY": "0",
                "AGENT_MEMORY_USER_WEIGHT_IMPORTANCE": "0",
            }
        )
    with pytest.raises(ConfigurationError, match="unknown setting"):
        Settings.from_env({"AGENT_MEMORY_DIGEST_CACHE_TTL": "10m"})


def test_guide_defaults() -> None:
    s = Settings()
    assert s.digest_cache_ttl == timedelta(minutes=5)
    assert s.digest_incremental_threshold == 20
    assert s.digest_target_tokens == 500
    assert s.compaction_raw_limit == 200
    assert s.compaction_lookback == timedelta(hours=24)
    assert s.reflection_interval == timedelta(hours=24)
    assert s.reflection_age_threshold == timedelta(days=7)
    assert s.reflection_min_events == 5
    assert s.reflection_fragments_per_entity == 3
    assert s.user_similarity_threshold == 0.75
    assert s.user_facts_in_prompt == 15
    assert s.user_recall_summaries == 3
    assert s.summary_payload_bytes == 4000
    assert s.failure_cause_bytes == 256
    assert s.summary_timeout == 120.0
    assert s.signals_in_prompt == 10
    assert Settings.from_env({}) == s


# -- sources ----------------------------------------------------------------------


def test_explain_names_each_source_and_redacts_secrets() -> None:
    env = {
        "AGENT_MEMORY_DIGEST_CACHE_TTL_SECONDS": "600",
        "AGENT_MEMORY_LLM_URL": "http://llm.example/v1",
        "AGENT_MEMORY_LLM_MODEL": "big",
        "AGENT_MEMORY_SUMMARIZER_MODEL": "fast",
        "AGENT_MEMORY_API_KEY": "sk-very-secret",
        "AGENT_MEMORY_COORDINATION_URL": "redis://u:hunter2@cache:6379/0",
    }
    settings = attrs.evolve(Settings.from_env(env), window_limit=7)
    rows = {row.variable: row for row in settings.explain(env)}
    assert rows["AGENT_MEMORY_DIGEST_CACHE_TTL_SECONDS"][2:4] == (600.0, "environment")
    assert rows["AGENT_MEMORY_WINDOW_LIMIT"][2:4] == (7, "code")
    assert rows["AGENT_MEMORY_DIGEST_TARGET_TOKENS"][2:4] == (500, "default")
    assert rows["AGENT_MEMORY_API_KEY"][2:4] == ("<redacted>", "environment")
    assert rows["AGENT_MEMORY_DIGEST_MODEL"].note == "uses 'fast'"
    assert rows["AGENT_MEMORY_REFLECTION_MODEL"].note == "uses 'big'"
    dump = repr(settings.explain(env)) + repr(settings)
    assert "sk-very-secret" not in dump
    assert "hunter2" not in repr(settings.explain(env))
    assert len(rows) == len(ENV_VARS)


# -- the guide's tuning recipes, from the environment alone -------------------------


def _event(i: int, at: datetime, entity: Entity | None = None) -> Event:
    return Event(
        id=f"e{i:04d}",
        domain="k8s",
        agent="a",
        action="restart",
        outcome="success",
        summary=f"restarted pod {i}",
        occurred_at=at,
        recorded_at=at,
        entities=(entity,) if entity else (),
    )


async def _connected(env: dict[str, str], clock: ManualClock):  # type: ignore[no-untyped-def]
    return await connect(
        f"memory://settings-{uuid.uuid4().hex}", settings=Settings.from_env(env), clock=clock
    )


async def test_compaction_recipe_changes_the_wired_compactor() -> None:
    env = {
        "AGENT_MEMORY_COMPACTION_RAW_LIMIT": "100",
        "AGENT_MEMORY_DIGEST_CACHE_TTL_SECONDS": "600",
        "AGENT_MEMORY_DIGEST_INCREMENTAL_THRESHOLD": "10",
        "AGENT_MEMORY_DIGEST_TARGET_TOKENS": "300",
        "AGENT_MEMORY_COMPACTION_LOOKBACK_HOURS": "2",
        "AGENT_MEMORY_DIGEST_TIMEOUT_SECONDS": "9",
    }
    clock = ManualClock()
    async with await _connected(env, clock) as memory:
        opts = compactor_options(memory)
        assert (opts.raw_limit, opts.incremental_threshold, opts.target_tokens) == (100, 10, 300)
        assert (opts.cache_ttl, opts.lookback, opts.model_timeout) == (
            timedelta(minutes=10),
            timedelta(hours=2),
            9.0,
        )
        digests = compactor(memory, clock=clock)
        # 150 events in the last hour, 5 older than the 2 h lookback.
        await memory.events.append(
            [_event(i, NOW - timedelta(seconds=10 * i + 10)) for i in range(150)]
            + [_event(900 + i, NOW - timedelta(hours=3)) for i in range(5)]
        )
        first = await digests.digest("k8s")
        assert first.path is DecisionPath.FULL
        assert first.report.details["events"] == 100, "COMPACTION_RAW_LIMIT bounds the window"
        # 10 new events: incremental (threshold 10) ...
        clock.at += timedelta(minutes=1)
        await memory.events.append([_event(200 + i, clock.at) for i in range(10)])
        assert (await digests.digest("k8s")).path is DecisionPath.INCREMENTAL
        # ... 11 new events: above the threshold, a full rebuild.
        clock.at += timedelta(minutes=1)
        await memory.events.append([_event(300 + i, clock.at) for i in range(11)])
        assert (await digests.digest("k8s")).path is DecisionPath.FULL_RECOMPACT
        # The entry written now lives 10 minutes (not the default 5).
        assert (await digests.digest("k8s")).path is DecisionPath.CACHED
        clock.at += timedelta(minutes=9)
        assert (await digests.digest("k8s")).path is DecisionPath.CACHED
        clock.at += timedelta(minutes=2)
        assert (await digests.digest("k8s")).path is DecisionPath.FULL


async def test_request_and_recorder_settings_reach_the_service() -> None:
    env = {
        "AGENT_MEMORY_WINDOW_LIMIT": "15",
        "AGENT_MEMORY_SIGNALS_IN_PROMPT": "3",
        "AGENT_MEMORY_SUMMARY_PAYLOAD_BYTES": "1000",
        "AGENT_MEMORY_FAILURE_CAUSE_MAX_BYTES": "40",
        "AGENT_MEMORY_SUMMARY_TIMEOUT_SECONDS": "7",
    }
    clock = ManualClock()
    async with await _connected(env, clock) as memory:
        opts = request_options(memory)
        assert (opts.window_limit, opts.coordination_limit) == (15, 3)
        assert (opts.recorder.payload_allowance, opts.recorder.cause_max_bytes) == (1000, 40)
        assert opts.recorder.summary_timeout == 7.0
        service = agent_memory_service(memory, clock=clock, digests=False)
        await memory.events.append([_event(i, NOW - timedelta(minutes=i + 1)) for i in range(30)])
        async with service.request(agent="a", domain="k8s", request_id="r1") as req:
            await req.planning_context()
            assert req.reports["memory-enrichment"].details["events"] == 15
            await req.record([Step(action="deploy", outcome="failure", failure_cause="x" * 500)])
        window = await memory.events.window("k8s", since=NOW - timedelta(days=1), limit=100)
        (recorded,) = [e for e in window.events if e.action == "deploy"]
        assert recorded.metadata["failure_cause"] == "x" * 40 + "[shortened]"
        assert recorded.metadata["failure_cause_shortened"] is True


async def test_reflection_recipe_changes_the_wired_job() -> None:
    env = {
        "AGENT_MEMORY_REFLECTION_MIN_EVENTS": "2",
        "AGENT_MEMORY_REFLECTION_INTERVAL_HOURS": "1",
        "AGENT_MEMORY_REFLECTION_AGE_THRESHOLD_HOURS": "48",
        "AGENT_MEMORY_REFLECTION_FRAGMENTS_PER_ENTITY": "2",
        "AGENT_MEMORY_REFLECTION_TIMEOUT_SECONDS": "30",
    }
    clock = ManualClock()
    async with await _connected(env, clock) as memory:
        opts = reflection_options(memory)
        assert (opts.interval, opts.age_threshold) == (timedelta(hours=1), timedelta(hours=48))
        assert (opts.min_events, opts.max_fragments_per_entity, opts.model_timeout) == (2, 2, 30.0)
        pod = Entity("pod", "web-1")
        # Two events 3 days old: reflected with MIN_EVENTS=2 and a 48 h threshold
        # (the defaults, 5 events and 7 days, would skip them).
        await memory.events.append(
            [_event(i, NOW - timedelta(days=3, minutes=i), pod) for i in range(2)]
        )
        report = await reflection_job(memory, clock=clock).run_once(["k8s"])
        assert report.report.ok, report.report.failures
        assert (report.entities_processed, report.fragments_stored) == (1, 1)
    # A model proposing four lessons: FRAGMENTS_PER_ENTITY=2 keeps two.
    clock = ManualClock()
    lessons = json.dumps([{"content": f"lesson {i}", "importance": 0.5} for i in range(4)])
    memory = await connect(
        f"memory://settings-{uuid.uuid4().hex}",
        settings=Settings.from_env(env),
        clock=clock,
        llm=AnsweringModel(lessons),
    )
    async with memory:
        await memory.events.append(
            [_event(i, NOW - timedelta(days=3, minutes=i), pod) for i in range(2)]
        )
        report = await reflection_job(memory, clock=clock).run_once(["k8s"])
        assert report.fragments_stored == 2


async def test_user_memory_settings_reach_the_service() -> None:
    env = {
        "AGENT_MEMORY_USER_SIMILARITY_THRESHOLD": "0.9",
        "AGENT_MEMORY_USER_FACTS_IN_PROMPT": "4",
        "AGENT_MEMORY_USER_RECALL_SUMMARIES": "1",
        "AGENT_MEMORY_USER_WEIGHT_RECENCY": "0.1",
        "AGENT_MEMORY_USER_WEIGHT_RELEVANCE": "0.6",
        "AGENT_MEMORY_EXTRACTION_TIMEOUT_SECONDS": "11",
    }
    clock = ManualClock()
    async with await _connected(env, clock) as memory:
        opts = user_memory_options(memory)
        assert (opts.similarity_threshold, opts.recall_limit, opts.recall_summaries) == (
            0.9,
            4,
            1,
        )
        assert (opts.relevance_weight, opts.recency_weight, opts.importance_weight) == (
            0.6,
            0.1,
            0.3,
        )
        assert opts.model_timeout == 11.0
        users = user_memory_service(memory, clock=clock)
        for n in range(6):
            await users.extract(
                user_id="u1",
                namespace="travel",
                conversation=f"I prefer aisle seats on flight {n}. I am allergic to nuts {n}.",
                wait=True,
            )
        assert len(await users.facts(user_id="u1")) > 4
        facts, _ = await users.recall(user_id="u1", namespace="travel", request="flights")
        assert 0 < len(facts) <= 4, "USER_FACTS_IN_PROMPT bounds the recall"


async def test_user_recall_weights_rank_the_relevance_searched_facts() -> None:
    import numpy as np

    from agent_memory.domain.records import MemoryRecord

    def fact(i: str, age: timedelta, importance: float) -> MemoryRecord:
        return MemoryRecord(
            id=i,
            owner="u1",
            namespace="travel",
            kind="preference",
            content=i,
            vector=np.ones(256, dtype=np.float32),
            created_at=NOW - age,
            updated_at=NOW - age,
            importance=importance,
        )

    fresh, old = fact("fresh", timedelta(0), 0.1), fact("old", timedelta(days=90), 0.9)
    clock = ManualClock()
    recency_only = {
        "AGENT_MEMORY_USER_WEIGHT_RELEVANCE": "0",
        "AGENT_MEMORY_USER_WEIGHT_RECENCY": "1",
        "AGENT_MEMORY_USER_WEIGHT_IMPORTANCE": "0",
    }
    async with await _connected(recency_only, clock) as memory:
        users = user_memory_service(memory, clock=clock)
        assert users._weighted(0.2, fresh, NOW) > users._weighted(0.9, old, NOW)
    importance_only = {**recency_only, "AGENT_MEMORY_USER_WEIGHT_RECENCY": "0"}
    importance_only["AGENT_MEMORY_USER_WEIGHT_IMPORTANCE"] = "1"
    async with await _connected(importance_only, clock) as memory:
        users = user_memory_service(memory, clock=clock)
        assert users._weighted(0.9, fresh, NOW) < users._weighted(0.2, old, NOW)
    async with await _connected({}, clock) as memory:  # the defaults: 0.5 / 0.2 / 0.3
        users = user_memory_service(memory, clock=clock)
        assert users._weighted(1.0, fresh, NOW) == 0.5 * 1.0 + 0.2 * 1.0 + 0.3 * 0.1

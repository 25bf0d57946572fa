"""Private user memory: extraction, reconciliation, recall and forgetting."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import (
    HashingEmbedder,
    InMemoryCache,
    InMemoryEventLog,
    InMemoryMemoryStore,
)
from agent_memory.domain.user_facts import (
    FactCandidate,
    Neighbour,
    Operation,
    immediate_decision,
    normalise_fact,
    rule_extract,
)
from agent_memory.services.user_memory import UserMemory, user_cache_scope

from .builders import user_event
from .scripted import ScriptedModel

EMB = HashingEmbedder(64)


def make(model: ScriptedModel | None = None, **opts: object) -> UserMemory:
    from agent_memory.services.user_memory import UserMemoryOptions

    return UserMemory(
        store=InMemoryMemoryStore(EMB.space),
        embedder=EMB,
        clock=SystemClock(),
        llm=model,
        events=InMemoryEventLog(),
        cache=InMemoryCache(),
        options=UserMemoryOptions(**opts),  # type: ignore[arg-type]
    )


def cand(text: str, category: str = "preference") -> FactCandidate:
    return FactCandidate(content=text, category=category)


# -- pure rules -------------------------------------------------------------------

facts_text = st.text(
    alphabet=st.characters(codec="utf-8", categories=["L", "N", "Zs"]), min_size=1, max_size=40
).filter(lambda s: s.strip())


@settings(max_examples=300)
@given(text=facts_text, other=facts_text, sim=st.floats(0, 1), upper=st.booleans())
def test_identical_candidate_is_a_duplicate(text: str, other: str, sim: float, upper: bool) -> None:
    stored = text.upper() if upper else f"  {text}  ."
    neighbours = [Neighbour("n1", other, 0.99), Neighbour("n2", stored, sim)]
    decision = immediate_decision(cand(text), neighbours, 0.75)
    if normalise_fact(text) == normalise_fact(stored):
        assert decision is not None
        assert decision.operation is Operation.DUPLICATE
        assert decision.target_id in ("n1", "n2")


@settings(max_examples=300)
@given(
    text=facts_text,
    sims=st.lists(st.floats(-1, 0.7499), max_size=5),
)
def test_below_threshold_is_added_without_model(text: str, sims: list[float]) -> None:
    neighbours = [Neighbour(f"n{i}", f"other fact {i} zz", s) for i, s in enumerate(sims)]
    decision = immediate_decision(cand(text), neighbours, 0.75)
    assert decision is not None
    assert decision.operation is Operation.ADD


def test_rule_extractor_handles_plain_first_person_statements() -> None:
    found = {
        c.content: c.category.value
        for c in rule_extract(
            "I'm vegan, plan a trip to Tokyo. I live in Coppell and I prefer aisle seats!"
        )
    }
    assert found == {
        "User is vegan": "constraint",
        "User lives in Coppell": "identity",
        "User prefers aisle seats": "preference",
    }
    assert rule_extract("plan a trip to Tokyo") == []


# -- reconciliation through the service ------------------------------------------


async def test_candidate_below_threshold_makes_no_model_call() -> None:
    model = ScriptedModel([])
    um = make(model)
    report = await um.reconcile(
        user_id="u1", namespace="travel", candidates=[cand("User prefers aisle seats")]
    )
    await um.reconcile(
        user_id="u1", namespace="travel", candidates=[cand("User lives in Coppell", "identity")]
    )
    assert model.prompts == []
    assert report.details["operations"] == {"ADD": 1}
    assert len(await um.facts(user_id="u1")) == 2


async def test_readding_identical_fact_is_duplicate_never_deletion() -> None:
    model = ScriptedModel([])
    um = make(model)
    await um.reconcile(user_id="u1", namespace="travel", candidates=[cand("User is vegan")])
    before = await um.facts(user_id="u1")
    report = await um.reconcile(
        user_id="u1", namespace="travel", candidates=[cand("user is VEGAN.")]
    )
    after = await um.facts(user_id="u1")
    assert report.details["operations"] == {"DUPLICATE": 1}
    assert [r.id for r in after] == [r.id for r in before]
    assert after[0].content == "User is vegan"
    assert model.prompts == []


async def test_batch_success_applies_update_and_contradict_in_one_call() -> None:
    um = make(ScriptedModel([]), similarity_threshold=0.3)
    await um.reconcile(
        user_id="u1",
        namespace="travel",
        candidates=[cand("User prefers window seats"), cand("User lives in Dallas", "identity")],
    )
    stored = {r.content: r.id for r in await um.facts(user_id="u1")}
    answer = json.dumps(
        [
            {
                "index": 0,
                "operation": "UPDATE",
                "target_id": stored["User prefers window seats"],
                "content": "User prefers window seats on long flights",
            },
            {
                "index": 1,
                "operation": "CONTRADICT",
                "target_id": stored["User lives in Dallas"],
                "content": "User lives in Coppell",
            },
        ]
    )
    model = ScriptedModel([answer])
    um.llm = model
    report = await um.reconcile(
        user_id="u1",
        namespace="travel",
        candidates=[
            cand("User prefers window seats on long flights"),
            cand("User lives in Coppell now", "identity"),
        ],
    )
    assert len(model.prompts) == 1, "one batched call for all candidates"
    assert report.details["classification"] == "batch"
    assert um.counters["batch.success"] == 1
    facts = {r.content: r for r in await um.facts(user_id="u1")}
    assert set(facts) == {"User prefers window seats on long flights", "User lives in Coppell"}
    assert (
        facts["User prefers window seats on long flights"].id == stored["User prefers window seats"]
    ), "UPDATE refines the stored fact in place"
    assert facts["User lives in Coppell"].attributes["supersedes"] == stored["User lives in Dallas"]


@pytest.mark.parametrize(
    "batch_answer",
    [
        RuntimeError("model down"),
        "I am not sure what you mean",
        '[{"index": 0, "operation": "MAYBE"}]',
    ],
    ids=["batch-error", "unparseable", "invalid-operation"],
)
async def test_batch_failure_falls_back_to_per_candidate_calls(batch_answer: object) -> None:
    um = make(ScriptedModel([]), similarity_threshold=0.3)
    await um.reconcile(user_id="u1", namespace="n", candidates=[cand("User prefers window seats")])
    (stored,) = await um.facts(user_id="u1")
    single = json.dumps(
        [
            {
                "index": 0,
                "operation": "UPDATE",
                "target_id": stored.id,
                "content": "User prefers aisle seats",
            }
        ]
    )
    model = ScriptedModel([batch_answer, single])  # type: ignore[list-item]
    um.llm = model
    report = await um.reconcile(
        user_id="u1", namespace="n", candidates=[cand("User prefers aisle seats")]
    )
    assert len(model.prompts) == 2
    assert report.details["classification"] == "per-candidate fallback"
    assert um.counters["batch.fallback"] == 1
    assert [r.content for r in await um.facts(user_id="u1")] == ["User prefers aisle seats"]


async def test_unparseable_answers_everywhere_keep_every_fact() -> None:
    um = make(ScriptedModel([]), similarity_threshold=0.3)
    await um.reconcile(user_id="u1", namespace="n", candidates=[cand("User prefers window seats")])
    um.llm = ScriptedModel(["garbage", "still garbage"])
    report = await um.reconcile(
        user_id="u1", namespace="n", candidates=[cand("User prefers aisle seats")]
    )
    contents = sorted(r.content for r in await um.facts(user_id="u1"))
    assert contents == ["User prefers aisle seats", "User prefers window seats"]
    assert report.details["operations"] == {"ADD": 1}


@settings(max_examples=60, deadline=None)
@given(
    script=st.lists(
        st.tuples(
            st.sampled_from(["ADD", "UPDATE", "CONTRADICT", "DUPLICATE", "BOGUS"]),
            st.integers(0, 5),
            st.sampled_from(["User likes tea", "User likes green tea", "User likes coffee"]),
        ),
        min_size=1,
        max_size=6,
    )
)
async def test_reconciliation_never_removes_a_fact_without_a_superseding_one(
    script: list[tuple[str, int, str]],
) -> None:
    um = make(ScriptedModel([]), similarity_threshold=0.0)
    removed: set[str] = set()
    for op, target_pick, text in script:
        before = {r.id for r in await um.facts(user_id="u")}
        targets = sorted(before)
        target = targets[target_pick % len(targets)] if targets else "none"
        um.llm = ScriptedModel(
            [json.dumps([{"index": 0, "operation": op, "target_id": target, "content": text}])] * 2
        )
        await um.reconcile(user_id="u", namespace="n", candidates=[cand(text + " daily")])
        after = await um.facts(user_id="u")
        gone = before - {r.id for r in after}
        removed |= gone
        superseded = {r.attributes.get("supersedes") for r in after}
        for fact_id in gone:
            assert fact_id in superseded, f"{fact_id} removed without a superseding fact"


# -- extraction and recall --------------------------------------------------------


async def test_extraction_is_async_by_default_and_skipped_without_user() -> None:
    um = make()
    skipped = await um.extract(user_id=None, namespace="travel", conversation="I'm vegan")
    assert skipped.details == {"skipped": "no user id"}
    scheduled = await um.extract(user_id="u1", namespace="travel", conversation="I'm vegan")
    assert scheduled.details == {"scheduled": True}
    (done,) = await um.drain()
    assert done.details["extractor"] == "rules"
    assert [r.content for r in await um.facts(user_id="u1")] == ["User is vegan"]


async def test_model_extraction_with_session_summary() -> None:
    answer = json.dumps(
        {
            "facts": [{"content": "User is vegan", "category": "constraint", "confidence": 0.95}],
            "summary": "User planned a trip to Tokyo.",
        }
    )
    um = make(ScriptedModel([answer]))
    report = await um.extract(
        user_id="u1", namespace="travel", conversation="I'm vegan, plan Tokyo", wait=True
    )
    assert report.ok, report.failures
    kinds = sorted(r.kind for r in await um.facts(user_id="u1"))
    assert kinds == ["constraint", "summary"]


async def test_recall_identity_always_last_three_summaries_and_cap() -> None:
    um = make(recall_limit=6)
    now = datetime.now(UTC)
    await um.reconcile(
        user_id="u1", namespace="universal", candidates=[cand("User's name is Ana", "identity")]
    )
    for i in range(5):
        um.clock = type("C", (), {"now": staticmethod(lambda i=i: now + timedelta(minutes=i))})()
        await um.reconcile(
            user_id="u1",
            namespace="travel",
            candidates=[cand(f"Session {i} about trip {i}", "summary")],
        )
    await um.reconcile(
        user_id="u1",
        namespace="travel",
        candidates=[
            cand("User is vegan", "constraint"),
            cand("User prefers aisle seats"),
            cand("User likes opera music"),
        ],
    )
    facts, report = await um.recall(user_id="u1", namespace="travel", request="vegan food in Tokyo")
    assert report.ok
    contents = [f.content for f in facts]
    assert len(facts) == 6
    assert contents[0] == "User's name is Ana", "identity facts come first, from universal too"
    assert contents[1:4] == [
        "Session 4 about trip 4",
        "Session 3 about trip 3",
        "Session 2 about trip 2",
    ]
    assert "User is vegan" in contents
    view = await um.profile(user_id="u1", namespace="travel", request="vegan food")
    assert "<user_profile>" in view.text
    assert "User is vegan" in view.text


# -- forgetting ---------------------------------------------------------------------


async def test_forget_removes_everything_and_the_raw_memory_backend_is_empty() -> None:
    um = make()
    await um.extract(user_id="u1", namespace="travel", conversation="I'm vegan", wait=True)
    await um.extract(user_id="u2", namespace="travel", conversation="I live in Paris", wait=True)
    now = datetime.now(UTC)
    assert um.events is not None
    assert um.cache is not None
    await um.events.append(
        [
            user_event("e1", user_id="u1", summary="vegan plan", at=now),
            user_event("e2", user_id="u2", summary="paris", at=now),
        ]
    )
    await um.cache.put(user_cache_scope("u1"), "profile", b"vegan")
    receipt = await um.forget("u1")
    assert (receipt.facts, receipt.events, receipt.cache_entries) == (1, 1, 1)
    assert receipt.complete
    assert await um.facts(user_id="u1") == []
    (q,) = await EMB.embed(["vegan"])
    assert await um.store.search("u1", q, limit=5) == []
    # raw scan of the in-process backends: no trace of u1 anywhere
    store_backend = um.store.backend  # type: ignore[attr-defined]
    raw = repr(
        [
            (o, list(i.records.values()))
            for s in store_backend.spaces.values()
            for o, i in s.items()
            if i.records
        ]
    )
    assert "u1" not in raw
    assert "vegan" not in raw.lower()
    assert all(e.user_id != "u1" for e in um.events.backend.events.values())  # type: ignore[attr-defined]
    assert all(k[0] != user_cache_scope("u1") for k in um.cache.backend.entries)  # type: ignore[attr-defined]
    assert [r.content for r in await um.facts(user_id="u2")] == ["User lives in Paris"]


async def test_forget_namespace_and_single_fact_narrow_it() -> None:
    um = make()
    await um.reconcile(
        user_id="u1", namespace="travel", candidates=[cand("User is vegan", "constraint")]
    )
    await um.reconcile(user_id="u1", namespace="music", candidates=[cand("User likes jazz")])
    receipt = await um.forget("u1", "music")
    assert receipt.facts == 1
    assert receipt.events == 0
    (left,) = await um.facts(user_id="u1")
    assert left.namespace == "travel"
    single = await um.forget_fact("u1", left.id)
    assert single.facts == 1
    assert await um.facts(user_id="u1") == []


# -- the universal namespace ---------------------------------------------------------

names = st.text(alphabet=st.characters(categories=["Lu", "Ll"]), min_size=2, max_size=12)


@settings(max_examples=200)
@given(name=names, category=st.sampled_from(["constraint", "relationship", "context", "summary"]))
def test_only_identity_and_preference_facts_can_be_universal(name: str, category: str) -> None:
    from agent_memory.domain.user_facts import is_universal

    for text in (f"User's name is {name}", f"User speaks {name.title()}", f"User's wife {name}"):
        assert not is_universal(FactCandidate(content=text, category=category, universal=True))


@settings(max_examples=200)
@given(name=names.map(str.title), lang=names.map(str.title).filter(str.isalpha))
def test_stated_name_language_and_time_zone_are_universal(name: str, lang: str) -> None:
    from agent_memory.domain.user_facts import is_universal

    said = f"My name is {name}. I speak {lang}. My timezone is UTC+2. I live in Lyon."
    found = {c.content: is_universal(c) for c in rule_extract(said)}
    assert found == {
        f"User's name is {name}": True,
        f"User speaks {lang}": True,
        "User's time zone is UTC+2": True,
        "User lives in Lyon": False,
    }


async def test_one_agent_learns_the_name_and_another_recalls_it_until_forgotten() -> None:
    um = make()
    await um.extract(
        user_id="u1",
        namespace="travel",
        conversation="My name is Oriane and I prefer aisle seats. My language is Portuguese.",
        wait=True,
    )
    stored = {(r.namespace, r.content) for r in await um.facts(user_id="u1")}
    assert stored == {
        ("universal", "User's name is Oriane"),
        ("universal", "User's preferred language is Portuguese"),
        ("travel", "User prefers aisle seats"),
    }
    facts, report = await um.recall(user_id="u1", namespace="cooking", request="dinner ideas")
    assert report.ok
    recalled = [f.content for f in facts]
    assert "User's name is Oriane" in recalled, "another agent recalls the universal name"
    assert "User prefers aisle seats" not in recalled, "the travel preference stays in travel"
    view = await um.profile(user_id="u1", namespace="cooking", request="dinner")
    assert "Oriane" in view.text
    # the cooking agent hears the name again: reconciled in universal, not copied
    again = await um.extract(
        user_id="u1", namespace="cooking", conversation="my name is Oriane", wait=True
    )
    assert again.details["reconcile"]["operations"] == {"DUPLICATE": 1}
    assert len(await um.facts(user_id="u1", namespace="universal")) == 2
    assert await um.facts(user_id="u1", namespace="cooking") == []
    receipt = await um.forget("u1")
    assert receipt.facts == 3
    facts, _ = await um.recall(user_id="u1", namespace="cooking", request="dinner ideas")
    assert facts == []


async def test_a_model_marked_universal_fact_is_reconciled_in_universal() -> None:
    first = json.dumps(
        {"facts": [{"content": "User goes by Ori", "category": "identity", "universal": True}]}
    )
    second = json.dumps(
        {
            "facts": [
                {"content": "User goes by Oriane now", "category": "identity", "universal": True}
            ]
        }
    )
    model = ScriptedModel([first])
    um = make(model)
    await um.extract(user_id="u1", namespace="travel", conversation="call me Ori", wait=True)
    (fact,) = await um.facts(user_id="u1")
    assert fact.namespace == "universal"
    # a later contradiction from another agent replaces it there (the model is asked
    # with the universal fact as the neighbour)
    model.answers += [
        second,
        json.dumps([{"index": 0, "operation": "CONTRADICT", "target_id": fact.id}]),
    ]
    report = await um.extract(
        user_id="u1", namespace="cooking", conversation="I go by Oriane now", wait=True
    )
    assert report.ok, report.failures
    (now,) = await um.facts(user_id="u1")
    assert (now.namespace, now.content) == ("universal", "User goes by Oriane now")
    assert now.attributes["supersedes"] == fact.id


@pytest.mark.parametrize("user", ["u" * 512, '"' * 300, "\u00e9" * 256, "\x01" * 100])
async def test_a_user_id_at_its_bound_has_a_cache_scope_forget_reaches(user: str) -> None:
    """A valid user id takes up to 512 bytes; its cache scope (`user:` and the
    id as JSON) took more, so every `forget` of such a user failed on the
    cache (`scope: at most 512 bytes`) and no entry derived from the user
    could be stored. Long scopes are hashed now."""
    cache = InMemoryCache()
    memory = UserMemory(
        store=InMemoryMemoryStore(EMB.space), embedder=EMB, clock=SystemClock(), cache=cache
    )
    scope = user_cache_scope(user)
    assert len(scope.encode()) <= 512
    assert scope != user_cache_scope(user + "x")
    await cache.put(scope, "derived", b"v")
    receipt = await memory.forget(user)
    assert receipt.failures == (), receipt.failures
    assert receipt.cache_entries == 1
    assert await cache.get(scope, "derived") is None

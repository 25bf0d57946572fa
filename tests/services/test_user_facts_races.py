"""Private user facts where reconciliation meets concurrency, forgetting and
adversarial text, on every backend that stores facts (memory, SQLite, Redis,
PostgreSQL, Qdrant).

Interleavings are deterministic: a hook runs the other party (a second agent's
`reconcile`, or `users.forget`) right after the k-th awaited store call of the
first, for every k, so the whole other operation lands between two of its
round trips — no sleeps.

Past bugs pinned here:
- two agents reconciling the same new fact at once both saw no copy and both
  added it: two current copies of one fact;
- a DUPLICATE's last-used refresh wrote back the whole record it had read,
  reverting a concurrent UPDATE's acknowledged text;
- an UPDATE or DUPLICATE whose target another agent replaced (CONTRADICT) or
  the user forgot between the read and the write failed with `NotFound` and the
  candidate's information was lost (the documented rule: keep it);
- two agents contradicting one fact at once each stored a replacement: two
  current, conflicting facts;
- one unstorable piece of text (a NUL in one extracted statement, a lone
  surrogate in the model's session summary or merged text) cost every other
  fact of the extraction, and a `FactCandidate` accepted NUL it could never store.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_memory.adapters._common.clock import SystemClock
from agent_memory.adapters.memory import HashingEmbedder
from agent_memory.bootstrap import Settings, open_stores
from agent_memory.domain.errors import AgentMemoryError, InvalidInput
from agent_memory.domain.records import MemoryRecord
from agent_memory.domain.user_facts import FactCandidate, normalise_fact, parse_extraction
from agent_memory.ports.storage import MemoryStore, TripleStore
from agent_memory.services.user_memory import UserMemory, UserMemoryOptions

from .scripted import ScriptedModel
from .test_forget_backends import Dump, backend

__all__ = ["backend"]  # the fixture with raw scans: memory, sqlite, redis and postgres

EMB = HashingEmbedder(64)
USER = "user-Vexillum-7q"
OLD = "Quokkaville"  # only in the facts stored before the forget
NEW = "Marrowbyton"  # only in the candidates reconciled around it

Hook = Callable[[], Awaitable[None]]
_WRITES = frozenset({"add", "update", "update_if_older", "delete"})


class _After:
    """Stands in for a store: right after its `at`-th awaited call (any method)
    it awaits `hook()` once; `calls` counts the round trips."""

    def __init__(self, inner: Any, at: int, hook: Hook) -> None:
        self._inner, self._at, self._hook = inner, at, hook
        self.calls = 0
        self.names: list[str] = []  # the methods called, in order

    def wrote_before_hook(self) -> bool:
        """Whether a write of the party hooked came before the hook ran."""
        return any(n in _WRITES for n in self.names[: self._at])

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            out = await attr(*args, **kwargs)
            self.calls += 1
            self.names.append(name)
            if self.calls == self._at:
                await self._hook()
            return out

        return call


BACKENDS = ["memory", "sqlite", "redis", "postgres", "qdrant"]


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryStore]:
    """An empty facts store of the deployment on each backend."""
    settings = Settings(deployment=f"facts-{uuid.uuid4().hex[:10]}")
    if request.param == "memory":
        url = f"memory://facts-{uuid.uuid4().hex}"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'facts.db'}"
    elif request.param == "redis":
        url = str(request.getfixturevalue("redis_url"))
    elif request.param == "postgres":
        url = str(request.getfixturevalue("postgres_url"))
    else:
        url = "qdrant+memory://"
    stores = await open_stores(url, space=EMB.space, settings=settings)
    try:
        yield stores.store
    finally:
        await stores.close()


def users(store: Any, model: ScriptedModel | None = None, **opts: Any) -> UserMemory:
    return UserMemory(
        store=store,
        embedder=EMB,
        clock=SystemClock(),
        llm=model,
        options=UserMemoryOptions(**opts),
    )


def cand(text: str, category: str = "preference") -> FactCandidate:
    return FactCandidate(content=text, category=category)


def decide(operation: str, target: str, content: str | None = None) -> str:
    """The reconciliation model's answer for one candidate (twice: the batch
    call and a per-candidate retry would read the same)."""
    return json.dumps(
        [{"index": 0, "operation": operation, "target_id": target, "content": content}]
    )


class _Contradicting:
    """A reconciliation model that answers CONTRADICT of the first stored fact
    it is shown (the agent's view of the moment)."""

    fingerprint = "contradicting-v1"

    async def complete(
        self, prompt: str, *, max_tokens: int, timeout: float, system: str | None = None
    ) -> str:
        (item,) = json.loads(prompt.split("\n", 1)[1])
        return decide("CONTRADICT", item["stored"][0]["id"])


async def all_facts(store: MemoryStore, user: str = USER) -> list[MemoryRecord]:
    return await users(store).facts(user_id=user)


async def every_step(run: Callable[[int], Awaitable[int]]) -> None:
    """`run(at)` hooks the other party after round trip `at` and returns how many
    round trips there were; run it for at = 1, 2, ... up to that count."""
    at = 1
    while True:
        trips = await run(at)
        if at >= trips:
            return
        at += 1


# -- two agents, one user ----------------------------------------------------------


async def test_the_same_fact_reconciled_by_two_agents_at_once_is_stored_once(
    store: MemoryStore,
) -> None:
    """Agent B reconciles "User is vegan" between any two round trips of agent A
    reconciling the same fact. One copy remains, and both reports succeed. When
    it fails, both agents decided ADD (each saw no copy): check that a stored
    ADD is settled against copies stored meanwhile (`_dropped_as_copy`)."""

    async def run(at: int) -> int:
        user = f"{USER}-{at}"
        b = users(store)

        async def other() -> None:
            report = await b.reconcile(
                user_id=user, namespace="travel", candidates=[cand("User is vegan", "constraint")]
            )
            assert report.ok, report.failures

        hooked = _After(store, at, other)
        report = await users(hooked).reconcile(
            user_id=user, namespace="travel", candidates=[cand("user is VEGAN.", "constraint")]
        )
        assert report.ok, report.failures
        if hooked.calls < at:  # A finished first: B ran after it, on its own
            await other()
        facts = await all_facts(store, user)
        assert len(facts) == 1, f"step {at}: {[(f.id, f.content) for f in facts]}"
        assert normalise_fact(facts[0].content) == "user is vegan"
        return hooked.calls

    await every_step(run)


async def test_one_extraction_naming_a_fact_twice_stores_it_once(store: MemoryStore) -> None:
    """Two candidates of one batch with the same normalised text: one fact."""
    um = users(store)
    report = await um.reconcile(
        user_id=USER,
        namespace="travel",
        candidates=[cand("User prefers aisle seats"), cand("user prefers aisle seats!")],
    )
    assert report.ok, report.failures
    assert report.details["operations"] == {"ADD": 1, "DUPLICATE": 1}
    (kept,) = await all_facts(store)
    assert normalise_fact(kept.content) == "user prefers aisle seats"


@pytest.mark.parametrize(
    "store",
    [
        *BACKENDS[:-1],
        pytest.param(
            "qdrant",
            marks=pytest.mark.xfail(
                strict=True,
                reason="the Qdrant store has no VersionedWrites: a refresh replaces the record",
            ),
        ),
    ],
    indirect=True,
)
async def test_a_duplicate_refresh_never_reverts_a_concurrent_update(
    store: MemoryStore,
) -> None:
    """Agent A restates a stored fact (DUPLICATE: a last-used refresh) while
    agent B refines it (UPDATE), B landing between any two of A's round trips.
    B's acknowledged text stays. When it fails, the refresh wrote back the
    record as A had read it: check that it is conditional on that version."""

    async def run(at: int) -> int:
        user = f"{USER}-{at}"
        await users(store).reconcile(
            user_id=user, namespace="travel", candidates=[cand("User prefers window seats")]
        )
        (x,) = await all_facts(store, user)
        refined = "User prefers window seats on long flights"
        b = users(store, ScriptedModel([decide("UPDATE", x.id, refined)]), similarity_threshold=0)

        async def other() -> None:
            report = await b.reconcile(user_id=user, namespace="travel", candidates=[cand(refined)])
            assert report.details["operations"] == {"UPDATE": 1}, report

        hooked = _After(store, at, other)
        report = await users(hooked).reconcile(
            user_id=user, namespace="travel", candidates=[cand("user prefers window seats")]
        )
        assert report.ok, report.failures
        if hooked.calls < at:
            await other()
        facts = await all_facts(store, user)
        assert [(f.id, f.content) for f in facts] == [(x.id, refined)], f"step {at}"
        return hooked.calls

    await every_step(run)


@pytest.mark.parametrize("operation", ["UPDATE", "DUPLICATE"])
async def test_a_fact_replaced_meanwhile_keeps_the_candidates_information(
    store: MemoryStore, operation: str
) -> None:
    """Agent A classifies its candidate as an UPDATE (or DUPLICATE) of fact X;
    agent B replaces X (CONTRADICT) between any two of A's round trips. A's
    report succeeds, B's replacement stays, and A's information is kept: B's
    write and A's candidate both survive, X does not. When it fails with
    `NotFound`, the update's target vanished between its read and its write."""

    async def run(at: int) -> int:
        user = f"{USER}-{at}"
        await users(store).reconcile(
            user_id=user,
            namespace="travel",
            candidates=[cand("User prefers window seats")],
        )
        (x,) = await all_facts(store, user)
        b = users(
            store,
            ScriptedModel([decide("CONTRADICT", x.id, "User prefers aisle seats now")]),
            similarity_threshold=0,
        )

        async def other() -> None:
            report = await b.reconcile(
                user_id=user, namespace="travel", candidates=[cand("User prefers aisle seats")]
            )
            assert report.ok, report.failures

        mine = "User prefers window seats" if operation == "DUPLICATE" else "User likes windows"
        hooked = _After(store, at, other)
        a = users(
            hooked,
            ScriptedModel([decide(operation, x.id, "User likes windows on trains")]),
            similarity_threshold=0,
        )
        report = await a.reconcile(user_id=user, namespace="travel", candidates=[cand(mine)])
        assert report.ok, f"step {at}: {report.failures}"
        if hooked.calls < at:
            await other()
        contents = sorted(f.content for f in await all_facts(store, user))
        assert "User prefers aisle seats now" in contents, f"step {at}: {contents}"
        assert x.id not in {f.id for f in await all_facts(store, user)}, f"step {at}"
        if operation == "UPDATE" and not hooked.wrote_before_hook():
            # B replaced X before A's update landed: A's information stays
            assert any("windows" in c for c in contents), f"step {at}: A's update lost: {contents}"
        return hooked.calls

    await every_step(run)


async def test_two_agents_contradicting_one_fact_at_once_leave_one_current_fact(
    store: MemoryStore,
) -> None:
    """Agents A and B both replace "User lives in Dallas" (CONTRADICT), with
    conflicting values, B between any two of A's round trips. Afterwards one
    fact replaces it, as if they had run one after the other. When it fails,
    each stored its replacement and neither saw the other's: check that a
    CONTRADICT finding its target gone settles the replacements of that target."""

    async def run(at: int) -> int:
        user = f"{USER}-{at}"
        await users(store).reconcile(
            user_id=user, namespace="travel", candidates=[cand("User lives in Dallas", "identity")]
        )
        (x,) = await all_facts(store, user)

        def agent(port: Any, city: str) -> tuple[UserMemory, FactCandidate]:
            um = users(port, _Contradicting(), similarity_threshold=0)
            return um, cand(f"User lives in {city}", "identity")

        b, theirs = agent(store, "Berlin")

        async def other() -> None:
            report = await b.reconcile(user_id=user, namespace="travel", candidates=[theirs])
            assert report.ok, report.failures

        hooked = _After(store, at, other)
        a, mine = agent(hooked, "Paris")
        report = await a.reconcile(user_id=user, namespace="travel", candidates=[mine])
        assert report.ok, report.failures
        if hooked.calls < at:
            await other()
        facts = await all_facts(store, user)
        assert len(facts) == 1, f"step {at}: {[f.content for f in facts]}"
        assert facts[0].id != x.id
        assert facts[0].content in ("User lives in Berlin", "User lives in Paris")
        return hooked.calls

    await every_step(run)


# -- forgetting racing reconciliation -------------------------------------------


async def test_forget_racing_reconciliation_leaves_nothing_it_covered(
    backend: tuple[str, Settings, Dump | None, TripleStore],
) -> None:
    """`users.forget(user)` runs between any two round trips of a reconciliation
    that UPDATEs, CONTRADICTs and restates (DUPLICATE) the user's stored facts
    and ADDs a new one. After it, no stored fact has an id of a fact the forget
    covered, and the raw backend holds none of their text; what the
    reconciliation wrote after the forget may stay. The report never fails."""
    url, settings, dump, _ = backend
    stores = await open_stores(url, space=EMB.space, settings=settings)
    try:

        async def run(at: int) -> int:
            seeded = users(stores.store)
            await seeded.reconcile(
                user_id=USER,
                namespace="travel",
                candidates=[
                    cand(f"User prefers the {OLD} window seats"),
                    cand(f"User lives in {OLD} town", "identity"),
                    cand(f"User dislikes {OLD} olives"),
                ],
            )
            before = {f.content: f.id for f in await seeded.facts(user_id=USER)}
            window, town, olives = (
                before[f"User prefers the {OLD} window seats"],
                before[f"User lives in {OLD} town"],
                before[f"User dislikes {OLD} olives"],
            )
            model = ScriptedModel(
                [
                    json.dumps(
                        [
                            {"index": 0, "operation": "UPDATE", "target_id": window},
                            {"index": 1, "operation": "CONTRADICT", "target_id": town},
                            {"index": 2, "operation": "DUPLICATE", "target_id": olives},
                            {"index": 3, "operation": "ADD", "target_id": None},
                        ]
                    )
                ]
            )
            forgot: list[Any] = []

            async def forget() -> None:
                forgot.append(await seeded.forget(USER))

            hooked = _After(stores.store, at, forget)
            report = await users(hooked, model, similarity_threshold=0).reconcile(
                user_id=USER,
                namespace="travel",
                candidates=[
                    cand(f"User prefers {NEW} aisle seats"),
                    cand(f"User lives in {NEW} city", "identity"),
                    cand(f"User dislikes {NEW} capers"),
                    cand(f"User enjoys {NEW} opera"),
                ],
            )
            assert report.ok, f"step {at}: {report.failures}"
            if not forgot:  # the reconciliation had fewer round trips
                forgot.append(await seeded.forget(USER))
            assert forgot[0].complete, forgot[0].failures
            left = await seeded.facts(user_id=USER)
            assert not {f.id for f in left} & set(before.values()), f"step {at}: {left}"
            assert all(OLD not in f.content for f in left), f"step {at}: {left}"
            if dump is not None:
                assert OLD not in await dump(), f"step {at}: forgotten text in the raw backend"
            await seeded.forget(USER)
            return hooked.calls

        await every_step(run)
    finally:
        await stores.close()


# -- adversarial text ----------------------------------------------------------------

texts = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=60),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=3).map(
        lambda s: f"User likes {s}tea"
    ),
    st.sampled_from(["\x00", " \x00 ", "User\x00likes tea", "\u200b", "\n\t", "\ufeff"]),
    st.integers(1, 40_000).map(lambda n: "User likes " + "tea " * n),
)


@settings(max_examples=25, deadline=None)
@given(text=texts, category=st.sampled_from(["preference", "identity", "summary"]))
@example(text="User likes \x00 tea", category="preference")
@example(text="User likes \ud800 tea", category="identity")
@example(text="   ", category="preference")
async def test_candidate_text_is_stored_or_a_typed_error_naming_the_field(
    store: MemoryStore, text: str, category: str
) -> None:
    """Any text: a candidate either refuses it with `InvalidInput` naming
    `candidate.content`, or reconciliation stores it (next to a good fact of the
    same batch) on every backend, with no failure. When it fails, text the
    candidate accepted is refused by a store (a backend's bound, or NUL)."""
    user = f"{USER}-{uuid.uuid4().hex[:8]}"
    try:
        bad = FactCandidate(content=text, category=category)
    except InvalidInput as exc:
        field = exc.field
    else:
        field = None
    if field is not None:
        assert field == "candidate.content"
        return
    report = await users(store).reconcile(
        user_id=user, namespace="travel", candidates=[bad, cand("User prefers tea")]
    )
    assert report.ok, report.failures
    contents = {f.content for f in await all_facts(store, user)}
    assert "User prefers tea" in contents
    assert text in contents or normalise_fact(text) == "user prefers tea"


@pytest.mark.parametrize(
    "answer",
    [
        {"facts": [{"content": "User is vegan", "category": "constraint"}], "summary": "a \ud800"},
        {"facts": [{"content": "User is vegan", "category": "constraint"}], "summary": "a\x00b"},
        {
            "facts": [
                {"content": "User is vegan", "category": "constraint"},
                {"content": "User likes \x00 olives", "category": "preference"},
                {"content": "User likes \udfff figs", "category": "preference"},
            ]
        },
    ],
    ids=["surrogate-summary", "nul-summary", "bad-facts"],
)
async def test_one_unusable_text_in_a_model_extraction_costs_only_itself(
    store: MemoryStore, answer: dict[str, Any]
) -> None:
    """The good fact of an extraction is stored whatever its siblings hold; the
    unusable ones are reported (`extraction_error`). When it fails, one bad
    text failed the whole extraction or its batch."""
    um = users(store, ScriptedModel([json.dumps(answer)]))
    report = await um.extract(user_id=USER, namespace="travel", conversation="...", wait=True)
    assert report.ok, report.failures
    assert "extraction_error" in report.details
    assert [f.content for f in await um.facts(user_id=USER)] == ["User is vegan"]


async def test_a_nul_in_one_statement_costs_only_that_fact(store: MemoryStore) -> None:
    """The rule extractor leaves out a statement it cannot store; the rest of
    the conversation's facts are stored."""
    um = users(store)
    report = await um.extract(
        user_id=USER,
        namespace="travel",
        conversation="I'm vegan. I live in Pa\x00ris. I prefer aisle seats.",
        wait=True,
    )
    assert report.ok, report.failures
    contents = sorted(f.content for f in await um.facts(user_id=USER))
    assert contents == ["User is vegan", "User prefers aisle seats"]


@pytest.mark.parametrize(
    "merged", ["User lives in Coppell\x00", "User lives in Co\ud800ppell", " "]
)
@pytest.mark.parametrize("operation", ["UPDATE", "CONTRADICT"])
async def test_unusable_merged_text_from_the_model_falls_back_to_the_candidates(
    store: MemoryStore, operation: str, merged: str
) -> None:
    """The model's UPDATE/CONTRADICT text is unusable (NUL, a lone surrogate,
    blank): the candidate's own text is stored instead, and the report succeeds."""
    um = users(store)
    await um.reconcile(
        user_id=USER, namespace="travel", candidates=[cand("User lives in Dallas", "identity")]
    )
    (x,) = await um.facts(user_id=USER)
    um.llm = ScriptedModel([decide(operation, x.id, merged)])
    um.options.similarity_threshold = 0
    report = await um.reconcile(
        user_id=USER, namespace="travel", candidates=[cand("User lives in Coppell", "identity")]
    )
    assert report.ok, report.failures
    assert [f.content for f in await um.facts(user_id=USER)] == ["User lives in Coppell"]


@pytest.mark.parametrize("conversation", [None, 42, b"I'm vegan", "I'm \ud800 vegan"])
async def test_a_conversation_that_is_not_text_is_a_typed_error_naming_it(
    conversation: Any,
) -> None:
    """Refused at the call, like a bad user id — also when extraction would run
    in the background (where the error would only be logged)."""
    from agent_memory.adapters.memory import InMemoryMemoryStore

    um = users(InMemoryMemoryStore(EMB.space))
    for wait in (False, True):
        with pytest.raises(InvalidInput) as caught:
            await um.extract(user_id=USER, namespace="t", conversation=conversation, wait=wait)
        assert caught.value.field == "conversation"
    assert await um.drain() == []


@settings(max_examples=100, deadline=None)
@given(
    summary=st.one_of(st.text(max_size=20), st.none(), st.integers()),
    content=st.one_of(st.text(max_size=20), st.integers(), st.none()),
)
def test_parse_extraction_never_raises_and_returns_only_storable_text(
    summary: Any, content: Any
) -> None:
    """Whatever the model answers, parsing returns candidates and a summary a
    store can hold (no NUL, no lone surrogate), never an exception."""
    answer = json.dumps(
        {"facts": [{"content": content, "category": "preference"}], "summary": summary}
    )
    try:
        candidates, parsed, _ = parse_extraction(answer)
    except AgentMemoryError as exc:  # pragma: no cover - the failure we look for
        raise AssertionError(f"parse_extraction raised {exc!r}") from exc
    for text in [c.content for c in candidates] + ([parsed] if parsed else []):
        assert "\x00" not in text
        text.encode("utf-8")

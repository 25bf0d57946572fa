"""ConversationMemory: route-local policy, trimmed injection, auto-store, isolation,
fail-open and metrics, on real stores (the in-memory store and SQLite) with a
real embedder, wrapped by counting spies (not mocks)."""

from __future__ import annotations

import json
import re
import string
import unicodedata
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.adapters.memory.store import InMemoryMemoryStore
from agent_memory.adapters.sqlite import open_stores as open_sqlite_stores
from agent_memory.domain.errors import ConfigurationError, InvalidInput, ScopeRequired
from agent_memory.domain.exchanges import FILLER_WORDS, content_weight, is_trivial, words
from agent_memory.domain.records import MemoryRecord, ScoredRecord
from agent_memory.domain.views.tokens import estimate_tokens
from agent_memory.ports.storage import MemoryStore
from agent_memory.services.conversation import (
    BLOCK_CLOSE,
    BLOCK_OPEN,
    ConversationConfig,
    ConversationMemory,
    MemoryPolicy,
    RouteOverride,
    config_from_mapping,
    load_config,
    render_block,
)
from agent_memory.services.observability import Observability

DOCS = Path(__file__).resolve().parents[2] / "docs" / "conversation-memory.md"
FIELDS = [a.name for a in attrs.fields(RouteOverride)]


class SpyEmbedder:
    """A real embedder that counts its calls."""

    def __init__(self, inner: HashingEmbedder) -> None:
        self.inner = inner
        self.calls = 0

    @property
    def space(self) -> Any:
        return self.inner.space

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        return await self.inner.embed(texts)


class SpyStore:
    """A real store that counts every call made to it (and can be told to fail)."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.fail = False

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if not callable(target):
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if self.fail:
                raise ConnectionError("backend down")
            return await target(*args, **kwargs)

        return call


EMBEDDER = HashingEmbedder(64)

TWO_ROUTES = ConversationConfig(
    default=MemoryPolicy(threshold=-1.0, retrieval_limit=5, max_inject_tokens=200),
    routes={
        "support": RouteOverride(auto_store=True),
        "travel": RouteOverride(auto_store=True, types=("episodic", "preference")),
        "off": RouteOverride(enabled=False, auto_store=True),
    },
)


def service(
    store: MemoryStore | None = None,
    config: ConversationConfig = TWO_ROUTES,
    **kwargs: Any,
) -> tuple[ConversationMemory, SpyStore, SpyEmbedder]:
    spy_store = SpyStore(store if store is not None else InMemoryMemoryStore(EMBEDDER.space))
    spy_embedder = SpyEmbedder(EMBEDDER)
    conv = ConversationMemory(spy_store, spy_embedder, config, **kwargs)  # type: ignore[arg-type]
    return conv, spy_store, spy_embedder


# -- policy ---------------------------------------------------------------------

policies = st.builds(
    MemoryPolicy,
    enabled=st.booleans(),
    threshold=st.floats(-1.0, 1.0),
    retrieval_limit=st.integers(1, 100),
    max_inject_tokens=st.integers(0, 4000),
    auto_store=st.booleans(),
    types=st.lists(st.sampled_from(["episodic", "semantic", "procedural"]), min_size=1).map(tuple),
    skip_trivial=st.booleans(),
    min_content_words=st.integers(0, 20),
)


@st.composite
def overrides(draw: st.DrawFn) -> RouteOverride:
    values = draw(policies)
    chosen = draw(st.sets(st.sampled_from(FIELDS)))
    return RouteOverride(**{name: getattr(values, name) for name in chosen})


@given(default=policies, override=overrides())
def test_omitted_fields_inherit_and_overrides_win(
    default: MemoryPolicy, override: RouteOverride
) -> None:
    config = ConversationConfig(default=default, routes={"r": override})
    effective = config.policy("r")
    for name in FIELDS:
        set_value = getattr(override, name)
        want = getattr(default, name) if set_value is None else set_value
        assert getattr(effective, name) == want, name


@given(default=policies, override=overrides())
def test_policy_round_trips_through_a_json_file_shape(
    default: MemoryPolicy, override: RouteOverride
) -> None:
    data = {
        "default": {**attrs.asdict(default), "types": list(default.types)},
        "routes": {
            "r": {
                k: (list(v) if isinstance(v, tuple) else v)
                for k, v in attrs.asdict(override).items()
                if v is not None
            }
        },
    }
    loaded = config_from_mapping(json.loads(json.dumps(data)))
    assert loaded.policy("r") == ConversationConfig(default, {"r": override}).policy("r")


def test_an_unlisted_route_has_no_memory() -> None:
    assert TWO_ROUTES.policy("elsewhere").enabled is False


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"routes": {"chat": {"retrieval_limt": 3}}}, "$.routes['chat']"),
        ({"default": {"max_inject_token": 3}}, "$.default"),
        ({"global": {}}, "$"),
        ({"routes": {"chat": {"retrieval_limit": True}}}, "$.routes['chat'].retrieval_limit"),
        ({"routes": {"chat": {"enabled": "no"}}}, "$.routes['chat'].enabled"),
        ({"routes": {"chat": {"types": "episodic"}}}, "$.routes['chat'].types"),
        ({"routes": {"chat": {"threshold": 1.5}}}, "$.routes['chat']"),
        ({"default": {"max_inject_tokens": -1}}, "$.default"),
    ],
)
def test_bad_config_names_its_path(data: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        config_from_mapping(data)
    assert f"@ {path}" in str(info.value)


def test_config_files_json_and_yaml(tmp_path: Path) -> None:
    body = {"default": {"retrieval_limit": 4}, "routes": {"chat": {"auto_store": True}}}
    (tmp_path / "m.json").write_text(json.dumps(body))
    (tmp_path / "m.yaml").write_text(
        "default:\n  retrieval_limit: 4\nroutes:\n  chat:\n    auto_store: true\n"
    )
    want = config_from_mapping(body)
    assert load_config(tmp_path / "m.json") == want
    assert load_config(tmp_path / "m.yaml") == want
    (tmp_path / "bad.json").write_text('{"routes": {"chat": {"colour": 1}}}')
    with pytest.raises(ConfigurationError, match=r"colour.*\$\.routes\['chat'\]"):
        load_config(tmp_path / "bad.json")
    (tmp_path / "m.toml").write_text("")
    with pytest.raises(ConfigurationError, match="json"):
        load_config(tmp_path / "m.toml")
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_config(tmp_path / "missing.json")


# -- the injected block ---------------------------------------------------------

memory_texts = st.text(
    st.one_of(
        st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"),
        st.sampled_from("日本語の記憶한국어中文 テスト"),
    ),
    max_size=120,
)


def _hit(i: int, text: str) -> ScoredRecord:
    vec = np.ones(8, np.float32)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    record = MemoryRecord(
        id=f"m{i:02d}",
        owner="u",
        namespace="n",
        kind="k",
        content=text or "x",
        vector=vec,
        created_at=at,
        updated_at=at,
    )
    return ScoredRecord(record=record, score=1.0 - i / 100)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(texts=st.lists(memory_texts, max_size=12), budget=st.integers(0, 300))
@example(texts=["日本語" * 40, "short"], budget=40)
@example(texts=["a " * 500], budget=10)
def test_block_never_exceeds_the_budget(texts: list[str], budget: int) -> None:
    from agent_memory.services.conversation import _trim

    hits = [_hit(i, t) for i, t in enumerate(texts)]
    kept, tokens = _trim(hits, budget)
    block = render_block(kept)
    assert estimate_tokens(block) <= budget
    assert tokens == estimate_tokens(block) if kept else tokens == 0
    # best first: the kept memories keep the retrieval order
    assert [h.record.id for h in kept] == sorted(h.record.id for h in kept)


async def test_before_model_trims_best_first_with_cjk() -> None:
    config = attrs.evolve(
        TWO_ROUTES, default=attrs.evolve(TWO_ROUTES.default, max_inject_tokens=40)
    )
    conv, _, _ = service(config=config)
    await conv.after_model("support", "ana", "我喜欢喝绿茶和乌龙茶", "好的")
    await conv.after_model("support", "ana", "tea", "green tea it is")
    got = await conv.before_model("support", "ana", "tea")
    assert got.status == "hit"
    assert got.tokens == estimate_tokens(got.text) <= 40
    assert got.omitted >= 1  # the CJK memory alone is over the budget
    assert got.text.startswith(BLOCK_OPEN)
    assert got.text.endswith(BLOCK_CLOSE)


# -- routes, storing, isolation -------------------------------------------------


async def test_disabled_and_unlisted_routes_make_no_call() -> None:
    conv, store, embedder = service()
    for route in ("off", "unlisted"):
        got = await conv.before_model(route, "ana", "anything")
        assert got.status == "disabled"
        assert got.text == ""
        stored = await conv.after_model(route, "ana", "q", "a")
        assert stored.status == "skipped"
    assert embedder.calls == 0
    assert store.calls == []


async def test_auto_store_off_stores_nothing() -> None:
    config = ConversationConfig(routes={"plain": RouteOverride()})  # global auto_store False
    conv, store, embedder = service(config=config)
    out = await conv.after_model("plain", "ana", "remember I like tea", "noted")
    assert (out.status, out.reason) == ("skipped", "auto_store off")
    assert "add" not in store.calls
    assert embedder.calls == 0
    assert await store.inner.list("ana") == await store.inner.list("ana")
    assert (await store.inner.list("ana")).records == ()


async def test_a_type_outside_the_policy_is_not_stored() -> None:
    conv, store, _ = service()
    exchange = ("I prefer window seats", "Window seats it is.")
    out = await conv.after_model("support", "ana", *exchange, memory_type="preference")
    assert out.status == "skipped"
    assert "add" not in store.calls
    out = await conv.after_model("travel", "ana", *exchange, memory_type="preference")
    assert out.status == "stored"


@pytest.fixture(params=["memory", "sqlite"])
async def backend_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield InMemoryMemoryStore(EMBEDDER.space)
        return
    parts = await open_sqlite_stores(f"sqlite:///{tmp_path}/c.db", space=EMBEDDER.space)
    yield parts["store"]
    for key in ("store", "events", "leases", "cache"):
        await parts[key].close()


async def test_users_stay_isolated_across_routes_and_projects(backend_store: Any) -> None:
    conv, _, _ = service(backend_store)
    await conv.after_model("support", "ana", "my dog is called Rex", "nice")
    await conv.after_model("travel", "bo", "my dog is called Fido", "nice", project="trip")
    for route in ("support", "travel"):
        ana = await conv.before_model(route, "ana", "what is my dog called")
        assert "Rex" in ana.text
        assert "Fido" not in ana.text
        bo = await conv.before_model(route, "bo", "what is my dog called")
        assert "Fido" in bo.text
        assert "Rex" not in bo.text
    # a project narrows, never widens: bo's other project and ana's memories stay out
    assert "Fido" in (await conv.before_model("travel", "bo", "dog", project="trip")).text
    assert (await conv.before_model("travel", "bo", "dog", project="work")).status == "miss"
    assert (await conv.before_model("travel", "ana", "dog", project="trip")).status == "miss"
    # a type filter narrows too
    got = await conv.before_model("travel", "bo", "dog", types=["preference"])
    assert got.status == "miss"


@pytest.mark.parametrize("user", ["", "   ", "\t"])
async def test_a_blank_user_id_is_a_typed_error(backend_store: Any, user: str) -> None:
    conv, store, embedder = service(backend_store)
    with pytest.raises(ScopeRequired):
        await conv.before_model("support", user, "q")
    with pytest.raises(ScopeRequired):
        await conv.after_model("support", user, "q", "a")
    with pytest.raises(ScopeRequired):
        await conv.before_model("off", user, "q")  # even where memory is off
    assert embedder.calls == 0
    assert store.calls == []


async def test_bad_arguments_are_typed_errors() -> None:
    conv, _, _ = service()
    with pytest.raises(InvalidInput):
        await conv.before_model("", "ana", "q")
    with pytest.raises(InvalidInput):
        await conv.before_model("support", "ana", 3)  # type: ignore[arg-type]
    with pytest.raises(ScopeRequired):
        await conv.before_model("support", "ana", "q", project=" ")
    with pytest.raises(InvalidInput):
        await conv.after_model("support", "ana", "q", "a\x00")


async def test_failures_are_fail_open() -> None:
    conv, store, _ = service()
    store.fail = True
    got = await conv.before_model("support", "ana", "q")
    assert (got.status, got.text) == ("error", "")
    out = await conv.after_model("support", "ana", "I live in Lisbon", "Noted: Lisbon.")
    assert out.status == "error"


# -- metrics --------------------------------------------------------------------


async def test_metrics_count_by_backend_and_status_without_user_labels() -> None:
    registry = CollectorRegistry()
    obs = Observability(registry=registry)
    conv, store, _ = service(observability=obs, backend="memory")
    user = "user-secret-42"
    await conv.after_model("support", user, "I live in Lisbon", "noted")
    await conv.before_model("support", user, "where do I live")  # hit
    await conv.before_model("support", "nobody-else", "where do I live")  # miss
    store.fail = True
    await conv.before_model("support", user, "where")  # error
    samples = [s for m in registry.collect() for s in m.samples]
    counts = {
        s.labels["status"]: s.value
        for s in samples
        if s.name == "agent_memory_retrievals_total" and s.labels.get("backend") == "memory"
    }
    assert counts == {"hit": 1.0, "miss": 1.0, "error": 1.0}
    assert any(s.name == "agent_memory_retrieval_results_count" for s in samples)
    assert any(
        s.name == "agent_memory_stage_seconds_count" and s.labels["stage"] == "before_model"
        for s in samples
    )
    for s in samples:
        for value in s.labels.values():
            assert user not in value
            assert "nobody-else" not in value


# -- the docs -------------------------------------------------------------------


def _fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


async def test_docs_config_and_block_are_what_the_service_does() -> None:
    text = DOCS.read_text(encoding="utf-8")
    config = config_from_mapping(json.loads(_fenced(text, "json")[0]))
    assert len(config.routes) == 2
    conv, _, _ = service(config=config)
    script = json.loads(_fenced(text, "json")[1])
    for turn in script["stored"]:
        out = await conv.after_model(turn["route"], script["user"], turn["query"], turn["answer"])
        assert out.status == "stored"
    got = await conv.before_model(script["route"], script["user"], script["query"])
    assert got.text == _fenced(text, "text")[0].rstrip("\n")


# -- what auto_store keeps: trivial and repeated exchanges ---------------------------

FILLER = sorted(FILLER_WORDS)
#: `MemoryPolicy().min_content_words` (checked by the per-route test below).
DEFAULT_MIN_CONTENT_WORDS = 3


def _no_letters(char: str) -> bool:
    """No letter, digit or mark even after NFKC (`㋀` is NFKC `1月`)."""
    folded = unicodedata.normalize("NFKC", char).casefold()
    return all(unicodedata.category(c)[0] not in "LNM" for c in folded)


#: Separators with no word in them: punctuation, symbols, emoji, spaces.
separators = st.text(
    st.one_of(
        st.characters(categories=("P", "S", "Z")).filter(_no_letters),
        st.sampled_from(["👍", "🙏", "😊", "\u200d", "\n", "\t", "…", "\uff01", "\u3002"]),
    ),
    min_size=1,
    max_size=4,
)


def _variant(word: str, how: int) -> str:
    """`word` as someone might type it: upper case, title case or full width."""
    if how == 1:
        return word.upper()
    if how == 2:
        return word.title()
    if how == 3:  # full width (NFKC folds it back)
        return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in word)
    return word


@st.composite
def filler_text(draw: st.DrawFn, min_words: int = 0) -> str:
    """Only stop-list words (in any case or width) between separators."""
    picked = draw(st.lists(st.sampled_from(FILLER), min_size=min_words, max_size=6))
    parts = [draw(separators) if draw(st.booleans()) else ""]
    for word in picked:
        parts += [_variant(word, draw(st.integers(0, 3))), draw(separators)]
    return "".join(parts)


#: Content words: none of them is a stop-list word, nor becomes one by normalisation.
content_words = st.text(st.sampled_from(string.ascii_lowercase), min_size=4, max_size=10).filter(
    lambda w: w not in FILLER_WORDS
)


@st.composite
def content_sentence(draw: st.DrawFn, min_words: int) -> str:
    body = draw(st.lists(content_words, min_size=min_words, max_size=min_words + 4))
    return " ".join(body).capitalize() + draw(st.sampled_from([".", "!", "?", ""]))


def _store_one(conv: ConversationMemory, query: str, answer: str) -> Any:
    import asyncio

    return asyncio.run(conv.after_model("support", "ana", query, answer))


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(query=filler_text(), answer=st.one_of(filler_text(), content_sentence(3)))
@example(query="ok", answer="Glad I could help!")
@example(query="Thanks!!", answer="You're welcome.")
@example(query="👍", answer="👍")
@example(query="\uff2f\uff2b\uff0c\uff34\uff28\uff21\uff2e\uff2b\uff33", answer="好的")  # OK,THANKS
@example(query="谢谢", answer="不客气")
def test_a_user_side_of_only_acknowledgements_is_trivial(query: str, answer: str) -> None:
    conv, store, embedder = service()
    if not query.strip() and not answer.strip():
        return  # "empty exchange", its own reason
    out = _store_one(conv, query, answer)
    assert (out.status, out.reason) == ("skipped", "trivial")
    assert "add" not in store.calls
    assert embedder.calls == 0


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    before=filler_text(),
    after=filler_text(),
    sentence=content_sentence(DEFAULT_MIN_CONTENT_WORDS),
    answer=filler_text(),
)
@example(before="ok ", after="", sentence="My passport expires in March", answer="Noted!")
def test_one_content_sentence_makes_the_exchange_worth_storing(
    before: str, after: str, sentence: str, answer: str
) -> None:
    conv, store, _ = service()
    out = _store_one(conv, f"{before} {sentence} {after}", answer)
    assert out.status == "stored"
    assert store.calls.count("add") == 1


@given(
    sentence=content_sentence(1),
    answer=st.one_of(filler_text(), content_sentence(1)),
    threshold=st.integers(0, 12),
)
def test_the_content_word_threshold_is_the_rule(sentence: str, answer: str, threshold: int) -> None:
    counted = content_weight(words(sentence)) + content_weight(words(answer))
    assert is_trivial(sentence, answer, threshold) is (counted < threshold)


def test_every_stop_word_is_one_normalised_word() -> None:
    for word in FILLER_WORDS:
        assert words(word) == (word,)
        assert words(word.upper()) == (word,)


def test_the_documented_examples_of_the_rule() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for user, reply, trivial in [
        ("ok", "Sure, anything else?", True),
        ("Thanks!!", "You are welcome.", True),
        ("👍", "Glad it worked for you today", True),
        ("thank you so much", "Any time: your booking is confirmed", True),
        ("good morning", "Good morning! How can I help you today?", True),
        ("q", "a", True),
        ("I live in Lisbon", "noted", False),
        ("No", "Noted: no meat in your meal plan.", False),
    ]:
        assert is_trivial(user, reply, DEFAULT_MIN_CONTENT_WORDS) is trivial, (user, reply)
    for word in ("ok", "got it", "noted", "cool", "thanks", "merci", "谢谢", "hi", "bye"):
        assert f"`{word}`" in text
        assert set(words(word)) <= FILLER_WORDS
    for word in ("yes", "no", "sure"):
        assert word not in FILLER_WORDS


def test_han_and_kana_count_per_character() -> None:
    assert words("我喜欢喝绿茶。iPhone15を買った") == ("我喜欢喝绿茶", "iphone15", "を買った")
    assert content_weight(words("我喜欢喝绿茶")) == 6
    assert not is_trivial("我喜欢喝绿茶和乌龙茶", "好的", 3)


async def test_trivial_skipping_is_configurable_per_route() -> None:
    config = ConversationConfig(
        default=MemoryPolicy(auto_store=True, min_content_words=6),
        routes={
            "strict": RouteOverride(),
            "raw": RouteOverride(skip_trivial=False),
            "loose": RouteOverride(min_content_words=0),
        },
    )
    assert MemoryPolicy().min_content_words == DEFAULT_MIN_CONTENT_WORDS
    conv, _, _ = service(config=config)
    # 4 content words: fewer than 6 on "strict", enough where the count is off
    exchange = ("Book the Lisbon flight", "Booked.")
    assert (await conv.after_model("strict", "ana", *exchange)).reason == "trivial"
    assert (await conv.after_model("loose", "ana", *exchange)).status == "stored"
    assert (await conv.after_model("loose", "ana", "ok", "Sure!")).reason == "trivial"
    assert (await conv.after_model("raw", "ana", "ok", "Sure!")).status == "stored"
    loaded = config_from_mapping(
        {"routes": {"r": {"skip_trivial": False, "min_content_words": 0}}}
    ).policy("r")
    assert (loaded.skip_trivial, loaded.min_content_words) == (False, 0)
    with pytest.raises(ConfigurationError, match="min_content_words"):
        config_from_mapping({"routes": {"r": {"min_content_words": -1}}})
    with pytest.raises(ConfigurationError, match="skip_trivial"):
        config_from_mapping({"routes": {"r": {"skip_trivial": "no"}}})


punctuation_noise = st.text(st.sampled_from(" \t\n.,!?;:…👍"), max_size=3)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None, max_examples=30)
@given(
    sentence=content_sentence(3),
    answer=content_sentence(1),
    how=st.integers(0, 3),
    noise=punctuation_noise,
)
def test_an_exchange_equal_after_normalisation_is_a_duplicate(
    sentence: str, answer: str, how: int, noise: str
) -> None:
    import asyncio

    async def run() -> None:
        conv, store, _ = service()
        first = await conv.after_model("support", "ana", sentence, answer)
        again = await conv.after_model(
            "support", "ana", noise + _variant(sentence, how) + noise, f"  {answer.upper()}{noise}"
        )
        assert first.status == "stored"
        assert (again.status, again.reason, again.record_id) == (
            "skipped",
            "duplicate",
            first.record_id,
        )
        assert len((await store.inner.list("ana")).records) == 1
        # another user, route, project or type is not a duplicate
        assert (await conv.after_model("support", "bo", sentence, answer)).status == "stored"
        assert (await conv.after_model("travel", "ana", sentence, answer)).status == "stored"
        assert (
            await conv.after_model("support", "ana", sentence, answer, project="p")
        ).status == "stored"
        assert (
            await conv.after_model("travel", "ana", sentence, answer, memory_type="preference")
        ).status == "stored"

    asyncio.run(run())


async def test_concurrent_identical_exchanges_store_one_copy(backend_store: Any) -> None:
    import asyncio

    conv, _, _ = service(backend_store)
    exchange = ("My seat preference is the aisle", "Aisle seats from now on.")
    outs = await asyncio.gather(*(conv.after_model("support", "ana", *exchange) for _ in range(4)))
    assert sorted(o.status for o in outs) == ["skipped", "skipped", "skipped", "stored"]
    assert {o.reason for o in outs if o.status == "skipped"} == {"duplicate"}
    assert len({o.record_id for o in outs}) == 1
    assert len((await backend_store.list("ana")).records) == 1


async def test_repeats_and_acknowledgements_do_not_push_out_what_mattered(
    backend_store: Any,
) -> None:
    """Three identical exchanges and some thanks used to fill a block of
    `retrieval_limit=3` and leave out the one memory that mattered."""
    registry = CollectorRegistry()
    config = ConversationConfig(
        default=MemoryPolicy(threshold=-1.0, max_inject_tokens=400),
        routes={"support": RouteOverride(auto_store=True, retrieval_limit=3)},
    )
    conv, _, _ = service(
        backend_store, config=config, observability=Observability(registry=registry)
    )
    user = "user-7"
    important = await conv.after_model(
        user_id=user,
        route="support",
        query="My passport number ends in 4471",
        answer="Noted: it ends in 4471.",
    )
    outcomes = [important.status]
    for query, answer in [
        ("When does my flight leave?", "Your flight leaves at 9:40."),
        ("When does my flight leave?", "Your flight leaves at 9:40."),
        ("when does my flight leave", "Your flight leaves at 9:40"),
        ("ok", "Anything else about your flight?"),
        ("Thanks!", "You're welcome, have a good flight!"),
    ]:
        out = await conv.after_model("support", user, query, answer)
        outcomes.append(out.reason or out.status)
    got = await conv.before_model("support", user, "when does my flight leave")
    assert "4471" in got.text
    assert outcomes == ["stored", "stored", "duplicate", "duplicate", "trivial", "trivial"]
    assert len((await backend_store.list(user)).records) == 2
    counts = {
        s.labels["outcome"]: s.value
        for m in registry.collect()
        for s in m.samples
        if s.name == "agent_memory_conversation_stores_total"
    }
    assert counts == {"stored": 2.0, "duplicate": 2.0, "trivial": 2.0}


# -- a relevant memory left out by the budget is a hit ----------------------------------


async def test_a_relevant_memory_that_does_not_fit_is_an_omitted_hit(backend_store: Any) -> None:
    registry = CollectorRegistry()
    obs = Observability(registry=registry)
    config = ConversationConfig(
        default=MemoryPolicy(threshold=-1.0, max_inject_tokens=30, auto_store=True),
        routes={"support": RouteOverride()},
    )
    conv, _, _ = service(backend_store, config=config, observability=obs, backend="b")
    await conv.after_model(
        "support", "ana", "My printer is a LaserJet 4000 on the second floor", "Noted."
    )
    got = await conv.before_model("support", "ana", "my printer")
    assert (got.status, got.text, got.memories, got.omitted) == ("hit", "", (), 1)
    samples = [s for m in registry.collect() for s in m.samples]
    retrievals = {
        s.labels["status"]: s.value for s in samples if s.name == "agent_memory_retrievals_total"
    }
    assert retrievals == {"hit": 1.0}
    omitted = [s.value for s in samples if s.name == "agent_memory_conversation_omitted_total"]
    assert omitted == [1.0]
    # nothing relevant at all is still a miss, with nothing omitted
    assert (await conv.before_model("support", "bo", "my printer")).status == "miss"

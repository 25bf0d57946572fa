"""LoCoMo retrieval benchmark: does search find the turns that answer a question?

Protocol (for each conversation separately): every turn is one memory, text
`"{speaker}: {text}"` plus `" [shares {blip_caption}]"` when the turn shares an
image, its `dia_id` in attributes, created at its session's date; each question
(categories 1-4: multi-hop, temporal, open-domain, single-hop; 5 adversarial is
excluded) is the query, verbatim; gold = its `evidence` dia_ids, normalised
(`D30:05` -> `D30:5`, `D8:6; D9:17` split), ids absent from the conversation
dropped, questions left with none skipped. Reported per category and over 1-4:
R@5, R@10, R@25 (|gold ∩ top-k| / |gold|), hit@10, MRR (first gold), and search
latency p50/p95 per query.

Rows printed side by side from one run:
- `bm25-ref`: textbook BM25 computed in this file (plain word tokens minus
  stopwords, no stemming, no context) — the harness check, expected near R@10 58;
- `bm25`: plain BM25 over the turn text alone (no neighbouring-turn context),
  through the store's keyword search with the product's tokens;
- `lexical`, `vector`, `hybrid`: `HybridRetriever` modes over turns indexed with
  the configured neighbouring-turn context.

The dataset (CC BY-NC 4.0) is read from its path and never copied:

    python benchmarks/locomo.py [--data ../shared/data/locomo-dev.json]
        [--url memory://|sqlite://|milvus+lite://|postgresql+embedded://|redis+embedded://|<URL>]
        [--modes bm25,lexical,vector,hybrid]
        [--embedder hashing|semantic|minilm] [--window 2 --self-weight 2 --vector-weight 0.2 ...]
    python benchmarks/locomo.py --cv [--no-minilm]
    python benchmarks/locomo.py --latency [--url memory://|sqlite://] [--limit 1] [--rounds 3]
    python benchmarks/locomo.py --dated-forms [--embedder minilm] [--url sqlite://|...]

`--cv` is leave-one-conversation-out cross-validation on memory://: for each
knob (rule, word list, weight, and MiniLM at a few vector weights), R@10 with it
on minus off on each held-back conversation, every other knob at its default,
with the mean, the minimum and the number of folds it helps; then the estimate
of choosing every knob (and the embedder) on the other conversations and scoring
the held-back one. A knob stays on by default only when it helps in at least 4
of 5 folds and on average (docs/retrieval.md); a second estimate chooses every
knob by that rule on the other folds (helps in all of them but one, and on
average). Session-level R@k (`sR@k`): the
share of a question's evidence sessions that hold one of the top-k turns.

`--dated-forms` asks every undated question whose evidence was said on one day
again with that day written in each form of `DATED_FORMS` ("in May 2023", "on
Tuesday", "two weeks ago", ...), asked when the phrase names that day: R@10
undated against dated per form, and how many questions the date helped or hurt.
With knobs on the command line it runs their configuration beside the default
one: each form's gain, and the gain per conversation (the dev folds, with about
1,500 dated questions each).

`--latency` is the default pipeline's search latency as a ratio against the
hashing embedder's pipeline (the dependency-free fallback, the pipeline every
default was measured against before MiniLM), measured in the same run: each
question of the first `--limit` conversations (1 by default) is searched by both
pipelines back to back, in alternating order, for `--rounds` rounds; each round
reports each side's p50 and their ratio. A third column is the MiniLM pipeline
with every query's vector embedded before the round (the same search, no
forward pass), which splits MiniLM's cost into the model and the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

from agent_memory.bootstrap.connect import open_stores
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.lexical import STOPWORDS
from agent_memory.domain.retrieval import (
    FusionMethod,
    LengthPrior,
    RetrievalConfig,
    RetrievalMode,
)
from agent_memory.ports.models import Embedder
from agent_memory.services.retrieval import ConversationTurn, HybridRetriever, default_config

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO / ".." / "shared" / "data" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10, 25)
SESSION_KS = (5, 10)
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*(am|pm)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.I)
_MONTH_NAMES = "january february march april may june july august september october november"
_MONTHS = {m: i for i, m in enumerate([*_MONTH_NAMES.split(), "december"], start=1)}


def normalise_evidence(raw: str) -> list[str]:
    """`"D8:6; D9:17"` -> `["D8:6", "D9:17"]`, `"D30:05"` -> `["D30:5"]`; junk -> []."""
    out = []
    for part in re.split(r"[;,]", raw):
        m = _EVIDENCE.fullmatch(part.strip())
        if m:
            out.append(f"D{int(m[1])}:{int(m[2])}")
    return out


def session_time(text: str) -> datetime:
    """`"1:56 pm on 8 May, 2023"` -> an aware UTC datetime (epoch when unparsable)."""
    m = _DATE.search(text or "")
    if not m or m[5].lower() not in _MONTHS:
        return datetime(1970, 1, 1, tzinfo=UTC)
    hour = int(m[1]) % 12 + (12 if m[3].lower() == "pm" else 0)
    return datetime(int(m[6]), _MONTHS[m[5].lower()], int(m[4]), hour, int(m[2]), tzinfo=UTC)


def conversation_turns(conv: dict[str, Any]) -> list[ConversationTurn]:
    """Every turn of every session, in order, as the protocol defines the memory."""
    turns: list[ConversationTurn] = []
    n = 1
    while f"session_{n}" in conv or f"session_{n}_date_time" in conv:
        date_text = conv.get(f"session_{n}_date_time", "")
        base = session_time(date_text)
        for offset, turn in enumerate(conv.get(f"session_{n}") or []):
            text = turn["text"]
            if turn.get("blip_caption"):
                text += f" [shares {turn['blip_caption']}]"
            turns.append(
                ConversationTurn(
                    id=f"t{len(turns):05d}",
                    speaker=turn["speaker"],
                    text=text,
                    # keep turn order within the session: one second apart
                    at=base.replace(second=min(offset, 59)),
                    session=str(n),
                    attributes={"dia_id": turn["dia_id"], "session_date": date_text},
                )
            )
        n += 1
    return turns


def session_of(dia_id: str) -> str:
    """`"D8:6"` -> `"D8"`: the session a turn belongs to."""
    return dia_id.split(":", 1)[0]


def session_recall(ranked: Sequence[str], gold: set[str], k: int) -> float:
    """Session-level recall at k: the share of the gold turns' sessions that hold
    at least one of the top-k turns (the granularity most published LoCoMo
    retrieval numbers use)."""
    wanted = {session_of(g) for g in gold}
    return len(wanted & {session_of(d) for d in ranked[:k]}) / len(wanted)


def questions(sample: dict[str, Any], known: set[str]) -> Iterator[tuple[str, int, set[str]]]:
    for qa in sample["qa"]:
        category = qa.get("category")
        if category not in CATEGORIES:
            continue
        gold = {g for e in qa.get("evidence") or [] for g in normalise_evidence(e)} & known
        if gold:
            yield qa["question"], category, gold


_PLAIN_WORD = re.compile(r"[^\W_]+")
_ABSOLUTE_DATE = re.compile(
    r"\b(?:" + "|".join(_MONTHS) + r"|(?:19|20)\d\d)\b|\d{4}-\d{1,2}-\d{1,2}", re.I
)


def is_dated(question: str) -> bool:
    """Whether a question names an absolute date (a month name, a year, an ISO
    date): with category 2, the dated-temporal slice."""
    return _ABSOLUTE_DATE.search(question) is not None


class TextbookBM25:
    """Reference BM25 computed here, outside the product (the `bm25-ref` row): plain
    lowercase word tokens, the product's stopword list, no stemming, no context;
    k1 = 1.2, b = 0.75. It checks the harness (data, gold, metrics) on its own."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.docs = [Counter(self._tokens(t)) for t in texts]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avg = sum(self.lengths) / max(len(self.docs), 1)
        self.df: Counter[str] = Counter()
        for doc in self.docs:
            self.df.update(doc.keys())

    @staticmethod
    def _tokens(text: str) -> list[str]:
        words = (w.lower() for w in _PLAIN_WORD.findall(text))
        return [w for w in words if w not in STOPWORDS]

    def rank(self, query: str, k: int) -> list[int]:
        n = len(self.docs)
        terms = list(dict.fromkeys(self._tokens(query)))
        scores = []
        for i, doc in enumerate(self.docs):
            norm = 1.2 * (0.25 + 0.75 * self.lengths[i] / self.avg)
            score = 0.0
            for t in terms:
                tf = doc.get(t, 0)
                if tf:
                    idf = math.log(1.0 + (n - self.df[t] + 0.5) / (self.df[t] + 0.5))
                    score += idf * tf * 2.2 / (tf + norm)
            scores.append(score)
        ranked = sorted((i for i in range(n) if scores[i] > 0), key=lambda i: (-scores[i], i))
        return ranked[:k]


class Scores:
    def __init__(self) -> None:
        self.sums: dict[Any, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.counts: dict[Any, int] = defaultdict(int)
        self.latencies: list[float] = []

    def add(
        self,
        category: int,
        ranked: Sequence[str],
        gold: set[str],
        latency: float,
        *,
        dated: bool = False,
    ) -> None:
        self.latencies.append(latency)
        rr = next((1.0 / (i + 1) for i, d in enumerate(ranked) if d in gold), 0.0)
        keys: list[Any] = [category, "all"]
        if dated and category == 2:
            keys.append("dated")
        for key in keys:
            row = self.sums[key]
            for k in KS:
                row[f"R@{k}"] += len(gold & set(ranked[:k])) / len(gold)
            row["hit@10"] += 1.0 if gold & set(ranked[:10]) else 0.0
            row["MRR"] += rr
            for k in SESSION_KS:
                row[f"sR@{k}"] += session_recall(ranked, gold, k)
            self.counts[key] += 1

    def metric(self, key: Any, name: str) -> float:
        n = self.counts[key]
        return 100.0 * self.sums[key][name] / n if n else float("nan")

    def percentile(self, q: float) -> float:
        data = sorted(self.latencies)
        return data[min(len(data) - 1, int(q * len(data)))] * 1000.0 if data else float("nan")


def make_embedder(name: str) -> Embedder:
    if name == "minilm":
        from agent_memory.adapters.minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    if name == "semantic":
        from agent_memory.adapters.sentence_transformers import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder()
    from agent_memory.adapters.memory.embedder import HashingEmbedder

    return HashingEmbedder(256)


#: command-line option (argparse dest) -> RetrievalConfig field
_ARG_FIELDS = {
    "fusion": "fusion",
    "rrf_k": "rrf_k",
    "vector_weight": "vector_weight",
    "lexical_weight": "lexical_weight",
    "candidates": "candidates",
    "speaker_weight": "speaker_weight",
    "window": "context_window",
    "self_weight": "context_self_weight",
    "date_weight": "date_weight",
    "date_grace": "date_grace_days",
    "date_half_life": "date_half_life_days",
    "context_dates": "context_dates",
    "mentioned_dates": "mentioned_dates",
    "session_penalty": "session_penalty",
    "diversity_reach": "diversity_reach",
    "list_session_penalty": "list_session_penalty",
    "list_candidates": "list_candidates",
    "session_weight": "session_weight",
    "length_weight": "length_weight",
    "dated_length_weight": "dated_length_weight",
    "length_saturation": "length_saturation",
    "length_prior": "length_prior",
    "feedback_docs": "feedback_docs",
    "feedback_terms": "feedback_terms",
    "feedback_weight": "feedback_weight",
    "query_variants": "query_variants",
    "reply_weight": "reply_weight",
    "category_members": "category_members",
}


def _backend_url(url: str) -> tuple[str, tempfile.TemporaryDirectory[str] | None]:
    """`sqlite://` and `milvus+lite://` as a file in a new temporary directory
    (returned, to clean up); any other URL as it is."""
    if url == "sqlite://":
        tmp = tempfile.TemporaryDirectory()
        return f"sqlite:///{tmp.name}/locomo.db", tmp
    if url == "milvus+lite://":
        tmp = tempfile.TemporaryDirectory()
        return f"milvus+lite://{tmp.name}/locomo.db", tmp
    return url, None


def config_from_args(args: argparse.Namespace, default: RetrievalConfig) -> RetrievalConfig:
    """The configuration the command line asks for: each knob given there, every
    other one `default`'s (the embedder's `default_config`: the knobs its
    cross-validation kept). The knobs not given are filled into `args` (the
    report prints them)."""
    for dest, field_name in _ARG_FIELDS.items():
        if getattr(args, dest) is None:
            value = getattr(default, field_name)
            setattr(args, dest, value.value if dest in ("fusion", "length_prior") else value)
    return RetrievalConfig(
        fusion=FusionMethod(args.fusion),
        **{f: getattr(args, dest) for dest, f in _ARG_FIELDS.items() if dest != "fusion"},
    )


async def run(args: argparse.Namespace, data: list[dict[str, Any]]) -> dict[str, Scores]:
    embedder = make_embedder(args.embedder)
    config = config_from_args(args, default_config(embedder.space))
    plain = RetrievalConfig(
        context_window=0,
        context_self_weight=1,
        vector_weight=0.0,
        speaker_weight=0.0,
        context_dates=False,
        mentioned_dates=False,
        date_weight=0.0,
        length_weight=0.0,
        list_session_penalty=0.0,
        list_candidates=100,
        session_weight=0.0,
        query_variants=False,
        reply_weight=0.0,
        category_members=False,
    )
    url, tmp = _backend_url(args.url)
    stores = await open_stores(url, space=embedder.space, settings=Settings())
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    results = {m: Scores() for m in modes}
    try:
        retriever = HybridRetriever(stores.store, embedder, config)
        baseline = HybridRetriever(stores.store, embedder, plain)
        if modes != ["bm25"] and not retriever.lexical_available:
            print(f"note: {stores.backend} has no keyword search: lexical modes fall back")
        t0 = time.perf_counter()
        for sample in data[: args.limit or None]:
            owner = f"locomo-{sample['sample_id']}"
            await stores.store.delete_scope(owner)
            await stores.store.delete_scope(f"{owner}-plain")
            turns = conversation_turns(sample["conversation"])
            dia = {t.id: str(t.attributes["dia_id"]) for t in turns}
            # the questions are asked after the conversation: its last session's
            # day resolves what they leave relative ("in May", "last week")
            asked = max(t.at for t in turns) if args.reference == "last-session" else None
            reference = TextbookBM25([t.content for t in turns]) if "bm25-ref" in modes else None
            if any(m not in ("bm25", "bm25-ref") for m in modes):
                await retriever.add_conversation(owner, turns, namespace="context")
            if "bm25" in modes:
                await baseline.add_conversation(f"{owner}-plain", turns, namespace="plain")
            for question, category, gold in questions(sample, set(dia.values())):
                for mode in modes:
                    if reference is not None and mode == "bm25-ref":
                        start = time.perf_counter()
                        order = reference.rank(question, 25)
                        elapsed = time.perf_counter() - start
                        ranked = [str(turns[i].attributes["dia_id"]) for i in order]
                        results[mode].add(category, ranked, gold, elapsed, dated=is_dated(question))
                        continue
                    who, scope, m = (
                        (baseline, f"{owner}-plain", RetrievalMode.LEXICAL)
                        if mode == "bm25"
                        else (retriever, owner, RetrievalMode(mode))
                    )
                    start = time.perf_counter()
                    got = await who.retrieve(scope, question, limit=25, mode=m, reference=asked)
                    elapsed = time.perf_counter() - start
                    ranked = [dia[h.record.id] for h in got.hits]
                    results[mode].add(category, ranked, gold, elapsed, dated=is_dated(question))
            if not args.keep:
                await stores.store.delete_scope(owner)
                await stores.store.delete_scope(f"{owner}-plain")
        print(f"# ran in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    finally:
        await stores.close()
        if tmp is not None:
            tmp.cleanup()
    return results


def report(results: dict[str, Scores], args: argparse.Namespace) -> None:
    modes = list(results)
    print(
        f"LoCoMo retrieval — backend {args.url}, embedder {args.embedder}, window {args.window}, "
        f"self-weight {args.self_weight}, fusion {args.fusion} (k={args.rrf_k}), "
        f"lexical weight {args.lexical_weight}, vector weight {args.vector_weight}, "
        f"speaker weight {args.speaker_weight}, candidates {args.candidates}, "
        f"length weight {args.length_weight} (saturation {args.length_saturation}, "
        f"{args.length_prior}), "
        f"list session penalty {args.list_session_penalty}, "
        f"list candidates {args.list_candidates}, session weight {args.session_weight}, "
        f"reply weight {args.reply_weight}, query variants "
        f"{'on' if args.query_variants else 'off'}, category members "
        f"{'on' if args.category_members else 'off'}, date weight {args.date_weight}"
    )
    metrics = [f"R@{k}" for k in KS] + ["hit@10", "MRR"] + [f"sR@{k}" for k in SESSION_KS]
    print("| category | n | metric | " + " | ".join(modes) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in modes) + " |")
    first = results[modes[0]]
    for key in [*CATEGORIES, "all"]:
        label = f"{key} {CATEGORIES[key]}" if key in CATEGORIES else "1-4 overall"
        for name in metrics:
            vals = " | ".join(f"{results[m].metric(key, name):.1f}" for m in modes)
            print(f"| {label} | {first.counts[key]} | {name} | {vals} |")
    for name in ("R@10", "MRR"):
        vals = " | ".join(f"{results[m].metric('dated', name):.1f}" for m in modes)
        print(f"| 2 temporal, dated | {first.counts['dated']} | {name} | {vals} |")
    for q, label in ((0.5, "p50"), (0.95, "p95")):
        vals = " | ".join(f"{results[m].percentile(q):.2f}" for m in modes)
        print(f"| latency | | {label} ms | {vals} |")
    base = results.get("bm25-ref") or results.get("bm25")
    if base is not None:
        ratios = " | ".join(
            f"{results[m].metric('all', 'R@10') / base.metric('all', 'R@10'):.2f}" for m in modes
        )
        print(f"| R@10 vs {'bm25-ref' if 'bm25-ref' in results else 'bm25'} | | ratio | {ratios} |")


# --- leave-one-conversation-out cross-validation (`--cv`) -----------------------


@attrs.frozen
class Knob:
    """One rule, word list or weight, as the config values with it on and off;
    `index` names the index a setting needs ("other": the other embedder's
    vectors, "nodates": no month and year in the context, "mentions" /
    "nomentions": built with / without the times a turn mentions), None when the
    overrides say which."""

    name: str
    on: dict[str, Any]
    off: dict[str, Any]
    on_index: str | None = None
    off_index: str | None = None
    #: whether "chosen on the other folds" picks this knob (False: an alternative
    #: form of another knob, reported only)
    chosen: bool = True
    #: the knob whose weight this one changes: chosen only where that one was on
    refines: str | None = None


# Each knob's gain is "on minus off" with every other knob at its default.
_RULE_KNOBS = (
    Knob("speaker bonus", {"speaker_weight": 0.4}, {"speaker_weight": 0.0}),
    Knob(
        "dates (month and year in context + date bonus)",
        {"date_weight": 0.3, "context_dates": True},
        {"date_weight": 0.0, "context_dates": False},
        off_index="nodates",
    ),
    Knob(
        "times a turn mentions as its event time",
        {"mentioned_dates": True},
        {"mentioned_dates": False},
    ),
    Knob("date bonus", {"date_weight": 0.3}, {"date_weight": 0.0}),
    Knob(
        "month and year in context",
        {"context_dates": True},
        {"context_dates": False},
        off_index="nodates",
    ),
    Knob(
        "length prior, scale form (0.3)",
        {"length_weight": 0.3, "length_prior": LengthPrior.SCALE},
        {"length_weight": 0.0},
        chosen=False,
    ),
    Knob(
        "length prior 0.3 for questions that name a date",
        {"dated_length_weight": 0.3},
        {"dated_length_weight": 0.0},
    ),
    Knob("list-session penalty", {"list_session_penalty": 0.1}, {"list_session_penalty": 0.0}),
    Knob("list candidates 200", {"list_candidates": 200}, {"list_candidates": 100}),
    Knob("session prior", {"session_weight": 0.5}, {"session_weight": 0.0}),
    Knob("reply prior", {"reply_weight": 0.05}, {"reply_weight": 0.0}),
    Knob("query variants", {"query_variants": True}, {"query_variants": False}),
    Knob("category members", {"category_members": True}, {"category_members": False}),
)


def _weight_rows(
    knob: str, name: str, default: float, grid: Sequence[float], *, label: str | None = None
) -> tuple[Knob, ...]:
    """ "<label> weight X instead of <default>" for each other weight X of `grid`,
    each refining `knob` (chosen only where that knob is)."""
    return tuple(
        Knob(
            f"{label or knob} weight {other} instead of {default}",
            {name: other},
            {name: default},
            refines=knob,
        )
        for other in grid
        if other != default
    )


def knobs(base: str) -> tuple[Knob, ...]:
    """The knobs judged with `base` ("hashing" or "minilm") as the default
    embedder: the rules, the length prior at the base embedder's weight (0.3,
    MiniLM 0.2) and the other weight, the base embedder's vectors at their
    weight, and the other embedder instead (the "other" index; `Knob.other`)."""
    weight = 0.3 if base == "hashing" else 0.2
    length = (
        Knob("length prior", {"length_weight": weight}, {"length_weight": 0.0}),
        *_weight_rows("length prior", "length_weight", weight, (0.1, 0.2, 0.3, 0.4)),
    )
    dates = _weight_rows(
        "dates (month and year in context + date bonus)",
        "date_weight",
        RetrievalConfig().date_weight,
        (0.2, 0.3, 0.4, 0.5),
        label="date bonus",
    )
    priors = (
        *_weight_rows("session prior", "session_weight", 0.5, (0.3, 0.4, 0.6, 0.7)),
        *_weight_rows("speaker bonus", "speaker_weight", 0.4, (0.2, 0.3, 0.5, 0.6)),
        *_weight_rows("reply prior", "reply_weight", 0.05, (0.03, 0.1, 0.15)),
    )
    if base == "hashing":
        return (
            *_RULE_KNOBS,
            *dates,
            *priors,
            *length,
            Knob("hashing vectors 0.2", {"vector_weight": 0.2}, {"vector_weight": 0.0}),
            Knob("MiniLM instead of hashing, vector weight 0.3", {"vector_weight": 0.3}, {},
                 on_index="other"),
            Knob("MiniLM instead of hashing, vector weight 0.4", {"vector_weight": 0.4}, {},
                 on_index="other"),
            Knob("MiniLM instead of hashing, vector weight 0.5", {"vector_weight": 0.5}, {},
                 on_index="other"),
        )  # fmt: skip
    return (
        *_RULE_KNOBS,
        *dates,
        *priors,
        *length,
        Knob("MiniLM vectors 0.4", {"vector_weight": 0.4}, {"vector_weight": 0.0}),
        Knob("MiniLM vector weight 0.3 instead of 0.4", {"vector_weight": 0.3},
             {"vector_weight": 0.4}, refines="MiniLM vectors 0.4"),
        Knob("MiniLM vector weight 0.5 instead of 0.4", {"vector_weight": 0.5},
             {"vector_weight": 0.4}, refines="MiniLM vectors 0.4"),
        Knob("MiniLM instead of hashing (vector weight 0.2)", {}, {"vector_weight": 0.2},
             off_index="other"),
    )  # fmt: skip


class _CachedEmbedder:
    """An embedder that embeds each distinct text once (queries repeat across
    the knob runs)."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self._cache: dict[str, Any] = {}

    @property
    def space(self) -> Any:
        return self._inner.space

    async def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if todo:
            for text, vector in zip(todo, await self._inner.embed(todo), strict=True):
                self._cache[text] = vector
        return np.stack([self._cache[t] for t in texts])


Setting = tuple[str, tuple[tuple[str, Any], ...]]  # (index, config overrides)


def _setting(index: str | None, overrides: dict[str, Any], default: RetrievalConfig) -> Setting:
    """A run's identity: its index and the overrides that differ from `default`.
    Without an index named, the hashing index with or without the dates in the
    context, as the overrides say."""
    if index is None:
        dates = overrides.get("context_dates", default.context_dates)
        mentions = overrides.get("mentioned_dates", default.mentioned_dates)
        if not dates:
            index = "nodates"
        elif mentions != default.mentioned_dates:
            # the index must hold what the setting reads: the mentioned times
            # (attribute and context months) only when built with them
            index = "mentions" if mentions else "nomentions"
        else:
            index = "default"
    changed = tuple(sorted((k, v) for k, v in overrides.items() if getattr(default, k) != v))
    return (index, changed)


def _default_is_on(knob: Knob, default: RetrievalConfig) -> bool:
    if knob.on_index == "other":
        return False  # the other embedder is never the default
    return all(getattr(default, k) == v for k, v in knob.on.items())


async def cross_validate(args: argparse.Namespace, data: list[dict[str, Any]]) -> None:
    """Leave-one-conversation-out over the conversations: each knob's gain (R@10
    on minus off, the rest at the defaults) on each held-back conversation, with
    the mean, min and the folds it helps; then the estimate of choosing every
    knob (and the embedder) on the other conversations and scoring the
    held-back one. Each conversation is indexed once per index kind."""
    base_name = args.cv_embedder
    other_name = "hashing" if base_name == "minilm" else "minilm"
    embedders: dict[str, Any] = {"base": _CachedEmbedder(make_embedder(base_name))}
    default = default_config(embedders["base"].space)
    samples = data[: args.limit or None]
    if not (other_name == "minilm" and args.no_minilm):
        embedders["other"] = _CachedEmbedder(make_embedder(other_name))
    other_weight = (
        default_config(embedders["other"].space).vector_weight if ("other" in embedders) else 0.0
    )
    print(
        f"# default embedder {base_name}; the other one, {other_name}, at vector weight "
        f"{other_weight}",
        file=sys.stderr,
    )
    KNOBS = knobs(base_name)
    stores = {
        name: await open_stores("memory://", space=e.space, settings=Settings())
        for name, e in embedders.items()
    }
    # per setting, per conversation: (category, R@10, session R@10) per question
    scores: dict[Setting, list[list[tuple[int, float, float]]]] = {}
    convs: list[tuple[str, list[ConversationTurn], list[tuple[str, int, set[str]]], Any]] = []
    t0 = time.perf_counter()
    try:
        for sample in samples:
            owner = f"locomo-{sample['sample_id']}"
            turns = conversation_turns(sample["conversation"])
            dia = {t.id: str(t.attributes["dia_id"]) for t in turns}
            asked = max(t.at for t in turns)
            qs = list(questions(sample, set(dia.values())))
            convs.append((owner, turns, qs, asked))
            for index, embedder_name, extra in (
                ("default", "base", {}),
                ("nodates", "base", {"context_dates": False}),
                ("mentions", "base", {"mentioned_dates": True}),
                ("nomentions", "base", {"mentioned_dates": False}),
                ("other", "other", {}),
            ):
                if embedder_name not in embedders:
                    continue
                cfg = attrs.evolve(default, **extra)
                retriever = HybridRetriever(
                    stores[embedder_name].store, embedders[embedder_name], cfg
                )
                await retriever.add_conversation(f"{owner}-{index}", turns, namespace="context")
        print(f"# indexed in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

        async def run_setting(setting: Setting, only: Sequence[int] | None = None) -> None:
            index, changed = setting
            embedder_name = "other" if index == "other" else "base"
            cfg = attrs.evolve(default, **dict(changed))
            retriever = HybridRetriever(stores[embedder_name].store, embedders[embedder_name], cfg)
            rows = scores.setdefault(setting, [[] for _ in convs])
            for i, (owner, turns, qs, asked) in enumerate(convs):
                if (only is not None and i not in only) or rows[i]:
                    continue
                dia = {t.id: str(t.attributes["dia_id"]) for t in turns}
                for question, category, gold in qs:
                    got = await retriever.retrieve(
                        f"{owner}-{index}", question, limit=25, reference=asked
                    )
                    ranked = [dia[h.record.id] for h in got.hits]
                    r10 = len(gold & set(ranked[:10])) / len(gold)
                    rows[i].append((category, r10, session_recall(ranked, gold, 10)))

        def value(setting: Setting, conv: int, col: int = 1) -> float:
            rows = scores[setting][conv]
            return 100.0 * sum(r[col] for r in rows) / len(rows)

        def pooled(setting: Setting, folds: Sequence[int]) -> float:
            rows = [r for i in folds for r in scores[setting][i]]
            return 100.0 * sum(r[1] for r in rows) / len(rows)

        base = _setting(None, {}, default)
        await run_setting(base)
        pairs: list[tuple[Knob, Setting, Setting]] = []
        for knob in KNOBS:
            if "other" in (knob.on_index, knob.off_index) and "other" not in embedders:
                continue
            on = _setting(knob.on_index, knob.on, default)
            off = _setting(knob.off_index, knob.off, default)
            await run_setting(on)
            await run_setting(off)
            pairs.append((knob, on, off))
        print(f"# knob runs done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

        n = len(convs)
        ids = [c[0].removeprefix("locomo-") for c in convs]
        print(
            f"Leave-one-conversation-out, R@10 (turns) over categories 1-4, memory://, "
            f"default embedder {base_name}, {n} folds; gain = R@10 with the knob on minus "
            "off on the held-back conversation, every other knob at its default"
        )
        print("| knob | default | " + " | ".join(ids) + " | mean | min | helps |")
        print("| --- | --- | " + " | ".join("---" for _ in ids) + " | --- | --- | --- |")
        for knob, on, off in pairs:
            gains = [value(on, i) - value(off, i) for i in range(n)]
            helps = sum(1 for g in gains if g > 0)
            state = "on" if _default_is_on(knob, default) else "off"
            cells = " | ".join(f"{g:+.1f}" for g in gains)
            print(
                f"| {knob.name} | {state} | {cells} | {sum(gains) / n:+.2f} | "
                f"{min(gains):+.1f} | {helps}/{n} |"
            )
        cells = " | ".join(f"{value(base, i):.1f}" for i in range(n))
        sess = " | ".join(f"{value(base, i, 2):.1f}" for i in range(n))
        mean_default = sum(value(base, i) for i in range(n)) / n
        mean_sess = sum(value(base, i, 2) for i in range(n)) / n
        print(f"| default R@10 | | {cells} | {mean_default:.1f} | | |")
        print(f"| default session R@10 | | {sess} | {mean_sess:.1f} | | |")

        # choose every knob (and the embedder) on the other folds, score the held-back one
        def passes(on: Setting, off: Setting, folds: Sequence[int]) -> bool:
            """The rule the defaults follow, on `folds`: helps in all of them but
            one, and on average."""
            gains = [value(on, i) - value(off, i) for i in folds]
            return sum(g > 0 for g in gains) >= len(folds) - 1 and sum(gains) > 0

        def choose(train: Sequence[int], by_rule: bool) -> Setting:
            """Every knob (and the embedder) chosen on the `train` folds: by their
            pooled R@10 (`by_rule` False), or by the rule the defaults follow
            (`passes`), then the best pooled among the weights that pass."""

            def better(on: Setting, off: Setting, floor: float | None = None) -> bool:
                best = pooled(on, train) > (floor if floor is not None else -1.0)
                if by_rule:
                    return passes(on, off, train) and best
                return best and pooled(on, train) > pooled(off, train)

            overrides: dict[str, Any] = {}
            embedder: tuple[float, dict[str, Any]] | None = None
            # the knobs chosen on, with the pooled R@10 of the weight chosen so far
            # (a knob's refinements compete with it: the best weight wins)
            taken: dict[str, float] = {}
            for knob, on, off in pairs:
                if not knob.chosen or (knob.refines is not None and knob.refines not in taken):
                    continue
                if knob.refines is not None:
                    if better(on, off, taken[knob.refines]):
                        overrides.update(knob.on)
                        taken[knob.refines] = pooled(on, train)
                    continue
                if "other" in (knob.on_index, knob.off_index):
                    # the embedder: the other one at the weight that did best, if it
                    # beats the base one
                    theirs, ours = (on, off) if knob.on_index == "other" else (off, on)
                    mine = knob.on if knob.on_index == "other" else knob.off
                    if better(theirs, ours, embedder[0] if embedder else None):
                        embedder = (pooled(theirs, train), mine)
                    continue
                chosen = better(on, off)
                overrides.update(knob.on if chosen else knob.off)
                if chosen:
                    taken[knob.name] = pooled(on, train)
            index: str | None = None
            if embedder is not None:
                # the other embedder's index holds the dates in the context
                index = "other"
                overrides.update(embedder[1], context_dates=True)
            return _setting(index, overrides, default)

        for label, by_rule in (
            ("chosen on the other folds", False),
            ("chosen on the other folds by the rule", True),
        ):
            chosen_cells = []
            for held in range(n):
                setting = choose([i for i in range(n) if i != held], by_rule)
                await run_setting(setting, only=[held])
                chosen_cells.append(value(setting, held))
            cells = " | ".join(f"{v:.1f}" for v in chosen_cells)
            print(
                f"| {label} | | {cells} | {sum(chosen_cells) / n:.1f} | {min(chosen_cells):.1f} | |"
            )
        print(f"# ran in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    finally:
        for st in stores.values():
            await st.close()


# --- dated forms (`--dated-forms`) ----------------------------------------------


def _month_name(day: date) -> str:
    return day.strftime("%B")


def _on(day: date) -> str:
    return f"{_month_name(day)} {day.day}, {day.year}"


def _season(day: date) -> str:
    if day.month in (12, 1, 2):  # a winter is labelled by the year of its January
        return f"winter {day.year + (day.month == 12)}"
    name = {3: "spring", 4: "spring", 5: "spring", 6: "summer", 7: "summer", 8: "summer"}
    return f"{name.get(day.month, 'fall')} {day.year}"


def _part_of_month(day: date) -> str:
    return "early" if day.day <= 10 else "mid" if day.day <= 20 else "late"


def _days_around(day: date) -> str:
    """ "May 7 and May 11, 2023" for 9 May 2023."""
    before, after = day - timedelta(days=2), day + timedelta(days=2)
    return f"{_month_name(before)} {before.day} and {_on(after)}"


def _month_later(day: date) -> date:
    """A day of the month after `day`'s (the 28th at most)."""
    return (day.replace(day=1) + timedelta(days=40)).replace(day=min(day.day, 28))


#: name -> (the phrase naming `day`, the day the question is asked; None: the
#: conversation's last session). Each names a range that holds `day`.
DATED_FORMS: dict[str, Callable[[date], tuple[str, date | None]]] = {
    "month": lambda d: (f"in {_month_name(d)} {d.year}", None),
    "day, month first": lambda d: (f"on {_on(d)}", None),
    "day, day first": lambda d: (f"on {d.day} {_month_name(d)} {d.year}", None),
    "numeric day": lambda d: (f"on {d.month}/{d.day}/{d.year}", None),
    "year": lambda d: (f"in {d.year}", None),
    "week of": lambda d: (f"in the week of {_on(d)}", None),
    "around a day": lambda d: (f"around {_on(d)}", None),
    "part of a month": lambda d: (f"in {_part_of_month(d)} {_month_name(d)} {d.year}", None),
    "season": lambda d: (f"in {_season(d)}", None),
    "the week before": lambda d: (f"the week before {_on(d + timedelta(days=7))}", None),
    "between two days": lambda d: (f"between {_days_around(d)}", None),
    "yesterday": lambda d: ("yesterday", d + timedelta(days=1)),
    "days ago": lambda d: ("three days ago", d + timedelta(days=3)),
    "weekday": lambda d: (f"on {d.strftime('%A')}", d + timedelta(days=3)),
    "last week": lambda d: ("last week", d + timedelta(days=7)),
    "two weeks ago": lambda d: ("two weeks ago", d + timedelta(days=14)),
    "last month": lambda d: ("last month", _month_later(d)),
    "the week before last": lambda d: ("the week before last", d + timedelta(days=14)),
    "the past week": lambda d: ("in the past week", d + timedelta(days=3)),
    "month of last year": lambda d: (
        f"in {_month_name(d)} last year",
        date(d.year + 1, d.month, min(d.day, 28)),
    ),
}


def dated_question(question: str, form: str, day: date) -> tuple[str, date | None]:
    """`question` (ending in "?") with the `form` phrase naming `day` before its
    question mark, and the day it is asked (None: when the conversation ends)."""
    phrase, asked = DATED_FORMS[form](day)
    return f"{question[:-1].rstrip()} {phrase}?", asked


async def dated_forms(args: argparse.Namespace, data: list[dict[str, Any]]) -> None:
    """Each question that names no date, does not ask "when", and whose evidence
    was said on one day, asked again with that day written in each form of
    `DATED_FORMS`: R@10 undated against dated, and how many questions the date
    helped and hurt (a correct date should never hurt).

    With knobs on the command line (`--date-weight 0.4`), the configuration they
    make is run beside the default one, on the same questions: each form's R@10
    under both, and the gain per conversation (the folds the dev questions are
    judged by), so a knob that acts only on questions naming a date is judged on
    thousands of them instead of the dev split's 15."""
    embedder = _CachedEmbedder(make_embedder(args.embedder))  # queries repeat per side
    default = default_config(embedder.space)
    config = config_from_args(args, default)
    changed = {
        f.name: getattr(config, f.name)
        for f in attrs.fields(RetrievalConfig)
        if getattr(config, f.name) != getattr(default, f.name)
    }
    sides = {"default": default, **({"asked": config} if changed else {})}
    url, tmp = _backend_url(args.url)
    stores = await open_stores(url, space=embedder.space, settings=Settings())
    retrievers = {side: HybridRetriever(stores.store, embedder, c) for side, c in sides.items()}
    # per side, per form: [R@10 undated, R@10 dated, questions, helped, hurt] (sums)
    totals = {side: {form: [0.0, 0.0, 0, 0, 0] for form in DATED_FORMS} for side in sides}
    # per side, per conversation: [R@10 dated over every form, questions x forms]
    folds: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
    owners = [
        f"locomo-dated-{sample['sample_id']}-{side}"
        for sample in data[: args.limit or None]
        for side in sides
    ]
    try:
        for sample in data[: args.limit or None]:
            turns = conversation_turns(sample["conversation"])
            dia = {t.id: str(t.attributes["dia_id"]) for t in turns}
            said = {str(t.attributes["dia_id"]): t.at for t in turns}
            last = max(t.at for t in turns)
            asks: list[tuple[str, set[str], date]] = []
            for question, _, gold in questions(sample, set(dia.values())):
                days = {said[g].date() for g in gold}
                if (
                    len(days) != 1
                    or is_dated(question)
                    or not question.endswith("?")
                    or question.lower().startswith("when")
                ):
                    continue
                asks.append((question, gold, next(iter(days))))
            for side, retriever in retrievers.items():
                # each side indexes the conversation itself: a knob may act there
                owner = f"locomo-dated-{sample['sample_id']}-{side}"
                await stores.store.delete_scope(owner)
                await retriever.add_conversation(owner, turns, namespace="context")

                async def recall(
                    question: str,
                    asked: datetime,
                    gold: set[str],
                    owner: str = owner,
                    retriever: HybridRetriever = retriever,
                ) -> float:
                    got = await retriever.retrieve(owner, question, limit=10, reference=asked)
                    found = {str(h.record.attributes["dia_id"]) for h in got.hits}
                    return len(gold & found) / len(gold)

                fold = folds[side].setdefault(sample["sample_id"], [0.0, 0])
                for question, gold, day in asks:
                    undated = await recall(question, last, gold)
                    for form, row in totals[side].items():
                        text, on = dated_question(question, form, day)
                        asked = last if on is None else datetime.combine(on, last.timetz())
                        dated = await recall(text, asked, gold)
                        row[0] += undated
                        row[1] += dated
                        row[2] += 1
                        row[3] += dated > undated
                        row[4] += dated < undated
                        fold[0] += dated
                        fold[1] += 1
    finally:
        if not args.keep:
            for owner in owners:
                await stores.store.delete_scope(owner)
        await stores.close()
        if tmp is not None:
            tmp.cleanup()
    shown = "asked" if changed else "default"
    knobs = ", ".join(f"{k} {getattr(v, 'value', v)}" for k, v in changed.items()) or "defaults"
    print(
        f"Questions with their evidence day written in each form, {args.embedder}, "
        f'{args.url}, {knobs}, R@10 (turns), categories 1-4 (no "when" questions, none dated)'
    )
    extra = " R@10 dated, defaults | gain |" if changed else ""
    print(f"| form | example | questions | R@10 undated | R@10 dated | helped | hurt |{extra}")
    print("| --- | --- | --- | --- | --- | --- | --- |" + (" --- | --- |" if changed else ""))
    example = date(2023, 5, 9)
    for form, (undated, dated, n, helped, hurt) in totals[shown].items():
        phrase = DATED_FORMS[form](example)[0]
        n = max(int(n), 1)
        cells = ""
        if changed:
            base = totals["default"][form][1]
            cells = f" {100 * base / n:.1f} | {100 * (dated - base) / n:+.2f} |"
        print(
            f"| {form} | {phrase} | {n} | {100 * undated / n:.1f} | {100 * dated / n:.1f} | "
            f"{int(helped)} | {int(hurt)} |{cells}"
        )
    if changed:
        ids = list(folds["default"])
        gains = [
            100.0 * (folds["asked"][i][0] - folds["default"][i][0]) / max(folds["default"][i][1], 1)
            for i in ids
        ]
        helps = sum(g > 0 for g in gains)
        print(f"\nGain of {knobs} per conversation, R@10 dated over every form")
        print("| " + " | ".join(ids) + " | mean | min | helps |")
        print("| " + " | ".join("---" for _ in ids) + " | --- | --- | --- |")
        print(
            "| "
            + " | ".join(f"{g:+.2f}" for g in gains)
            + f" | {sum(gains) / len(gains):+.2f} | {min(gains):+.2f} | {helps}/{len(ids)} |"
        )


async def latency_ratio(args: argparse.Namespace, data: list[dict[str, Any]]) -> None:
    """Search p50 of the default pipelines, hashing against MiniLM, interleaved
    question by question in one run (see the module docstring)."""
    import statistics

    sides: dict[str, Any] = {
        "hashing": make_embedder("hashing"),
        "minilm": make_embedder("minilm"),
    }
    # the same model, each query embedded once before the rounds (its cache)
    sides["minilm, query vectors precomputed"] = _CachedEmbedder(sides["minilm"])
    tmp = tempfile.TemporaryDirectory()
    stores: dict[str, Any] = {}
    retrievers: dict[str, HybridRetriever] = {}
    try:
        for i, (name, embedder) in enumerate(sides.items()):
            url = f"sqlite:///{tmp.name}/latency-{i}.db" if args.url == "sqlite://" else args.url
            stores[name] = await open_stores(url, space=embedder.space, settings=Settings())
            retrievers[name] = HybridRetriever(
                stores[name].store, embedder, default_config(embedder.space)
            )
        asks: list[tuple[str, str, datetime]] = []
        for sample in data[: args.limit or 1]:
            owner = f"locomo-latency-{sample['sample_id']}"
            turns = conversation_turns(sample["conversation"])
            known = {str(t.attributes["dia_id"]) for t in turns}
            for name, retriever in retrievers.items():
                await stores[name].store.delete_scope(owner)
                await retriever.add_conversation(owner, turns, namespace="context")
            asked = max(t.at for t in turns)
            asks += [(owner, q, asked) for q, _, _ in questions(sample, known)]
        await sides["minilm, query vectors precomputed"].embed([q for _, q, _ in asks])
        names = list(sides)
        print(
            f"Search latency, default pipelines, {args.url}, {len(asks)} questions per round, "
            "each question searched by every pipeline back to back in rotating order"
        )
        print("| round | " + " | ".join(f"{n} p50 ms" for n in names) + " | minilm / hashing |")
        print("| --- | " + " | ".join("---" for _ in names) + " | --- |")
        ratios = []
        for r in range(args.rounds):
            times: dict[str, list[float]] = {n: [] for n in names}
            for j, (owner, question, asked) in enumerate(asks):
                shift = (j + r) % len(names)
                for name in names[shift:] + names[:shift]:
                    start = time.perf_counter()
                    await retrievers[name].retrieve(owner, question, limit=25, reference=asked)
                    times[name].append(time.perf_counter() - start)
            p50 = {n: 1000.0 * statistics.median(v) for n, v in times.items()}
            ratios.append(p50["minilm"] / p50["hashing"])
            cells = " | ".join(f"{p50[n]:.2f}" for n in names)
            print(f"| {r + 1} | {cells} | {ratios[-1]:.2f}x |")
        print(f"| median | | | | {statistics.median(ratios):.2f}x |")
    finally:
        for st in stores.values():
            await st.close()
        tmp.cleanup()


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", default=str(DEFAULT_DATA), help="LoCoMo JSON (never copied)")
    p.add_argument(
        "--url",
        default="memory://",
        help="backend URL (sqlite://, milvus+lite:// = a temp file; postgresql+embedded://, "
        "redis+embedded:// = a temporary server)",
    )
    p.add_argument("--modes", default="bm25-ref,bm25,lexical,vector,hybrid")
    p.add_argument("--embedder", choices=("hashing", "semantic", "minilm"), default="hashing")
    # knob defaults: None = the embedder's default_config (printed with the run)
    p.add_argument("--fusion", choices=[f.value for f in FusionMethod], default=None)
    p.add_argument("--rrf-k", type=float, default=None)
    p.add_argument("--lexical-weight", type=float, default=None)
    p.add_argument(
        "--vector-weight",
        type=float,
        default=None,
        help="default: the embedder's (default_config: 0.2 for hashing, 0.4 otherwise)",
    )
    p.add_argument("--candidates", type=int, default=None)
    p.add_argument("--speaker-weight", type=float, default=None)
    p.add_argument("--window", type=int, default=None)
    p.add_argument("--self-weight", type=int, default=None)
    p.add_argument("--session-penalty", type=float, default=None)
    p.add_argument("--diversity-reach", type=int, default=None)
    p.add_argument("--list-session-penalty", type=float, default=None)
    p.add_argument("--list-candidates", type=int, default=None)
    p.add_argument("--session-weight", type=float, default=None)
    p.add_argument("--reply-weight", type=float, default=None)
    p.add_argument("--length-weight", type=float, default=None)
    p.add_argument("--length-saturation", type=int, default=None)
    p.add_argument(
        "--dated-length-weight",
        type=float,
        default=None,
        help="the length prior's weight for questions that name a date",
    )
    p.add_argument(
        "--length-prior",
        choices=[f.value for f in LengthPrior],
        default=None,
        help="the length prior's form: bonus (added) or scale (a factor on the fused score)",
    )
    p.add_argument("--feedback-weight", type=float, default=None)
    p.add_argument("--feedback-docs", type=int, default=None)
    p.add_argument("--feedback-terms", type=int, default=None)
    p.add_argument("--date-weight", type=float, default=None)
    p.add_argument("--date-grace", type=float, default=None)
    p.add_argument("--date-half-life", type=float, default=None)
    p.add_argument(
        "--context-dates",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="index each turn's month and year in its context",
    )
    p.add_argument(
        "--mentioned-dates",
        action=argparse.BooleanOptionalAction,
        default=None,
        help='count the times a turn\'s words name ("last Friday") as its event time too',
    )
    p.add_argument(
        "--query-variants",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="add irregular verb forms and chat-register words to the keyword query",
    )
    p.add_argument(
        "--category-members",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="add the members of the categories a list question names to its keyword query",
    )
    p.add_argument(
        "--reference",
        choices=("last-session", "now"),
        default="last-session",
        help="when the questions are asked: the conversation's last session, or now",
    )
    p.add_argument(
        "--cv",
        action="store_true",
        help="leave-one-conversation-out: each knob's gain per held-back conversation "
        "(memory:// only)",
    )
    p.add_argument(
        "--cv-embedder",
        choices=("hashing", "minilm"),
        default=None,
        help="--cv: the default embedder the knobs are judged with (default: minilm when "
        "its wheel is installed, as connect() chooses)",
    )
    p.add_argument("--no-minilm", action="store_true", help="--cv without the MiniLM runs")
    p.add_argument(
        "--latency",
        action="store_true",
        help="the default MiniLM pipeline's search p50 against the hashing one's, "
        "interleaved in one run (memory:// or sqlite://)",
    )
    p.add_argument("--rounds", type=int, default=3, help="--latency: rounds")
    p.add_argument(
        "--dated-forms",
        action="store_true",
        help="each undated question asked again with its evidence day in each written "
        "form (on --url)",
    )
    p.add_argument("--limit", type=int, default=0, help="first N conversations only")
    p.add_argument("--keep", action="store_true", help="leave the records in the backend")
    args = p.parse_args(argv)
    data = json.loads(Path(args.data).read_text())
    if args.latency:
        if args.url not in ("memory://", "sqlite://"):
            p.error("--latency runs on memory:// or sqlite://")
        asyncio.run(latency_ratio(args, data))
        return
    if args.cv:
        if args.cv_embedder is None:
            from agent_memory.bootstrap.connect import minilm_installed

            installed = minilm_installed() and not args.no_minilm
            args.cv_embedder = "minilm" if installed else "hashing"
        asyncio.run(cross_validate(args, data))
        return
    stop: Callable[[], None] | None = None
    if args.url in ("postgresql+embedded://", "redis+embedded://"):
        # a throw-away server from the test suite's helpers
        sys.path.insert(0, str(REPO / "tests"))
        if args.url.startswith("postgresql"):
            from servers.postgres_server import FAST_SETTINGS, start_postgres

            pg = start_postgres(settings=FAST_SETTINGS)
            args.url, stop = pg.uri, pg.destroy
        else:
            from servers.redis_server import launch_redis

            valkey = launch_redis()
            args.url, stop = valkey.url, valkey.close
    try:
        if args.dated_forms:
            asyncio.run(dated_forms(args, data))
        else:
            report(asyncio.run(run(args, data)), args)
    finally:
        if stop is not None:
            stop()


if __name__ == "__main__":
    main()

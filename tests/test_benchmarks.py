"""Both sides of every overhead comparison return (and store) the same data.

The benchmarks (`benchmarks/postgres_overhead.py`, `redis_overhead.py`,
`qdrant_overhead.py`) time our adapters against direct client code; a ratio is
only meaningful when the baseline does the same work for the same result. These
tests run each script's own side functions once, on small data and the real
servers of the test session, and compare what they return or store. The Redis
ones run on the single server and on the session's Redis Cluster (the
`--cluster` column).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.adapters.postgres.events import PostgresEventLog
from agent_memory.adapters.qdrant._codec import record_from_payload
from agent_memory.adapters.redis import RedisEventLog
from agent_memory.adapters.redis._codec import encode_event, encode_record
from agent_memory.adapters.redis._keys import digest
from agent_memory.domain.dates import question_spans
from agent_memory.domain.records import Entity, Event, MemoryRecord

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))  # for their `_harness` import
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


pg = _load("postgres_overhead")
rd = _load("redis_overhead")
qd = _load("qdrant_overhead")
locomo = _load("locomo")


def _record_fields(r: MemoryRecord) -> tuple[Any, ...]:
    return (r.owner, r.id, r.namespace, r.kind, r.content, r.context, r.created_at,
            r.updated_at, r.importance, r.attributes)  # fmt: skip


# -- PostgreSQL -----------------------------------------------------------------


@pytest.fixture
async def pg_bench(postgres_url: str) -> Any:
    now = datetime.now(UTC)
    bench = await pg.Bench.open(postgres_url, "t_bench_overhead", now)
    yield bench
    await bench.close()


async def test_postgres_search_sides_return_the_same_records(pg_bench: Any) -> None:
    rng = np.random.default_rng(5)
    await pg_bench.load(pg.make_records({"big": 300, "small": 40}, rng), [])
    queries = list(rng.standard_normal((4, pg.DIM)).astype(np.float32))
    for owner in ("big", "small"):
        ours, baseline = pg_bench.search_sides(owner, queries)
        for _ in queries:
            hits, direct = await ours(), await baseline()
            assert len(hits) == len(direct) == 10
            for hit, other in zip(hits, direct, strict=True):
                assert _record_fields(hit.record) == _record_fields(other.record)
                assert np.array_equal(hit.record.vector, other.record.vector)
                assert abs(hit.score - other.score) < 1e-5


async def test_postgres_window_sides_return_the_same_rows(pg_bench: Any) -> None:
    now = pg_bench.now
    await pg_bench.load([], pg.make_events(0, 120, now) + pg.make_events(500, 30, now, "quiet"))
    for domain, limited in (("ops", True), ("quiet", False)):
        ours, baseline = pg_bench.window_sides(domain, now - timedelta(days=1))
        window = await ours()
        rows, cut = await baseline()
        assert [pg.event_row(e) for e in window.events] == [tuple(r) for r in rows]
        assert window.limited == cut == limited
        assert len(rows) == (50 if limited else 30 + 5)  # `quiet` also shows ops' global events


_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False,
    allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)  # fmt: skip


_ident = _text.filter(str.strip)
_entity_pairs = st.lists(st.tuples(_ident, _ident), max_size=2, unique=True)


@st.composite
def _event_batches(draw: st.DrawFn) -> list[Event]:
    now = datetime.now(UTC).replace(microsecond=0)
    n = draw(st.integers(1, 60))
    return [
        Event(
            id=f"e{i}-" + draw(_ident),
            domain="prop",
            agent="a",
            action=draw(_text),
            outcome="ok",
            summary=draw(_text),
            occurred_at=now - timedelta(seconds=draw(st.integers(0, 3600))),
            recorded_at=now,
            entities=tuple(Entity(t, x) for t, x in draw(_entity_pairs)),
            user_id=draw(st.none() | st.just("u1")),
            importance=draw(st.floats(0, 1)),
            metadata=draw(st.dictionaries(_text, _json, max_size=3)),
            is_global=draw(st.booleans()),
        )
        for i in range(n)
    ]


@settings(max_examples=15, deadline=None)
@given(batch=_event_batches())
async def test_postgres_append_and_window_sides_agree_on_any_events(
    pg_bench: Any, batch: list[Event]
) -> None:
    """Property: for generated events, the baseline's append stores the rows
    ours stores (read back through our window, other domain), and the window
    sides return the same rows."""
    import attrs

    async with pg_bench.db.connection() as conn:
        await conn.execute(f"DELETE FROM {pg_bench.db.table('events').as_string()}")
    mirrored = [attrs.evolve(e, domain="prop-base") for e in batch]
    ours, baseline = pg_bench.append_sides(iter([batch]), iter([mirrored]))
    assert await ours() == await baseline() == len(batch)
    since = datetime.now(UTC) - timedelta(days=1)
    log: PostgresEventLog = pg_bench.events
    mine = await log.window("prop", since=since, limit=100)
    theirs = await log.window("prop-base", since=since, limit=100)
    assert [attrs.evolve(e, domain="x") for e in mine.events if not e.is_global] == [
        attrs.evolve(e, domain="x") for e in theirs.events if not e.is_global
    ]
    ours_w, baseline_w = pg_bench.window_sides("prop", since)
    window = await ours_w()
    rows, cut = await baseline_w()
    assert [pg.event_row(e) for e in window.events] == [tuple(r) for r in rows]
    assert window.limited == cut


# -- Redis (single server and cluster) -------------------------------------------


@pytest.fixture(params=["server", "cluster"])
async def rd_bench(request: pytest.FixtureRequest) -> Any:
    """The benchmark's `Bench` on the session's Redis server, then on the session's
    Redis Cluster (the `--cluster` column: `redis_cluster_*` lines)."""
    cluster = request.param == "cluster"
    url = request.getfixturevalue("redis_cluster_url" if cluster else "redis_url")
    bench = rd.Bench(url, "tb" + uuid.uuid4().hex[:8])
    assert bench.cluster == cluster
    if cluster:  # as the benchmark does: the scripts on every primary
        for script in (bench.append_script, bench.window_script, bench.search_script):
            await bench.r.script_load(script.script)
    yield bench
    await bench.close()


async def test_redis_search_sides_return_the_same_records(rd_bench: Any) -> None:
    rng = np.random.default_rng(2)
    records = rd.make_records(200, 2, rng)
    await rd_bench.store.add(records)
    queries = list(rng.standard_normal((3, rd.DIM)).astype(np.float32))
    by_id = {r.id: r for r in records}
    for k in (10, 11):
        ours, direct = rd_bench.search_sides("owner-1", queries, k=k)
        for _ in queries:
            hits, docs = await ours(), await direct()
            assert [h.record.id for h in hits] == [d[b"id"].decode() for d in docs]
            for h, d in zip(hits, docs, strict=True):
                assert h.record == by_id[h.record.id]
                assert np.array_equal(d[b"vec"], h.record.vector)
                assert d[b"attrs"] == h.record.attributes


async def test_redis_window_sides_return_the_same_events(rd_bench: Any) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    await rd_bench.log.append(rd.make_events(120, "d1", now) + rd.make_events(20, "d2", now, "x"))
    for domain, shown in (("d1", 50), ("d2", 20 + 3)):  # d2 also shows d1's 3 global events
        ours, direct = rd_bench.window_sides(domain, now - timedelta(days=1))
        window = await ours()
        docs, cut = await direct()
        assert [json.loads(encode_event(e)) for e in window.events] == docs
        assert window.limited == cut
        assert len(docs) == shown


@pytest.mark.parametrize("kind", ["script", "zadd"])
async def test_redis_append_sides_store_the_same_events(rd_bench: Any, kind: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    batch = rd.make_events(100, "append", now, tag="t", globals_=False)
    keys = rd_bench.direct_keys(kind)
    make = rd_bench.append_script_direct if kind == "script" else rd_bench.append_zadd_direct
    assert await rd_bench.append_ours(iter([batch]))() == 100
    await make(iter([batch]), keys)()
    theirs = RedisEventLog(rd_bench.r, deployment=keys.deployment)
    since = now - timedelta(days=1)
    for entity in (None, Entity("service", "svc-3")):
        mine = await rd_bench.log.window("append", since=since, limit=200, entity=entity)
        other = await theirs.window("append", since=since, limit=200, entity=entity)
        assert mine == other
        assert len(mine.events) == (100 if entity is None else 20)
    assert await theirs.domains() == await rd_bench.log.domains()


async def test_redis_add_sides_store_the_same_hashes(rd_bench: Any) -> None:
    at = datetime.now(UTC)
    rng = np.random.default_rng(4)
    ours_batch, direct_batch = rd.make_batch(rng, at, "a"), rd.make_batch(rng, at, "d")
    ours, direct = rd_bench.add_sides(iter([ours_batch]), iter([direct_batch]))
    await ours()
    await direct()
    identity = rd.SPACE.identity

    async def stored_and_expected(
        rec: MemoryRecord,
    ) -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
        stored = await rd_bench.r.hgetall(rd_bench.keys.ms_record(identity, rec.owner, rec.id))
        tags = {"oh": digest(rec.owner), "nh": digest(rec.namespace), "kh": digest(rec.kind)}
        expected = {k.encode(): v if isinstance(v, bytes) else str(v).encode()
                    for k, v in encode_record(rec, tags).items()}  # fmt: skip
        return stored, expected

    for rec in ours_batch[:5]:
        stored, expected = await stored_and_expected(rec)
        assert {k: stored[k] for k in expected} == expected
    for rec in direct_batch[:5]:  # the same hash, tags included, so the same index entries
        stored, expected = await stored_and_expected(rec)
        assert stored == expected
        assert await rd_bench.store.get(rec.owner, rec.id) == rec
        hits = await rd_bench.store.search(
            rec.owner, rec.vector, limit=1, namespace=rec.namespace, kinds=[rec.kind]
        )
        assert [h.record for h in hits] == [rec]


# -- Qdrant -----------------------------------------------------------------------


async def test_qdrant_search_sides_return_the_same_records() -> None:
    space = qd.EmbeddingSpace("bench", 16)
    client = qd.client_for(None)
    store = await qd.new_store(client, space)
    records = qd.make_records(300, 16, 3, seed=1)
    await store.add(records)
    rng = np.random.default_rng(3)
    queries = [(f"owner-{k % 3}", q) for k, q in enumerate(rng.standard_normal((6, 16)))]
    queries = [(o, q.astype(np.float32)) for o, q in queries]
    ours, direct = qd.search_sides(client, store, queries)
    for _ in queries:
        hits, points = await ours(), await direct()
        assert [h.record for h in hits] == [record_from_payload(p.payload) for p in points]
    await client.close()


async def test_qdrant_add_sides_store_the_same_points() -> None:
    space = qd.EmbeddingSpace("bench", 16)
    client = qd.client_for(None)
    chunk = qd.make_records(50, 16, 3, seed=9)
    ours_store, codec, prepared, plain = [await qd.new_store(client, space) for _ in range(4)]
    ours, direct = qd.add_sides(client, ours_store, codec.collection_name, iter([chunk]),
                                iter([chunk]), plain=False)  # fmt: skip
    await ours()
    await direct()
    await qd.prepared_side(client, prepared.collection_name, iter([qd.prepare(chunk)]))()
    _, by_hand = qd.add_sides(client, ours_store, plain.collection_name, iter(()), iter([chunk]))
    await by_hand()

    async def points(name: str) -> list[tuple[Any, str, list[float]]]:
        got, _ = await client.scroll(name, limit=100, with_payload=True, with_vectors=True)
        return sorted((p.id, json.dumps(p.payload, sort_keys=True), p.vector) for p in got)

    stored = await points(ours_store.collection_name)
    assert len(stored) == 50
    assert stored == await points(codec.collection_name) == await points(prepared.collection_name)
    # qdrant_add_keyword_false: the same points without the keyword fields.
    no_terms = await qd.new_store(client, space, keyword=False)
    await qd.add_sides(client, no_terms, plain.collection_name, iter([chunk]), iter(()))[0]()
    keyword_fields = {"terms", "term_counts", "token_count", "lexical"}
    bare = [
        (pid, json.dumps({k: v for k, v in json.loads(payload).items() if k not in keyword_fields},
                         sort_keys=True), vector)
        for pid, payload, vector in stored
    ]  # fmt: skip
    assert await points(no_terms.collection_name) == bare
    # The plain side stores the same records (fields and vectors), in its own layout.
    got, _ = await client.scroll(plain.collection_name, limit=100, with_payload=True,
                                 with_vectors=True)  # fmt: skip
    ours_vectors = {(p.payload["owner"], p.payload["id"]): p.vector
                    for p in (await client.scroll(ours_store.collection_name, limit=100,
                                                  with_vectors=True))[0]}  # fmt: skip
    by_key = {(r.owner, r.id): r for r in chunk}
    assert len(got) == 50
    for p in got:
        r = by_key[(p.payload["owner"], p.payload["id"])]
        assert p.payload["content"] == r.content
        assert p.payload["attributes"] == r.attributes
        assert p.payload["created_at"] == r.created_at.isoformat()
        assert p.vector == ours_vectors[(r.owner, r.id)]
    await client.close()


@pytest.mark.parametrize("form", sorted(locomo.DATED_FORMS))
@given(day=st.dates(date(1990, 1, 1), date(2080, 12, 31)))
def test_every_dated_form_names_a_range_that_holds_its_day(day: date, form: str) -> None:
    """`locomo.py --dated-forms` credits a form with what retrieval does for it:
    that is only fair when the question it writes names the evidence day (read
    by the product's parser, against the day it is asked), once."""
    asked_last = day + timedelta(days=60)
    text, asked = locomo.dated_question("What did Sam cook?", form, day)
    assert text.startswith("What did Sam cook ")
    assert text.endswith("?")
    spans = question_spans(text, asked or asked_last)
    assert len(spans) == 1, (text, spans)
    ((_, found),) = spans
    assert found.start <= day <= found.end, (text, found)
    assert not found.open


def _tiny_locomo(path: Path) -> Path:
    """A LoCoMo-shaped conversation of three sessions on three days, written for
    this test, with two questions whose evidence was said on one day."""
    said = {
        1: ("1:00 pm on 3 May, 2023", ["I baked bread with rosemary.", "I went hiking."]),
        2: ("2:00 pm on 17 May, 2023", ["I cooked a spicy curry for friends.", "I read."]),
        3: ("3:00 pm on 2 June, 2023", ["We cooked pasta at the lake.", "I painted a sunset."]),
    }
    conversation: dict[str, Any] = {"speaker_a": "Sam", "speaker_b": "Ana"}
    for n, (when, texts) in said.items():
        conversation[f"session_{n}_date_time"] = when
        conversation[f"session_{n}"] = [
            {"speaker": ("Sam", "Ana")[i % 2], "dia_id": f"D{n}:{i + 1}", "text": text}
            for i, text in enumerate(texts)
        ]
    qa = [
        {"question": "What did Sam cook for friends?", "evidence": ["D2:1"], "category": 4},
        {"question": "What did Ana paint?", "evidence": ["D3:2"], "category": 4},
    ]
    path.write_text(json.dumps([{"sample_id": "tiny-1", "conversation": conversation, "qa": qa}]))
    return path


def test_dated_forms_runs_the_knobs_given_beside_the_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--dated-forms` with a knob on the command line runs that configuration
    beside the default one and prints the gain per conversation; without one, the
    defaults alone. (It used to run the defaults whatever the command line said.)"""
    data = str(_tiny_locomo(tmp_path / "tiny.json"))
    locomo.main(["--dated-forms", "--data", data, "--date-weight", "0.9"])
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    assert "date_weight 0.9" in header, header
    rows = [line for line in out.splitlines() if line.startswith("| month |")]
    assert len(rows) == 1, out
    assert rows[0].count("|") == 10, rows  # both sides' columns
    assert "Gain of date_weight 0.9 per conversation" in out
    fold = out.splitlines()[-1].split(" | ")
    assert fold[-1].endswith("/1 |"), out  # one conversation, one fold
    locomo.main(["--dated-forms", "--data", data])
    out = capsys.readouterr().out
    assert ", defaults, " in out.splitlines()[0]
    assert "Gain of" not in out
    rows = [line for line in out.splitlines() if line.startswith("| month |")]
    assert len(rows) == 1, out
    assert rows[0].count("|") == 8, rows

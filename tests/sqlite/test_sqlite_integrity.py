"""The SQLite file stays sound under any sequence of writes with adversarial owners
and ids: `PRAGMA integrity_check` passes and the keyword index (postings) equals
what the rows imply after every step, and the store agrees with the in-memory
oracle. Also: files from schema version 1 (FTS5 index, including one damaged by
FTS5's level growth) are migrated, and a damaged file raises `StorageCorrupted`.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.sqlite import SCHEMA_VERSION, SqliteMemoryStore
from agent_memory.adapters.sqlite.codec import terms_json
from agent_memory.domain.errors import (
    BackendUnavailable,
    DuplicateRecord,
    NotFound,
    StorageCorrupted,
)
from agent_memory.domain.lexical import tokenize
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from budget import STATE_MACHINE_EXAMPLES

SPACE = EmbeddingSpace(model="integrity", dimension=3)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
_T = TypeVar("_T")

# Characters that have broken stores before: query and glob syntax, quotes,
# separators, case and compatibility variants, combining marks, ZWJ, controls.
_ODD = "aA0 *?[]{}:|@\\%_'\"-.()^$~!#&/\t\n\x01\x7féÉßẞİı東京😀\u200d\u0301ﬁΩ"  # noqa: RUF001
_text_id = st.text(st.sampled_from(_ODD), min_size=1, max_size=12).filter(lambda s: s.strip())
_owner = st.one_of(
    _text_id,
    st.sampled_from(["ana", "ana ", " ana", "ANA", "ﬁnance", "finance", "acme.corp", "a" * 300]),
)
_words = st.lists(
    st.sampled_from(["apple", "Apple", "cherry", "cherries", "東京", "naïve", "x_y", "7", ""]),
    max_size=5,
).map(" ".join)
_vec = st.lists(st.integers(-2, 2), min_size=3, max_size=3).filter(any)


def _record(owner: str, id_: str, content: str, vec: list[int], ns: str) -> MemoryRecord:
    return MemoryRecord(
        owner=owner,
        id=id_,
        namespace=ns,
        kind="fact",
        content=content,
        vector=np.asarray(vec, dtype=np.float32),
        created_at=T0,
        updated_at=T0,
    )


def check_file(path: Path) -> None:
    """`PRAGMA integrity_check` passes, every record's postings are exactly its
    terms' counts, no posting points at a missing record, and no owner without
    records keeps a version row."""
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        for (table,) in conn.execute("SELECT records_table FROM spaces").fetchall():
            expected: Counter[tuple[str, str, int]] = Counter()
            for owner, pk, content, context, terms, n_terms in conn.execute(
                f'SELECT owner, pk, content, context, terms, n_terms FROM "{table}"'
            ):
                tokens = tokenize(f"{content}\n{context}")
                assert json.loads(terms) == tokens, (owner, pk)
                assert n_terms == len(tokens)
                for term, count in Counter(tokens).items():
                    expected[(owner, term, pk)] = count
            stored = {
                (o, t, p): tf
                for o, t, p, tf in conn.execute(f'SELECT owner, term, pk, tf FROM "{table}_terms"')
            }
            assert stored == dict(expected)
            stale = conn.execute(
                "SELECT owner FROM record_versions AS v WHERE NOT EXISTS"
                f' (SELECT 1 FROM "{table}" AS r WHERE r.owner = v.owner)'
            ).fetchall()
            assert stale == []


class SqliteAgainstOracle(RuleBasedStateMachine):
    """Random writes and reads on one SQLite file and the in-memory oracle."""

    records = Bundle("records")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "m.db"
        self.sqlite = SqliteMemoryStore(self.path, SPACE)
        # Batches of 2 or more take the bulk path (insert trigger suspended, postings
        # inserted by one statement); single adds keep the trigger path.
        self.sqlite._bulk_rows = 2
        self.oracle = InMemoryMemoryStore(SPACE)

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self.loop.run_until_complete(coro)

    def both(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call `name` on both stores; they must return alike or raise alike."""
        results = []
        for store in (self.sqlite, self.oracle):
            try:
                results.append(("ok", self.run(getattr(store, name)(*args, **kwargs))))
            except (DuplicateRecord, NotFound) as exc:
                results.append(("error", type(exc)))
        assert results[0][0] == results[1][0], (name, results)
        return results

    @rule(
        target=records,
        owner=_owner,
        id_=_text_id,
        content=_words,
        vec=_vec,
        ns=st.sampled_from(["n1", "n:2"]),
    )
    def add(self, owner: str, id_: str, content: str, vec: list[int], ns: str) -> tuple[str, str]:
        result = self.both("add", [_record(owner, id_, content, vec, ns)])
        assert result[0] == result[1]
        return owner, id_

    @rule(
        target=records,
        items=st.lists(
            st.tuples(st.sampled_from(["ana", "ANA", "ﬁnance"]), _text_id, _words, _vec),
            min_size=2,
            max_size=4,
        ),
        ns=st.sampled_from(["n1", "n:2"]),
    )
    def add_batch(self, items: list[tuple[str, str, str, list[int]]], ns: str) -> Any:
        batch = [_record(owner, id_, content, vec, ns) for owner, id_, content, vec in items]
        result = self.both("add", batch)
        assert result[0] == result[1]
        return multiple(*[(r.owner, r.id) for r in batch])

    @rule(key=records, content=_words, vec=_vec)
    def update(self, key: tuple[str, str], content: str, vec: list[int]) -> None:
        result = self.both("update", _record(*key, content, vec, "n1"))
        assert result[0] == result[1]

    @rule(key=records)
    def delete(self, key: tuple[str, str]) -> None:
        result = self.both("delete", *key)
        assert result[0] == result[1]

    @rule(key=records, ns=st.none() | st.just("n1"))
    def delete_scope(self, key: tuple[str, str], ns: str | None) -> None:
        result = self.both("delete_scope", key[0], namespace=ns)
        assert result[0] == result[1]

    @rule(key=records, vec=_vec)
    def search(self, key: tuple[str, str], vec: list[int]) -> None:
        q = np.asarray(vec, dtype=np.float32)
        (_, got), (_, want) = self.both("search", key[0], q, limit=5)
        assert [h.record.id for h in got] == [h.record.id for h in want]
        assert np.allclose([h.score for h in got], [h.score for h in want], atol=1e-5)

    @rule(key=records, query=_words)
    def search_text(self, key: tuple[str, str], query: str) -> None:
        (_, got), (_, want) = self.both("search_text", key[0], query, limit=5)
        assert [(h.record.id, h.score) for h in got] == [(h.record.id, h.score) for h in want]

    @invariant()
    def file_is_sound(self) -> None:
        if self.path.exists():
            check_file(self.path)

    def teardown(self) -> None:
        self.run(self.sqlite.close())
        self.loop.close()
        self.dir.cleanup()


def test_sqlite_file_stays_sound_and_agrees_with_the_oracle() -> None:
    run_state_machine_as_test(
        SqliteAgainstOracle,
        settings=settings(
            max_examples=min(settings().max_examples, STATE_MACHINE_EXAMPLES),
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


async def test_a_thousand_deletes_with_odd_owners_keep_the_file_sound(tmp_path: Path) -> None:
    """The measured failure: one record per odd owner, then deletes in sorted order
    alternating `delete` and `delete_scope`, each followed by a keyword search and
    an add for an unrelated owner. Version 1 (FTS5 `'optimize'` after each delete)
    reported "database disk image is malformed" after about 1,000 deletes."""
    path = tmp_path / "many.db"
    store = SqliteMemoryStore(path, SPACE)
    owners = sorted({f"{c}{i}{c}" for i in range(275) for c in ("*", "é", "{", " |")})
    vec = [1, 0, 0]
    for start in range(0, len(owners), 200):
        await store.add(
            [
                _record(o, f"id:{o}", f"note apple {o}", vec, "n1")
                for o in owners[start : start + 200]
            ]
        )
    for i, owner in enumerate(owners):
        if i % 2:
            assert await store.delete(owner, f"id:{owner}")
        else:
            assert await store.delete_scope(owner) == 1
        await store.search_text("bystander", "apple cherry")
        await store.add([_record("bystander", f"b{i}", "apple", vec, "n1")])
    assert len(owners) > 1_000
    hits = await store.search_text("bystander", "apple", limit=3)
    assert [h.record.id for h in hits] == ["b0", "b1", "b10"]
    await store.close()
    check_file(path)


async def test_forgotten_owner_leaves_no_version_row_and_versions_never_repeat(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v.db"
    a = SqliteMemoryStore(path, SPACE)
    b = SqliteMemoryStore(path, SPACE)
    q = np.asarray([1, 0, 0], dtype=np.float32)
    await a.add([_record("user-x", "r1", "secret", [1, 0, 0], "n1")])
    assert [h.record.id for h in await b.search("user-x", q)] == ["r1"]  # b caches it
    assert await a.delete_scope("user-x") == 1
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT owner FROM record_versions").fetchall()
    assert rows == []
    # The owner comes back with another record: b must not serve its stale matrix.
    await a.add([_record("user-x", "r2", "other", [0, 1, 0], "n1")])
    assert [h.record.id for h in await b.search("user-x", q)] == ["r2"]
    await a.close()
    await b.close()


# ---------------------------------------------------------------- version 1 files

_V1_SPACE_DDL = (
    """CREATE TABLE "{records}" (
        pk INTEGER PRIMARY KEY, owner TEXT NOT NULL, id TEXT NOT NULL,
        namespace TEXT NOT NULL, kind TEXT NOT NULL, created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL, importance REAL NOT NULL, n_terms INTEGER NOT NULL,
        terms TEXT NOT NULL, attributes TEXT NOT NULL, content TEXT NOT NULL,
        context TEXT NOT NULL, vector BLOB NOT NULL, UNIQUE (owner, id))""",
    """CREATE VIRTUAL TABLE "{records}_fts" USING fts5 (
        terms, content='{records}', content_rowid='pk', tokenize='ascii')""",
    """CREATE TRIGGER "{records}_ai" AFTER INSERT ON "{records}" BEGIN
        INSERT INTO "{records}_fts" (rowid, terms) VALUES (new.pk, new.terms); END""",
    """CREATE TRIGGER "{records}_ad" AFTER DELETE ON "{records}" BEGIN
        INSERT INTO "{records}_fts" ("{records}_fts", rowid, terms)
        VALUES ('delete', old.pk, old.terms); END""",
)


async def _v1_file(path: Path, *, damaged: bool) -> None:
    """A file laid out as schema version 1 wrote it: the shared tables, one space
    with an FTS5 index over space-joined terms; `damaged` repeats FTS5
    `'optimize'` until its structure record overflows, as version 1's deletes did."""
    fresh = SqliteMemoryStore(path, SPACE)
    await fresh.ping()  # creates the current layout; then rewind it to v1
    await fresh.close()
    records = f"records_{SPACE.identity}"
    conn = sqlite3.connect(path, isolation_level=None)
    for name, kind in conn.execute(
        "SELECT name, type FROM sqlite_master WHERE name LIKE 'records_%' AND type IN"
        " ('table', 'trigger')"
    ).fetchall():
        conn.execute(f'DROP {kind.upper()} IF EXISTS "{name}"')
    conn.execute("DROP TABLE meta")
    for statement in _V1_SPACE_DDL:
        conn.execute(statement.format(records=records))
    conn.execute("UPDATE spaces SET lexical = 'v1-fingerprint'")
    blob = np.asarray([1, 0, 0], dtype="<f4").tobytes()
    for i in range(300):
        conn.execute(
            f'INSERT INTO "{records}" (owner, id, namespace, kind, created_at, updated_at,'
            " importance, n_terms, terms, attributes, content, context, vector)"
            " VALUES (?, ?, 'n1', 'fact', 0, 0, 0.5, 3, ?, '{}', ?, '', ?)",
            ("o", f"r{i:03d}", f"apple cherry w{i}", f"apples cherry w{i}", blob),
        )
    conn.execute("INSERT INTO record_versions VALUES (?, 'o', 7)", (SPACE.identity,))
    conn.execute("INSERT INTO record_versions VALUES (?, 'gone', 3)", (SPACE.identity,))
    conn.execute("PRAGMA user_version = 1")
    if damaged:
        for i in range(1200):
            try:
                conn.execute(f'INSERT INTO "{records}_fts" ("{records}_fts") VALUES (\'optimize\')')
                conn.execute(
                    f'INSERT INTO "{records}" (owner, id, namespace, kind, created_at,'
                    " updated_at, importance, n_terms, terms, attributes, content, context,"
                    " vector) VALUES ('p', ?, 'n1', 'fact', 0, 0, 0.5, 1, 'pear', '{}', 'pear',"
                    " '', ?)",
                    (f"p{i}", blob),
                )
            except sqlite3.DatabaseError:
                break
        else:
            pytest.fail("FTS5 did not overflow; the damaged-file case is not exercised")
    conn.close()


@pytest.mark.parametrize("damaged", [False, True], ids=["intact", "fts5-overflowed"])
async def test_version_1_files_migrate_with_their_records(tmp_path: Path, damaged: bool) -> None:
    path = tmp_path / "v1.db"
    await _v1_file(path, damaged=damaged)
    store = SqliteMemoryStore(path, SPACE)
    hits = await store.search_text("o", "apple", limit=400)
    assert len(hits) == 300
    assert hits[0].record.id == "r000"
    assert await store.delete("o", "r000")
    assert len(await store.search_text("o", "cherry", limit=400)) == 299
    await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert not any("_fts" in n for n in names)
        owners = {r[0] for r in conn.execute("SELECT owner FROM record_versions")}
    assert "gone" not in owners  # a version row without records is dropped
    check_file(path)


# ---------------------------------------------------------------- damaged files


async def test_a_damaged_file_raises_storage_corrupted_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.db"
    store = SqliteMemoryStore(path, SPACE)
    await store.add([_record("o", f"r{i}", "apple " * 50, [1, 0, 0], "n1") for i in range(400)])
    await store.close()
    # Overwrite the records table's interior pages with garbage.
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        root = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", (f"records_{SPACE.identity}",)
        ).fetchone()[0]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    raw = bytearray(path.read_bytes())
    start = (root - 1) * page_size
    raw[start : start + page_size] = b"\xff" * page_size
    path.write_bytes(bytes(raw))

    damaged = SqliteMemoryStore(path, SPACE)
    with pytest.raises(StorageCorrupted) as caught:
        await damaged.list("o", limit=500)
    assert not isinstance(caught.value, BackendUnavailable)
    assert str(path) in str(caught.value)
    assert "backup" in caught.value.remedy
    await damaged.close()


@settings(max_examples=500, deadline=None)
@given(text=st.text())
def test_stored_terms_are_valid_json_of_the_lexical_terms(text: str) -> None:
    """The index triggers read the row's terms as JSON: for any text the stored
    array must decode to exactly `domain.lexical.tokenize(text)`."""
    encoded, count = terms_json(text)
    assert json.loads(encoded) == tokenize(text)
    assert count == len(tokenize(text))

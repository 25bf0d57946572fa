"""The database layout, versioned by `PRAGMA user_version`.

Shared tables (events, leases, cache, bookkeeping) are created once per file.
Records live in one table per `EmbeddingSpace.identity` (plus its FTS5 index
and the triggers that keep the index in sync inside the writing transaction):
the same identity reuses its table across restarts, a new identity starts with
an empty table, and old tables are kept and never adopted.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import sqlite3

from agent_memory.adapters.sqlite._tx import write_tx
from agent_memory.domain import lexical
from agent_memory.domain.errors import BackendUnavailable, DimensionMismatch
from agent_memory.domain.lexical import tokenize
from agent_memory.domain.records import EmbeddingSpace

__all__ = [
    "SCHEMA_VERSION",
    "SpaceTables",
    "ensure_schema",
    "ensure_space",
    "lexical_fingerprint",
]

SCHEMA_VERSION = 1

_V1 = (
    """CREATE TABLE spaces (
        identity TEXT PRIMARY KEY,
        model TEXT NOT NULL,
        dimension INTEGER NOT NULL,
        revision TEXT NOT NULL,
        records_table TEXT NOT NULL,
        -- which lexical rules the stored search terms follow (see lexical_fingerprint)
        lexical TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    # Bumped in every transaction that writes an owner's records, so that any
    # handle (in any process) can tell whether its cached matrix is current.
    """CREATE TABLE record_versions (
        space TEXT NOT NULL,
        owner TEXT NOT NULL,
        version INTEGER NOT NULL,
        PRIMARY KEY (space, owner)
    ) WITHOUT ROWID""",
    """CREATE TABLE events (
        seq INTEGER PRIMARY KEY,
        domain TEXT NOT NULL,
        id TEXT NOT NULL,
        occurred_at INTEGER NOT NULL,
        is_global INTEGER NOT NULL,
        user_id TEXT,
        body TEXT NOT NULL,
        UNIQUE (domain, id)
    )""",
    "CREATE INDEX events_domain_time ON events (domain, occurred_at)",
    "CREATE INDEX events_global_time ON events (occurred_at) WHERE is_global = 1",
    "CREATE INDEX events_time ON events (occurred_at)",
    "CREATE INDEX events_user ON events (user_id) WHERE user_id IS NOT NULL",
    """CREATE TABLE event_entities (
        seq INTEGER NOT NULL REFERENCES events (seq) ON DELETE CASCADE,
        type TEXT NOT NULL,
        eid TEXT NOT NULL,
        PRIMARY KEY (seq, type, eid)
    ) WITHOUT ROWID""",
    "CREATE INDEX event_entities_lookup ON event_entities (type, eid, seq)",
    """CREATE TABLE leases (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        owner TEXT NOT NULL,
        token INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        payload BLOB NOT NULL,
        PRIMARY KEY (scope, key)
    ) WITHOUT ROWID""",
    # Fencing counters outlive the leases: a token never repeats for a key.
    """CREATE TABLE lease_counters (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        token INTEGER NOT NULL,
        PRIMARY KEY (scope, key)
    ) WITHOUT ROWID""",
    """CREATE TABLE cache (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        value BLOB NOT NULL,
        expires_at INTEGER,
        PRIMARY KEY (scope, key)
    ) WITHOUT ROWID""",
    "CREATE INDEX cache_expiry ON cache (expires_at) WHERE expires_at IS NOT NULL",
)

_MIGRATIONS: dict[int, tuple[str, ...]] = {1: _V1}


def _user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Bring the file up to `SCHEMA_VERSION`; refuse a file from a newer release."""
    if _user_version(conn) == SCHEMA_VERSION:
        return
    with write_tx(conn):
        current = _user_version(conn)  # another process may have migrated meanwhile
        if current > SCHEMA_VERSION:
            raise BackendUnavailable(
                "sqlite",
                f"schema version {current} is newer than this release supports "
                f"({SCHEMA_VERSION}); upgrade agent-memory",
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[version]:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


class SpaceTables:
    """Names of one embedding space's tables (identities are `[a-z0-9_]` slugs)."""

    def __init__(self, space: EmbeddingSpace) -> None:
        ident = space.identity
        if not ident.replace("_", "").isalnum() or not ident.isascii():
            raise BackendUnavailable("sqlite", f"unusable space identity {ident!r}")
        self.identity = ident
        self.records = f"records_{ident}"
        self.fts = f"records_{ident}_fts"

    def q(self, name: str) -> str:
        """`name` as a quoted SQL identifier."""
        return '"' + name.replace('"', '""') + '"'


# The FTS5 index is an external-content table over the records' `terms` column:
# the record's content and context tokenised by `domain.lexical` (the same rule
# every backend uses), space-joined, so FTS5's `ascii` tokenizer (which splits on
# ASCII non-alphanumerics only) yields exactly those terms. The triggers keep the
# index in sync inside the transaction that writes the records.
_SPACE_DDL = (
    """CREATE TABLE IF NOT EXISTS {records} (
        pk INTEGER PRIMARY KEY,
        owner TEXT NOT NULL,
        id TEXT NOT NULL,
        namespace TEXT NOT NULL,
        kind TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        importance REAL NOT NULL,
        n_terms INTEGER NOT NULL,
        terms TEXT NOT NULL,
        attributes TEXT NOT NULL,
        content TEXT NOT NULL,
        context TEXT NOT NULL,
        -- last: a large blob spills to overflow pages, which reading any column
        -- stored after it would have to walk
        vector BLOB NOT NULL,
        UNIQUE (owner, id)
    )""",
    "CREATE INDEX IF NOT EXISTS {idx_list} ON {records} (owner, created_at, id)",
    # Covers the filter columns and the BM25 length, so that filtering and corpus
    # statistics never read the rows (whose vectors spill to overflow pages).
    "CREATE INDEX IF NOT EXISTS {idx_filter} ON {records} (owner, namespace, kind, n_terms)",
    """CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5 (
        terms, content={records_lit}, content_rowid='pk', tokenize='ascii'
    )""",
    """CREATE TRIGGER IF NOT EXISTS {trg_ai} AFTER INSERT ON {records} BEGIN
        INSERT INTO {fts} (rowid, terms) VALUES (new.pk, new.terms);
    END""",
    """CREATE TRIGGER IF NOT EXISTS {trg_ad} AFTER DELETE ON {records} BEGIN
        INSERT INTO {fts} ({fts}, rowid, terms) VALUES ('delete', old.pk, old.terms);
    END""",
    """CREATE TRIGGER IF NOT EXISTS {trg_au} AFTER UPDATE OF terms ON {records} BEGIN
        INSERT INTO {fts} ({fts}, rowid, terms) VALUES ('delete', old.pk, old.terms);
        INSERT INTO {fts} (rowid, terms) VALUES (new.pk, new.terms);
    END""",
)


def ensure_space(conn: sqlite3.Connection, space: EmbeddingSpace) -> SpaceTables:
    """Create (or find) the tables of `space` and register it."""
    tables = SpaceTables(space)
    names = {
        "records": tables.q(tables.records),
        "records_lit": "'" + tables.records + "'",
        "fts": tables.q(tables.fts),
        "idx_list": tables.q(tables.records + "_list"),
        "idx_filter": tables.q(tables.records + "_filter"),
        "trg_ai": tables.q(tables.records + "_ai"),
        "trg_ad": tables.q(tables.records + "_ad"),
        "trg_au": tables.q(tables.records + "_au"),
    }
    lexical = lexical_fingerprint()
    row = conn.execute(
        "SELECT dimension, lexical FROM spaces WHERE identity = ?", (tables.identity,)
    ).fetchone()
    if row is not None and int(row[0]) != space.dimension:
        raise DimensionMismatch(space.dimension, int(row[0]), where=tables.records)
    if row is not None and row[1] == lexical:
        return tables
    with write_tx(conn):
        for statement in _SPACE_DDL:
            conn.execute(statement.format(**names))
        conn.execute(
            "INSERT OR IGNORE INTO spaces"
            " (identity, model, dimension, revision, records_table, lexical)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                tables.identity,
                space.model,
                space.dimension,
                space.revision,
                tables.records,
                lexical,
            ),
        )
        stored = conn.execute(
            "SELECT lexical FROM spaces WHERE identity = ?", (tables.identity,)
        ).fetchone()[0]
        if stored != lexical:
            _reindex_terms(conn, tables, names["records"], lexical)
    return tables


def _reindex_terms(
    conn: sqlite3.Connection, tables: SpaceTables, records: str, lexical: str
) -> None:
    """The lexical rules changed since this table was indexed: recompute every
    record's terms (the update trigger re-indexes FTS5) and invalidate the caches
    of every handle (the owners' change counters), inside the caller's transaction."""
    rows = conn.execute(f"SELECT pk, content, context FROM {records}").fetchall()
    updates = []
    for pk, content, context in rows:
        tokens = tokenize(f"{content}\n{context}")
        updates.append((" ".join(tokens), len(tokens), pk))
    conn.executemany(f"UPDATE {records} SET terms = ?, n_terms = ? WHERE pk = ?", updates)
    conn.execute(
        "UPDATE record_versions SET version = version + 1 WHERE space = ?", (tables.identity,)
    )
    conn.execute("UPDATE spaces SET lexical = ? WHERE identity = ?", (lexical, tables.identity))


# Words that exercise stopwords, stemming, case folding, digits and non-ASCII
# letters: if the lexical rules treat any of them differently, stored terms are stale.
_PROBE = (
    "A an The and of to in is was were be been being have has had do does did doing "
    "paint paints painted painting paintings painter activities activity cities "
    "classes glasses boxes watches running stopped hopping fizzed quickly happily "
    "decide decided deciding hike hikes hiking hiked happiness movement agreement "
    "it's don't I'm we're they've he'd you'll s t d ll m re ve "
    "Ingrid Tomas NASA 2023 7pm 10 1st ÉCOLE café straße İstanbul naïve 東京 данные "
    "x_y foo-bar e.g. U.S.A. co-op re-enter"
)


@functools.cache
def lexical_fingerprint() -> str:
    """Identifies the `domain.lexical` rules the stored terms were computed with:
    the probe's terms, the stopword list and (when readable) the module source."""
    digest = hashlib.sha256("\x00".join(tokenize(_PROBE)).encode())
    digest.update(" ".join(sorted(getattr(lexical, "STOPWORDS", ()))).encode())
    with contextlib.suppress(OSError, TypeError):  # no source: probe and stopwords decide
        digest.update(inspect.getsource(lexical).encode())
    return digest.hexdigest()[:16]

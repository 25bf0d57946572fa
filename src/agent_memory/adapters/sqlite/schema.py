"""The database layout, versioned by `PRAGMA user_version`.

Shared tables (events, leases, cache, bookkeeping) are created once per file.
Records live in one table per `EmbeddingSpace.identity` (plus its keyword index,
an ordinary table of postings, and the triggers that keep the index in sync
inside the writing transaction): the same identity reuses its table across
restarts, a new identity starts with an empty table, and old tables are kept
and never adopted.

Version 2 replaced the FTS5 keyword index of version 1. FTS5 (SQLite 3.40)
appends two empty levels to its structure record on every `'optimize'`, which
version 1 ran after each delete so that deleted terms left the file; after
about a thousand deletes the structure passed FTS5's 2,000-level limit and every
statement touching the table failed with "database disk image is malformed".
Postings in a plain `WITHOUT ROWID` table are checked by `PRAGMA
integrity_check`, scrubbed on delete by `secure_delete`, and scoped by owner, so
keyword statistics never read another owner's rows.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime

from agent_memory.adapters.sqlite._tx import write_tx
from agent_memory.adapters.sqlite.codec import terms_json, to_micros
from agent_memory.domain.errors import BackendUnavailable, DimensionMismatch
from agent_memory.domain.lexical import LEXICAL_VERSION
from agent_memory.domain.records import EmbeddingSpace

__all__ = [
    "SCHEMA_VERSION",
    "SpaceTables",
    "bump_versions",
    "ensure_schema",
    "ensure_space",
]

SCHEMA_VERSION = 3

_V1 = (
    """CREATE TABLE spaces (
        identity TEXT PRIMARY KEY,
        model TEXT NOT NULL,
        dimension INTEGER NOT NULL,
        revision TEXT NOT NULL,
        records_table TEXT NOT NULL,
        -- the `domain.lexical.LEXICAL_VERSION` the stored search terms follow
        lexical TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )""",
    # Set to a fresh value of the file-wide counter (`meta.record_version`) in
    # every transaction that writes an owner's records, so that any handle (in any
    # process) can tell whether its cached matrix is current; removed when the
    # owner has no records left, so a forgotten owner's id does not stay behind.
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

# Version 2: the per-space FTS5 indexes are dropped (their spaces re-derive
# postings through `ensure_space`, forced by clearing `spaces.lexical`), and the
# record-version counter becomes file-wide.
_V2 = (
    """CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """INSERT INTO meta (key, value)
        SELECT 'record_version', coalesce(max(version), 0) FROM record_versions""",
)

# Version 3: event retention counts from ingestion (`recorded_at`), not event
# time; `_add_event_recorded_at` adds the column (filled from each stored
# event's JSON), and the purge index moves to it.
_V3 = (
    "DROP INDEX IF EXISTS events_time",
    "CREATE INDEX IF NOT EXISTS events_recorded ON events (recorded_at)",
)

_MIGRATIONS: dict[int, tuple[str, ...]] = {1: _V1, 2: _V2, 3: _V3}


def _add_event_recorded_at(conn: sqlite3.Connection) -> None:
    """Add version 3's `events.recorded_at` (microseconds) unless present, set
    from the event JSON."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(events)")}
    if "recorded_at" in columns:
        return
    conn.execute("ALTER TABLE events ADD COLUMN recorded_at INTEGER NOT NULL DEFAULT 0")
    rows = conn.execute("SELECT seq, json_extract(body, '$.recorded_at') FROM events").fetchall()
    conn.executemany(
        "UPDATE events SET recorded_at = ? WHERE seq = ?",
        [(to_micros(datetime.fromisoformat(at)), seq) for seq, at in rows],
    )


def _drop_fts(conn: sqlite3.Connection) -> None:
    """Remove version 1's FTS5 tables and triggers from every space.

    A structure record damaged by the FTS5 level growth also makes `DROP TABLE`
    fail ("vtable constructor failed"); the index is derived data, so it is
    first reset to an empty structure (cookie 0, no levels, no segments), which
    lets the drop run. The records themselves are ordinary tables and intact."""
    quote = SpaceTables.quote
    spaces = conn.execute("SELECT identity, records_table FROM spaces").fetchall()
    for identity, records in spaces:
        for suffix in ("_ai", "_ad", "_au"):
            conn.execute(f"DROP TRIGGER IF EXISTS {quote(records + suffix)}")
        # Version 1 kept terms space-joined; the version 2 triggers read JSON arrays.
        conn.execute(f"UPDATE {quote(records)} SET terms = '[]', n_terms = 0")
        # Version 1 kept the version row of an owner whose records were all deleted.
        conn.execute(
            "DELETE FROM record_versions WHERE space = ? AND NOT EXISTS"
            f" (SELECT 1 FROM {quote(records)} AS r WHERE r.owner = record_versions.owner)",
            (identity,),
        )
        fts = records + "_fts"
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (fts,)
        ).fetchone()
        if exists is None:
            continue
        conn.execute(f"UPDATE {quote(fts + '_data')} SET block = zeroblob(7) WHERE id = 10")
        conn.execute(f"DROP TABLE {quote(fts)}")
    # Re-derive every space's terms (as JSON arrays) and postings on next open.
    conn.execute("UPDATE spaces SET lexical = ''")


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
            if version == 2 and current >= 1:
                _drop_fts(conn)
            if version == 3:
                _add_event_recorded_at(conn)
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
        self.postings = f"records_{ident}_terms"

    @staticmethod
    def quote(name: str) -> str:
        """`name` as a quoted SQL identifier."""
        return '"' + name.replace('"', '""') + '"'

    def q(self, name: str) -> str:
        return self.quote(name)


# The keyword index: one row per (owner, term, record) with the term's count in
# the record. Terms are the record's content and context tokenised by
# `domain.lexical` (the rule every backend uses), stored on the record as a JSON
# array; the triggers expand that array into postings inside the transaction
# that writes the record, so the index can never disagree with the rows.
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
    """CREATE TABLE IF NOT EXISTS {postings} (
        owner TEXT NOT NULL,
        term TEXT NOT NULL,
        pk INTEGER NOT NULL,
        tf INTEGER NOT NULL,
        PRIMARY KEY (owner, term, pk)
    ) WITHOUT ROWID""",
    """CREATE TRIGGER IF NOT EXISTS {trg_ai} AFTER INSERT ON {records} BEGIN
        INSERT INTO {postings} (owner, term, pk, tf)
            SELECT new.owner, value, new.pk, count(*) FROM json_each(new.terms) GROUP BY value;
    END""",
    """CREATE TRIGGER IF NOT EXISTS {trg_ad} AFTER DELETE ON {records} BEGIN
        DELETE FROM {postings} WHERE owner = old.owner AND pk = old.pk
            AND term IN (SELECT value FROM json_each(old.terms));
    END""",
    """CREATE TRIGGER IF NOT EXISTS {trg_au} AFTER UPDATE OF owner, terms ON {records} BEGIN
        DELETE FROM {postings} WHERE owner = old.owner AND pk = old.pk
            AND term IN (SELECT value FROM json_each(old.terms));
        INSERT INTO {postings} (owner, term, pk, tf)
            SELECT new.owner, value, new.pk, count(*) FROM json_each(new.terms) GROUP BY value;
    END""",
)


def ensure_space(conn: sqlite3.Connection, space: EmbeddingSpace) -> SpaceTables:
    """Create (or find) the tables of `space` and register it."""
    tables = SpaceTables(space)
    q = tables.quote
    names = {
        "records": q(tables.records),
        "postings": q(tables.postings),
        "idx_list": q(tables.records + "_list"),
        "idx_filter": q(tables.records + "_filter"),
        "trg_ai": q(tables.records + "_ai"),
        "trg_ad": q(tables.records + "_ad"),
        "trg_au": q(tables.records + "_au"),
    }
    row = conn.execute(
        "SELECT dimension, lexical FROM spaces WHERE identity = ?", (tables.identity,)
    ).fetchone()
    if row is not None and int(row[0]) != space.dimension:
        raise DimensionMismatch(space.dimension, int(row[0]), where=tables.records)
    if row is not None and row[1] == LEXICAL_VERSION:
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
                LEXICAL_VERSION,
            ),
        )
        stored = conn.execute(
            "SELECT lexical FROM spaces WHERE identity = ?", (tables.identity,)
        ).fetchone()[0]
        if stored != LEXICAL_VERSION:
            _reindex_terms(conn, tables, names)
    return tables


def _reindex_terms(conn: sqlite3.Connection, tables: SpaceTables, names: dict[str, str]) -> None:
    """The lexical rules changed since this table was indexed (or the file comes
    from version 1): rebuild every record's terms and the postings from the rows,
    and invalidate every handle's caches, inside the caller's transaction."""
    records = names["records"]
    rows = conn.execute(f"SELECT pk, content, context FROM {records}").fetchall()
    # Empty every record's terms first (the update trigger removes their
    # postings), then set the new terms, which the trigger expands into postings.
    conn.execute(f"UPDATE {records} SET terms = '[]', n_terms = 0")
    updates = [(*terms_json(f"{content}\n{context}"), pk) for pk, content, context in rows]
    conn.executemany(f"UPDATE {records} SET terms = ?, n_terms = ? WHERE pk = ?", updates)
    bump_versions(conn, tables.identity, None)
    conn.execute(
        "UPDATE spaces SET lexical = ? WHERE identity = ?", (LEXICAL_VERSION, tables.identity)
    )


def bump_versions(conn: sqlite3.Connection, space: str, owners: list[str] | None) -> int:
    """Give `owners` (every owner of `space` when None) a fresh value of the
    file-wide record-version counter, inside the caller's write transaction;
    returns that value."""
    conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'record_version'")
    (version,) = conn.execute("SELECT value FROM meta WHERE key = 'record_version'").fetchone()
    if owners is None:
        conn.execute("UPDATE record_versions SET version = ? WHERE space = ?", (version, space))
        return int(version)
    conn.executemany(
        "INSERT INTO record_versions (space, owner, version) VALUES (?, ?, ?)"
        " ON CONFLICT (space, owner) DO UPDATE SET version = excluded.version",
        [(space, o, version) for o in owners],
    )
    return int(version)

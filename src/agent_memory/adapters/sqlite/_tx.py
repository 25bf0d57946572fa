"""Transaction helpers for connections opened in autocommit mode (isolation_level=None)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["read_tx", "write_tx"]


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


@contextmanager
def write_tx(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """`BEGIN IMMEDIATE`: take the write lock before reading, so a read-modify-write
    sequence cannot interleave with another writer; commit, or roll back on error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise


@contextmanager
def read_tx(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A deferred transaction: every read inside sees one consistent snapshot."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        _rollback(conn)

"""Record <-> Milvus row codec, primary keys, filter literals and keyword terms.

A collection holds every owner's records, so the primary key encodes the pair
`(owner, id)`: a BLAKE2b digest of a length-prefixed encoding, which keeps two
different pairs apart (the original owner and id travel in the row, and every
read checks them). Owner, namespace, kind and id are VARCHAR scalar fields that
filter expressions compare with `quote` (an escaped string literal), so no
character in them can widen a query.

Milvus keeps float32 vectors as given (not normalised), so `get` returns the
vector that was added and scores are recomputed from it exactly as the
in-process oracle computes them.

Keyword candidates: the row's `terms` field holds the record's keyword terms
(`domain.lexical.tokenize` of content + context), each hashed to a short ASCII
token, distinct, space-separated; Milvus's analyzer splits exactly these tokens
on every deployment (Milvus Lite's regex analyzer and a server's), and its BM25
index answers "which rows hold one of these terms". The ranking itself is
computed per owner from the candidates' text (see `store.search_text`).
`domain.lexical` is read at call time, so a changed `LEXICAL_VERSION` and its
tokenizer go together (the store re-derives older rows: `_migrate_terms`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from agent_memory.domain import lexical
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.records import MemoryRecord
from agent_memory.domain.time import from_micros, to_micros

__all__ = [
    "ALL_FIELDS",
    "FIELD_CONTENT",
    "FIELD_CONTEXT",
    "FIELD_CREATED",
    "FIELD_ID",
    "FIELD_KIND",
    "FIELD_NAMESPACE",
    "FIELD_OWNER",
    "FIELD_PK",
    "FIELD_SPARSE",
    "FIELD_TERMS",
    "FIELD_TERMS_COMPLETE",
    "FIELD_TOKENS",
    "FIELD_VECTOR",
    "MAX_VARCHAR_BYTES",
    "hashed_terms",
    "primary_key",
    "quote",
    "record_from_row",
    "record_to_row",
    "rows",
]

FIELD_PK = "pk"
FIELD_OWNER = "owner"
FIELD_ID = "record_id"
FIELD_NAMESPACE = "namespace"
FIELD_KIND = "kind"
FIELD_CONTENT = "content"
FIELD_CONTEXT = "context"
FIELD_CREATED = "created_us"
FIELD_UPDATED = "updated_us"
FIELD_IMPORTANCE = "importance"
FIELD_ATTRIBUTES = "attributes_json"
FIELD_TOKENS = "token_count"
FIELD_TERMS = "terms"
FIELD_TERMS_COMPLETE = "terms_complete"
FIELD_SPARSE = "terms_sparse"
FIELD_VECTOR = "vector"

#: Every field a record is rebuilt from (the BM25 output field is not readable).
ALL_FIELDS = [
    FIELD_OWNER,
    FIELD_ID,
    FIELD_NAMESPACE,
    FIELD_KIND,
    FIELD_CONTENT,
    FIELD_CONTEXT,
    FIELD_CREATED,
    FIELD_UPDATED,
    FIELD_IMPORTANCE,
    FIELD_ATTRIBUTES,
    FIELD_VECTOR,
]

#: Milvus's largest VARCHAR, in bytes of UTF-8: the bound on each text field.
MAX_VARCHAR_BYTES = 65_535
_PK_BYTES = 20
_TERM_BYTES = 4


def primary_key(owner: str, record_id: str) -> str:
    """The row key of `(owner, id)`: 40 hex digits of BLAKE2b over
    `"<len(owner)>:<owner><id>"` (length-prefixed, so pairs never run together)."""
    raw = f"{len(owner)}:{owner}{record_id}".encode()
    return hashlib.blake2b(raw, digest_size=_PK_BYTES, person=b"am-milvus-pk").hexdigest()


def quote(value: str) -> str:
    """`value` as a double-quoted Milvus filter literal: backslash, quotes and line
    breaks escaped, so the literal always means exactly `value`."""
    escaped = (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f'"{escaped}"'


def _hash_term(term: str) -> str:
    digest = hashlib.blake2b(term.encode(), digest_size=_TERM_BYTES, person=b"am-milvus-kw")
    return f"t{digest.hexdigest()}"


def hashed_terms(terms: Sequence[str]) -> list[str]:
    """The distinct hashed tokens of `terms`, in first-seen order."""
    return list(dict.fromkeys(_hash_term(t) for t in terms))


def _terms_field(tokens: Sequence[str]) -> tuple[str, bool]:
    """(the `terms` text, whether it holds every term) within the VARCHAR bound.
    A row whose terms do not fit is marked incomplete, and keyword search always
    reads such rows of the owner as candidates."""
    hashed = hashed_terms(tokens)
    fit = MAX_VARCHAR_BYTES // 10  # each token is 9 ASCII bytes plus a space
    return " ".join(hashed[:fit]), len(hashed) <= fit


def _bounded(value: str, field: str) -> str:
    if len(value) * 4 > MAX_VARCHAR_BYTES and len(value.encode()) > MAX_VARCHAR_BYTES:
        raise InvalidInput(
            field, f"at most {MAX_VARCHAR_BYTES} bytes of UTF-8 fit a Milvus VARCHAR field"
        )
    return value


def record_to_row(record: MemoryRecord) -> dict[str, Any]:
    """The row of one record (see `rows`)."""
    return rows([record], np.stack([record.vector]))[0]


def rows(records: Sequence[MemoryRecord], matrix: npt.NDArray[np.float32]) -> list[dict[str, Any]]:
    """The rows of `records`; `matrix` stacks their vectors (converted in one go).
    Raises `InvalidInput` naming the field when a text does not fit a VARCHAR."""
    vectors = np.asarray(matrix, dtype=np.float32).tolist()
    out: list[dict[str, Any]] = []
    for record, vector in zip(records, vectors, strict=True):
        created_us = to_micros(record.created_at)
        tokens = lexical.tokenize(f"{record.content}\n{record.context}")
        terms, complete = _terms_field(tokens)
        attributes = json.dumps(record.attributes) if record.attributes else "{}"
        out.append(
            {
                FIELD_PK: primary_key(record.owner, record.id),
                FIELD_OWNER: _bounded(record.owner, "record.owner"),
                FIELD_ID: _bounded(record.id, "record.id"),
                FIELD_NAMESPACE: _bounded(record.namespace, "record.namespace"),
                FIELD_KIND: _bounded(record.kind, "record.kind"),
                FIELD_CONTENT: _bounded(record.content, "record.content"),
                FIELD_CONTEXT: _bounded(record.context, "record.context"),
                FIELD_CREATED: created_us,
                FIELD_UPDATED: to_micros(record.updated_at),
                FIELD_IMPORTANCE: float(record.importance),
                FIELD_ATTRIBUTES: _bounded(attributes, "record.attributes"),
                FIELD_TOKENS: len(tokens),
                FIELD_TERMS: terms,
                FIELD_TERMS_COMPLETE: complete,
                FIELD_VECTOR: vector,
            }
        )
    return out


def record_from_row(row: dict[str, Any]) -> MemoryRecord:
    return MemoryRecord(
        id=row[FIELD_ID],
        owner=row[FIELD_OWNER],
        namespace=row[FIELD_NAMESPACE],
        kind=row[FIELD_KIND],
        content=row[FIELD_CONTENT],
        vector=np.asarray(row[FIELD_VECTOR], dtype=np.float32),
        created_at=from_micros(int(row[FIELD_CREATED])),
        updated_at=from_micros(int(row[FIELD_UPDATED])),
        importance=float(row[FIELD_IMPORTANCE]),
        attributes=json.loads(row[FIELD_ATTRIBUTES]),
        context=row[FIELD_CONTEXT],
    )

"""The argument checks a storage backend makes, in one import for adapter
authors (docs/writing-a-backend.md, "The argument checks").

Every built-in adapter rejects bad input with these very functions, so a
backend that calls them raises the same typed errors (`InvalidInput`,
`ScopeRequired`, `DimensionMismatch`, `DuplicateRecord`), naming the same
field, before any I/O, as the contract suite expects (the `*-INPUT-*`,
`*-SCOPE-*`, `MS-DIM-*` and `*-BOUND-*` clauses). Needs only the base install.

- bounds: `MAX_ID_BYTES`, `MAX_LIMIT`, `MAX_TTL`, `MAX_QUERY_BYTES`,
  `MAX_QUERY_WORD_BYTES`, `MAX_JSON_DEPTH`, `MAX_JSON_VALUES`, `MAX_VALUE_BYTES`;
- one value: `require_scope` (owner, namespace, domain, lease/cache scope:
  `ScopeRequired` when blank), `require_id`, `require_no_nul`, `require_text`,
  `require_utc`, `require_limit`, `require_ttl`, `require_positive`,
  `require_dimension`, `as_vector`;
- one operation's arguments, checked in the order every backend checks them:
  `check_records`/`check_record`, `check_no_duplicates`, `check_filters`,
  `check_search_args`, `check_query_vector`, `check_min_score`,
  `check_search_text_args`, `check_query`, `check_list_args`, `check_events`,
  `check_window_args`, `check_retention`, `check_lease_args`,
  `check_lease_payload`, `check_prefix`, `check_cache_value`, `check_cache_ttl`,
  `check_space`.

This module only re-exports (`agent_memory.domain.validation`,
`agent_memory.domain.records.require_dimension`,
`agent_memory.adapters._common.validation`); the functions are the same objects.
"""

from agent_memory.adapters._common.validation import (
    check_cache_ttl,
    check_cache_value,
    check_events,
    check_filters,
    check_lease_args,
    check_lease_payload,
    check_list_args,
    check_min_score,
    check_no_duplicates,
    check_prefix,
    check_query,
    check_query_vector,
    check_record,
    check_records,
    check_retention,
    check_search_args,
    check_search_text_args,
    check_space,
    check_window_args,
)
from agent_memory.domain.errors import (
    DimensionMismatch,
    DuplicateRecord,
    InvalidInput,
    ScopeRequired,
)
from agent_memory.domain.records import require_dimension
from agent_memory.domain.validation import (
    MAX_ID_BYTES,
    MAX_JSON_DEPTH,
    MAX_JSON_VALUES,
    MAX_LIMIT,
    MAX_QUERY_BYTES,
    MAX_QUERY_WORD_BYTES,
    MAX_TTL,
    MAX_VALUE_BYTES,
    as_vector,
    require_id,
    require_limit,
    require_no_nul,
    require_positive,
    require_scope,
    require_text,
    require_ttl,
    require_utc,
)

__all__ = [
    "MAX_ID_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_JSON_VALUES",
    "MAX_LIMIT",
    "MAX_QUERY_BYTES",
    "MAX_QUERY_WORD_BYTES",
    "MAX_TTL",
    "MAX_VALUE_BYTES",
    "DimensionMismatch",
    "DuplicateRecord",
    "InvalidInput",
    "ScopeRequired",
    "as_vector",
    "check_cache_ttl",
    "check_cache_value",
    "check_events",
    "check_filters",
    "check_lease_args",
    "check_lease_payload",
    "check_list_args",
    "check_min_score",
    "check_no_duplicates",
    "check_prefix",
    "check_query",
    "check_query_vector",
    "check_record",
    "check_records",
    "check_retention",
    "check_search_args",
    "check_search_text_args",
    "check_space",
    "check_window_args",
    "require_dimension",
    "require_id",
    "require_limit",
    "require_no_nul",
    "require_positive",
    "require_scope",
    "require_text",
    "require_ttl",
    "require_utc",
]

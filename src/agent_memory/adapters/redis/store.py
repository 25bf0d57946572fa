"""`MemoryStore` (+ `KeywordSearch`) on Redis: a hash per record and one Search index.

The index (named after the embedding space identity) holds TAG fields with
hex digests of owner, namespace and kind (digests: a TAG value would otherwise
be split on its separator, folded to lower case, and need escaping), NUMERIC
created_at, a sortable list key, TEXT content + context for BM25, and a
VECTOR HNSW COSINE FLOAT32 field. Every query carries the owner filter inside
it (`(@oh:{...} ...)=>[KNN k @vec $v AS score]`), so no other owner's record
can ever be a candidate.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from redis.exceptions import ClusterError, NoScriptError, ResponseError, TryAgainError

from agent_memory.adapters._common.index_options import IndexOptions
from agent_memory.adapters._common.validation import (
    check_filters,
    check_list_args,
    check_record,
    check_records,
    check_search_args,
    check_search_text_args,
)
from agent_memory.adapters.redis._client import Client, connect, is_cluster
from agent_memory.adapters.redis._cluster import (
    IndexNames,
    SlotMigrating,
    keys_migrated_in,
    migrating_slots,
    primaries,
    primary_for,
    run_on,
    slot_layout,
    slot_migration,
)
from agent_memory.adapters.redis._codec import (
    RECORD_FIELDS,
    decode_record,
    decode_record_values,
    encode_record,
    record_terms,
    scored,
    sort_key,
    to_micros,
)
from agent_memory.adapters.redis._errors import (
    BACKEND,
    SEARCH_HINT,
    is_missing_index,
    is_unknown_command,
    translate,
)
from agent_memory.adapters.redis._handle import RedisHandle, SharedClient
from agent_memory.adapters.redis._keys import digest
from agent_memory.domain import lexical
from agent_memory.domain.errors import (
    ConfigurationError,
    DuplicateRecord,
    NotFound,
    SearchModuleMissing,
)
from agent_memory.domain.lexical import bm25_scores, query_terms
from agent_memory.domain.ranking import encode_cursor
from agent_memory.domain.records import (
    EmbeddingSpace,
    MemoryRecord,
    Page,
    ScoredRecord,
    require_dimension,
)
from agent_memory.domain.validation import (
    as_vector,
    require_id,
    require_scope,
    require_utc,
    require_vector_norm,
)

__all__ = [
    "DEFAULT_EF_CONSTRUCTION",
    "DEFAULT_EF_RUNTIME",
    "DEFAULT_EXACT_THRESHOLD",
    "DEFAULT_M",
    "RedisMemoryStore",
]

# HNSW defaults (docs/redis.md, "Vector index": measured recall and latency).
# M and EF_CONSTRUCTION shape an index when it is created; EF_RUNTIME applies to
# every query. An owner with at most DEFAULT_EXACT_THRESHOLD records is ranked by
# brute force over its own records (HYBRID_POLICY ADHOC_BF: exact).
DEFAULT_M = 16
DEFAULT_EF_CONSTRUCTION = 200
DEFAULT_EF_RUNTIME = 200
DEFAULT_EXACT_THRESHOLD = 100_000

# Keyword statistics: one hash per owner (`KeySchema.ms_stats`), in the slot of the
# owner's records, with `n<cell>` (records) and `l<cell>` (their total length in
# terms) per cell `<H(namespace)[:16]><H(kind)[:16]>` (64 bits of each digest keep
# field names short enough for the compact listpack encoding), and `v`, a version
# that every write of the owner changes. The scripts below keep it in step with
# the records.
_STATS_LUA = """
local function bump(key)
  if redis.call('HINCRBY', key, 'v', 1) == 1 then
    -- A new hash starts at the server's time in microseconds, so a version is never
    -- seen again after the hash was deleted (its owner forgotten) and recreated.
    local t = redis.call('TIME')
    redis.call('HSET', key, 'v', t[1] .. string.format('%06d', tonumber(t[2])))
  end
end
local function gone(key, cell, count, len)
  if redis.call('HINCRBY', key, 'n' .. cell, -count) <= 0 then
    redis.call('HDEL', key, 'n' .. cell, 'l' .. cell)
  else
    redis.call('HINCRBY', key, 'l' .. cell, -len)
  end
end
local function stored(key)
  local f = redis.call('HMGET', key, 'nh', 'kh', 'terms')
  if not f[1] then return nil, 0 end
  local _, len = string.gsub(f[3] or '', '%S+', '')
  return string.sub(f[1], 1, 16) .. string.sub(f[2] or '', 1, 16), len
end
"""

# On a cluster, `_MOVING_LUA` opens the scripts running Search commands (the `_C`
# variants below and `_TERM_COUNTS_C`): a key of the owner's slot that never exists,
# looked up on the node running the script, fails there only while that slot is
# being migrated away (the node would answer ASK for it): then the script answers
# the error `AMSLOTMOVING` before reading anything, since this node's index holds
# only part of the owner's records (`RedisMemoryStore._cluster_moving`). Run with
# no KEYS (on the source and on the target of a migration, one after the other)
# a script skips the check.
_MOVING_LUA = """
if #KEYS > 0 then
  local probe = redis.pcall('EXISTS', KEYS[1] .. ':~')
  if type(probe) == 'table' and probe.err then
    return redis.error_reply('AMSLOTMOVING ' .. probe.err)
  end
end
"""

# KEYS: the m record keys, then the owners' stats keys. ARGV: m, then per record
# (field count, fields...), then per (stats key, cell): key index, cell, count, length.
_ADD = (
    _STATS_LUA
    + """
local m = tonumber(ARGV[1])
local dupes = {}
for i = 1, m do
  if redis.call('EXISTS', KEYS[i]) == 1 then dupes[#dupes + 1] = i end
end
if #dupes > 0 then return dupes end
local pos = 2
for i = 1, m do
  local n = tonumber(ARGV[pos])
  redis.call('HSET', KEYS[i], unpack(ARGV, pos + 1, pos + n))
  pos = pos + n + 1
end
while pos <= #ARGV do
  local key = KEYS[tonumber(ARGV[pos])]
  redis.call('HINCRBY', key, 'n' .. ARGV[pos + 1], ARGV[pos + 2])
  redis.call('HINCRBY', key, 'l' .. ARGV[pos + 1], ARGV[pos + 3])
  pos = pos + 4
end
for i = m + 1, #KEYS do bump(KEYS[i]) end
return {}
"""
)

# Replaces the record KEYS[1] (statistics KEYS[2]) with the fields from
# ARGV[first + 2] on, its new cell and length in ARGV[first] and ARGV[first + 1];
# 0 when there is no such record.
_REPLACE_LUA = """
local function replace(first)
  local cell, len = stored(KEYS[1])
  if not cell then return 0 end
  gone(KEYS[2], cell, 1, len)
  redis.call('HSET', KEYS[1], unpack(ARGV, first + 2))
  redis.call('HINCRBY', KEYS[2], 'n' .. ARGV[first], 1)
  redis.call('HINCRBY', KEYS[2], 'l' .. ARGV[first], ARGV[first + 1])
  bump(KEYS[2])
  return 1
end
"""

# KEYS: record, stats. ARGV: new cell, new length, fields...
_UPDATE = _STATS_LUA + _REPLACE_LUA + "return replace(1)\n"

# Versions (`ua`, updated_at in microseconds, a decimal integer without leading
# zeros) compared exactly as strings: sign, then length, then digits (a Lua
# number would round those past 2^53, years after 2255).
_VERSION_LUA = """
local function older(a, b)
  if a == b then return false end
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then return na end
  local x, y = na and string.sub(a, 2) or a, na and string.sub(b, 2) or b
  local shorter = #x < #y or (#x == #y and x < y)  -- |a| < |b|
  if na then return not shorter end
  return shorter
end
"""

# KEYS: record, stats. ARGV: the new version, new cell, new length, fields... The
# record is replaced only when its stored version is older; returns 1 when it was.
_UPDATE_IF_OLDER = (
    _STATS_LUA
    + _REPLACE_LUA
    + _VERSION_LUA
    + """
local ua = redis.call('HGET', KEYS[1], 'ua')
if not ua or not older(ua, ARGV[1]) then return 0 end
return replace(2)
"""
)

_DELETE_BODY = """
local cells, count = {}, 0
for i = 2, #KEYS do
  local cell, len = stored(KEYS[i])
  if cell then
    redis.call('DEL', KEYS[i])
    local c = cells[cell]
    if not c then c = {0, 0}; cells[cell] = c end
    c[1] = c[1] + 1
    c[2] = c[2] + len
    count = count + 1
  end
end
if count > 0 then
  for cell, c in pairs(cells) do gone(KEYS[1], cell, c[1], c[2]) end
  bump(KEYS[1])
  -- Only the version left: the owner has no records; leave no trace of it.
  if redis.call('HLEN', KEYS[1]) <= 1 then redis.call('DEL', KEYS[1]) end
end
return count
"""

# KEYS: stats, then records of that owner. Deletes those that exist; returns the count.
_DELETE = _STATS_LUA + _DELETE_BODY

# KEYS: stats, record. ARGV: a version. Deletes the record only when it is that
# version; returns 1 when it did.
_DELETE_IF_UNCHANGED = (
    _STATS_LUA
    + """
if redis.call('HGET', KEYS[2], 'ua') ~= ARGV[1] then return 0 end
"""
    + _DELETE_BODY
)

# KEYS: the owner's statistics. ARGV: index, query, mode, LOAD arguments. The
# owner's statistics and every candidate, read in one atomic step. Mode "ids": the
# candidates' ids and terms as two NUL-joined strings (no stored value holds a
# NUL), which a client parses far faster than one reply row per candidate; mode
# "rows": the engine's rows as they are.
_CANDIDATES = """
local res = redis.call('FT.AGGREGATE', ARGV[1], ARGV[2], 'VERBATIM',
  unpack(ARGV, 4, #ARGV))
local stats = redis.call('HGETALL', KEYS[1])
if ARGV[3] == 'rows' then return {stats, res} end
local ids, terms = {}, {}
for i = 2, #res do
  local row, id, t = res[i], nil, ''
  for j = 1, #row - 1, 2 do
    if row[j] == 'id' then id = row[j + 1] elseif row[j] == 'terms' then t = row[j + 1] end
  end
  if id then
    ids[#ids + 1] = id
    terms[#terms + 1] = t
  end
end
return {stats, table.concat(ids, '\\0'), table.concat(terms, '\\0')}
"""

# Keyword search by groups (`RedisMemoryStore._text_by_groups`). Every script's
# ARGV starts with the index (on a cluster, the one on the owner's primary) and
# KEYS[1] is the owner's statistics (on a cluster, the slot of the owner's records).

# ARGV: index, then one query per query term (the filter and that term). The
# owner's statistics and, per term, how many of the owner's filtered records hold
# it (the engine's count: `LIMIT 0 0` reads no document), space-joined; one atomic
# step.
_TERM_COUNTS = """
local stats = redis.call('HGETALL', KEYS[1])
local counts = {}
for i = 2, #ARGV do
  local res = redis.call('FT.SEARCH', ARGV[1], ARGV[i], 'VERBATIM', 'NOCONTENT',
    'LIMIT', '0', '0', 'TIMEOUT', '0', 'DIALECT', '2')
  counts[#counts + 1] = tostring(res[1])
end
return {stats, table.concat(counts, ' ')}
"""

_TERM_COUNTS_C = _MOVING_LUA + _TERM_COUNTS

# The head of both grouping scripts. ARGV: index, the version the term counts were
# read at ("" for none), the candidates' query, a query whose matches to count (""
# for none), at least the number of candidates (their terms' counts summed: the
# page size of a sorted FT.SEARCH, whose engine holds that many rows). Nil when the
# version moved; `union` is that count (-1 for none).
_GROUPS_HEAD = """
if (redis.call('HGET', KEYS[1], 'v') or '') ~= ARGV[2] then return false end
local union = -1
if ARGV[4] ~= '' then
  union = redis.call('FT.SEARCH', ARGV[1], ARGV[4], 'VERBATIM', 'NOCONTENT',
    'LIMIT', '0', '0', 'TIMEOUT', '0', 'DIALECT', '2')[1]
end
local terms, counts = {}, {}
"""

# The candidates (the records ARGV[3] matches) grouped by their stored terms (the
# engine's GROUPBY: records with equal terms score equally): {the distinct terms
# strings NUL-joined, their record counts space-joined, `union`}.
# Far fewer rows than one per candidate when texts repeat, and no candidate's row
# reaches the script.
_GROUPS = (
    _GROUPS_HEAD
    + """
local res = redis.call('FT.AGGREGATE', ARGV[1], ARGV[3], 'VERBATIM', 'LOAD', '1', '@terms',
  'GROUPBY', '1', '@terms', 'REDUCE', 'COUNT', '0', 'AS', 'n', 'TIMEOUT', '0', 'DIALECT', '2')
for i = 2, #res do
  local row, t, n = res[i], nil, nil
  for j = 1, #row - 1, 2 do
    if row[j] == 'terms' then t = row[j + 1] elseif row[j] == 'n' then n = row[j + 1] end
  end
  if t and n then
    terms[#terms + 1] = t
    counts[#counts + 1] = n
  end
end
return {table.concat(terms, '\\0'), table.concat(counts, ' '), union}
"""
)

# `_GROUPS` on a cluster node. There FT.AGGREGATE returns no rows when the query is
# VERBATIM (and loads no document field): without it (no difference for the
# NOSTEM `terms`, the only TEXT field) the engine groups on the sortable `terms`.
# The reply 'unsorted' when a row came without its terms (an index of an earlier
# release, where `terms` is not sortable).
_GROUPS_C = (
    _MOVING_LUA
    + _GROUPS_HEAD
    + """
local res = redis.call('FT.AGGREGATE', ARGV[1], ARGV[3], 'LOAD', '1', '@terms',
  'GROUPBY', '1', '@terms', 'REDUCE', 'COUNT', '0', 'AS', 'n', 'TIMEOUT', '0', 'DIALECT', '2')
for i = 2, #res do
  local row, t, n = res[i], nil, nil
  if type(row) == 'table' then
    for j = 1, #row - 1, 2 do
      if row[j] == 'terms' then t = row[j + 1] elseif row[j] == 'n' then n = row[j + 1] end
    end
  end
  if type(t) ~= 'string' or not n then return 'unsorted' end
  terms[#terms + 1] = t
  counts[#counts + 1] = n
end
return {table.concat(terms, '\\0'), table.concat(counts, ' '), union}
"""
)

# The head of both group-fetching scripts. ARGV: index, the version the groups were
# ranked with ("" for none), limit, n, n record fields, then per group (best first)
# its rank (equal for equal scores), its query (records holding all its terms), its
# FILTER expression, its terms string and at least its record count (the fewest
# records holding one of its query terms: a sorted FT.SEARCH's page size).
# `add(rank, id, key, group)` collects a record; `finish()` replies, per record of
# the best `limit` by rank and then id (byte order), its group's position (1-based)
# and its fields. Nil when the version moved.
_FETCH_HEAD = """
if (redis.call('HGET', KEYS[1], 'v') or '') ~= ARGV[2] then return false end
local limit, nf = tonumber(ARGV[3]), tonumber(ARGV[4])
local fields = {unpack(ARGV, 5, 4 + nf)}
local first = 5 + nf
local hits = {}
local function add(rank, id, key, group) hits[#hits + 1] = {rank, id, key, group} end
local function before(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  local x, y = a[2], b[2]
  for i = 1, math.min(#x, #y) do
    local p, q = string.byte(x, i), string.byte(y, i)
    if p ~= q then return p < q end
  end
  return #x < #y
end
local function finish()
  table.sort(hits, before)
  local out = {}
  for h = 1, math.min(limit, #hits) do
    out[#out + 1] = tostring(hits[h][4])
    out[#out + 1] = redis.call('HMGET', hits[h][3], unpack(fields))
  end
  return out
end
"""

# Per group, the smallest `limit` ids of its records (terms equal to the group's;
# the intersection query keeps it to near-duplicates) with their keys, by the
# engine; then `finish()`.
_GROUP_FETCH = (
    _FETCH_HEAD
    + """
local group = 0
for i = first, #ARGV - 4, 5 do
  group = group + 1
  local rank = tonumber(ARGV[i])
  local res = redis.call('FT.AGGREGATE', ARGV[1], ARGV[i + 1], 'VERBATIM', 'LOAD', '3',
    '@terms', '@id', '@__key', 'FILTER', ARGV[i + 2], 'SORTBY', '2', '@id', 'ASC',
    'MAX', ARGV[3], 'TIMEOUT', '0', 'DIALECT', '2')
  for r = 2, #res do
    local row, id, key = res[r], nil, nil
    for j = 1, #row - 1, 2 do
      if row[j] == 'id' then id = row[j + 1] elseif row[j] == '__key' then key = row[j + 1] end
    end
    if id and key then add(rank, id, key, group) end
  end
end
return finish()
"""
)

# `_GROUP_FETCH` on a cluster node, whose FT.AGGREGATE loads no `id` nor key: per
# group, the keys FT.SEARCH finds whose sort key (`$` and the sortable `terms`,
# returned without a document read) is the group's terms, their ids by HGET; then
# `finish()`.
_GROUP_FETCH_C = (
    _MOVING_LUA
    + _FETCH_HEAD
    + """
local group = 0
for i = first, #ARGV - 4, 5 do
  group = group + 1
  local rank, want = tonumber(ARGV[i]), '$' .. ARGV[i + 3]
  local res = redis.call('FT.SEARCH', ARGV[1], ARGV[i + 1], 'VERBATIM', 'NOCONTENT',
    'WITHSORTKEYS', 'SORTBY', 'terms', 'ASC', 'LIMIT', '0', ARGV[i + 4], 'TIMEOUT', '0',
    'DIALECT', '2')
  for r = 2, #res - 1, 2 do
    if res[r + 1] == want then
      local id = redis.call('HGET', res[r], 'id')
      if id then add(rank, id, res[r], group) end
    end
  end
end
return finish()
"""
)

# KEYS: the owner's statistics, then records. ARGV: the version the records were
# ranked with ("" for none), then the fields to read. Nil when the version moved.
_FETCH = """
if (redis.call('HGET', KEYS[1], 'v') or '') ~= ARGV[1] then return false end
local out = {}
for i = 2, #KEYS do out[i - 1] = redis.call('HMGET', KEYS[i], unpack(ARGV, 2, #ARGV)) end
return out
"""

# KEYS: the owner's statistics. ARGV: exact threshold, index, exact query, HNSW
# query, then the other FT.SEARCH arguments. The exact query when the owner holds
# at most the threshold of records (the sum of its statistics' `n` cells), and
# without KEYS (a cluster slot being migrated, `_cluster_moving`).
_CHOOSE_QUERY_LUA = """
local function choose_query()
  if #KEYS == 0 then return ARGV[3] end
  local count = 0
  local f = redis.call('HGETALL', KEYS[1])
  for i = 1, #f - 1, 2 do
    if string.sub(f[i], 1, 1) == 'n' then count = count + tonumber(f[i + 1]) end
  end
  if count <= tonumber(ARGV[1]) then return ARGV[3] end
  return ARGV[4]
end
"""

# The reply of both KNN scripts, built from the engine's rows (distance ascending):
# one flat list, per row its distance, then "s" (score only: it ranks below `keep`
# records already in the reply, so it is never returned; its distance is what the
# tie check at the cut needs) or "0" followed by the `RECORD_FIELDS` values. No
# field names and no keys: about half the reply elements of FT.SEARCH's own reply,
# which is what the client spends its time parsing. Scores are clipped as the
# client clips them (`_knn_rows`), so a row tied with the `keep`-th after clipping
# is sent in full. (The engine returns no zero vectors: they have no cosine.)
_KNN_ROWS_LUA = (
    "local FIELDS = {"
    + ", ".join(f"'{name}'" for name in RECORD_FIELDS)
    + """}
local function clipped(d)
  local s = 1 - tonumber(d)
  if s > 1 then return 1 elseif s < -1 then return -1 end
  return s
end
local function knn_search(returned)
  local args = {ARGV[2], choose_query(), 'PARAMS', '2', 'v', ARGV[7]}
  for _, a in ipairs(returned) do args[#args + 1] = a end
  for _, a in ipairs({'SORTBY', '__d', 'ASC', 'LIMIT', '0', ARGV[6], 'DIALECT', '2',
      'TIMEOUT', '0'}) do
    args[#args + 1] = a
  end
  return redis.call('FT.SEARCH', unpack(args))
end
-- The reply from FT.SEARCH's rows; `row_of(key, row)` gives a row's distance and
-- a function returning its `FIELDS` values (called only for rows sent in full).
local function knn_reply(res, row_of)
  local out, n, full, keep, cut = {}, 0, 0, tonumber(ARGV[5]), nil
  for i = 2, #res, 2 do
    local d, values = row_of(res[i], res[i + 1])
    local s = clipped(d)
    n = n + 1
    out[n] = d
    n = n + 1
    if full < keep or s == cut then
      out[n] = '0'
      local v = values()
      for j = 1, #FIELDS do
        n = n + 1
        out[n] = v[j]
      end
      full = full + 1
      if full == keep then cut = s end
    else
      out[n] = 's'
    end
  end
  return out
end
"""
)

# KEYS: the owner's statistics. ARGV: exact threshold, index, exact query, HNSW
# query (each `... AS __d`), keep, k, the query vector. The `_KNN_ROWS_LUA` reply.
# Rows are read by position (`__d`, then the RETURN fields in order, as the module
# returns them); a row of another shape is read by name.
_KNN = (
    _CHOOSE_QUERY_LUA
    + _KNN_ROWS_LUA
    + """
local returned = {'RETURN', tostring(#FIELDS + 1), '__d'}
for _, f in ipairs(FIELDS) do returned[#returned + 1] = f end
local last = 2 * #FIELDS + 2
return knn_reply(knn_search(returned), function(_, row)
  if #row ~= last or row[1] ~= '__d' or row[3] ~= FIELDS[1] then
    local m = {}
    for j = 1, #row - 1, 2 do m[row[j]] = row[j + 1] end
    row = {'__d', m['__d']}
    for _, f in ipairs(FIELDS) do
      row[#row + 1] = f
      row[#row + 1] = m[f] or false
    end
  end
  return row[2], function()
    local v = {}
    for j = 4, last, 2 do v[#v + 1] = row[j] end
    return v
  end
end)
"""
)
# -- Cluster variants. On a cluster node this Search build returns the ids of
# matching documents (and sortable or computed fields such as `sk` and `__d`) but
# not the documents' other fields, so these scripts read those fields with HMGET
# on the same node, in the same atomic step. All of one owner's records share the
# slot of KEYS[1] (the owner's statistics), which routes the script to the primary
# holding them and the owner's index (`_cluster.IndexNames`). Each starts with
# `_MOVING_LUA` (above).
_LOAD_LUA = """
local function load(key, fields, row)
  if #fields == 0 then return row end
  local vals = redis.call('HMGET', key, unpack(fields))
  for i = 1, #fields do
    row[#row + 1] = fields[i]
    row[#row + 1] = vals[i]
  end
  return row
end
local function filled(res, fields, content)
  local out = {res[1]}
  local step = 1
  if content then step = 2 end
  for i = 2, #res, step do
    local row = {}
    if content and res[i + 1] then
      for _, v in ipairs(res[i + 1]) do row[#row + 1] = v end
    end
    out[#out + 1] = res[i]
    out[#out + 1] = load(res[i], fields, row)
  end
  return out
end
"""

# KEYS: the owner's statistics (routing). ARGV: n, n fields to load, content flag
# ("1": rows carry RETURN fields; "0": NOCONTENT), then FT.SEARCH's arguments.
# Returns FT.SEARCH's RETURN shape, each row followed by the loaded fields.
_SEARCH_C = (
    _MOVING_LUA
    + _LOAD_LUA
    + """
local n = tonumber(ARGV[1])
local fields = {unpack(ARGV, 2, n + 1)}
local res = redis.call('FT.SEARCH', unpack(ARGV, n + 3, #ARGV))
return filled(res, fields, ARGV[n + 2] == '1')
"""
)

# `_KNN` on a cluster node (the same ARGV and reply; ARGV[2] is the index on this
# primary): the engine returns each hit's key and distance, the script reads the
# fields of the rows sent in full.
_KNN_C = (
    _MOVING_LUA
    + _CHOOSE_QUERY_LUA
    + _KNN_ROWS_LUA
    + """
return knn_reply(knn_search({'RETURN', '1', '__d'}), function(key, row)
  local d = nil
  for j = 1, #row - 1, 2 do if row[j] == '__d' then d = row[j + 1] end end
  return d, function() return redis.call('HMGET', key, unpack(FIELDS)) end
end)
"""
)

# `_CANDIDATES` on a cluster node: the candidates' keys by FT.SEARCH NOCONTENT,
# their fields by HMGET. ARGV: the statistics' key, index, query, mode, fields to
# load. Mode "rows": {stats, {count, row, ...}} (rows are [name, value, ...] in the
# fields' order). Without KEYS (during a migration) the statistics are read when
# this node holds them, else empty.
_CANDIDATES_C = (
    _MOVING_LUA
    + _LOAD_LUA
    + """
local res = redis.call('FT.SEARCH', ARGV[2], ARGV[3], 'NOCONTENT',
  'LIMIT', '0', '1000000', 'TIMEOUT', '0', 'DIALECT', '2')
local stats
if #KEYS > 0 then
  stats = redis.call('HGETALL', KEYS[1])
else
  stats = redis.pcall('HGETALL', ARGV[1])
  if stats.err then stats = {} end
end
if ARGV[4] == 'rows' then
  local fields = {unpack(ARGV, 5, #ARGV)}
  local rows = {res[1]}
  for i = 2, #res do rows[#rows + 1] = load(res[i], fields, {}) end
  return {stats, rows}
end
local ids, terms = {}, {}
for i = 2, #res do
  local v = redis.call('HMGET', res[i], 'id', 'terms')
  ids[#ids + 1] = v[1]
  terms[#terms + 1] = v[2] or ''
end
return {stats, table.concat(ids, '\\0'), table.concat(terms, '\\0')}
"""
)

# Re-deriving stored terms after `domain.lexical.LEXICAL_VERSION` changed. KEYS: the
# owner's statistics, then records of that owner. ARGV: per record, the content and
# context its new terms were derived from, then those terms. A record gets them only
# if its content and context are still those (a write in between already stored
# terms of the current rules, or deleted it); the length of its cell moves by the
# difference, so running it twice (a rebuild resumed) changes nothing more.
_RETERM = (
    _STATS_LUA
    + """
local changed = 0
for i = 2, #KEYS do
  local at = (i - 2) * 3
  local f = redis.call('HMGET', KEYS[i], 'content', 'context', 'terms')
  if f[1] == ARGV[at + 1] and (f[2] or '') == ARGV[at + 2] and f[3] ~= ARGV[at + 3] then
    local cell, old = stored(KEYS[i])
    local _, new = string.gsub(ARGV[at + 3], '%S+', '')
    redis.call('HSET', KEYS[i], 'terms', ARGV[at + 3])
    if redis.call('HEXISTS', KEYS[1], 'n' .. cell) == 1 then
      redis.call('HINCRBY', KEYS[1], 'l' .. cell, new - old)
    end
    changed = changed + 1
  end
end
if changed > 0 and redis.call('EXISTS', KEYS[1]) == 1 then bump(KEYS[1]) end
return changed
"""
)

# KEYS: the space's lexical version key. ARGV: the rebuild marker, the version.
# Sets the version only if the marker is still there (no other rebuild started).
_LEXICAL_DONE = """
local now = redis.call('GET', KEYS[1])
if now == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]); return 1 end
if now == ARGV[2] then return 1 end
return 0
"""

_Hits = list[ScoredRecord]
_UNSORTED = b"unsorted"  # `_GROUPS_C`: the index returns no terms (not sortable)
_Rows = list[list[bytes]]
_Groups = list[tuple[bytes, int]]  # (terms string, record count)
_Needed = list[tuple[float, bytes]]  # (score, terms string) of the groups that can rank
_Args = list[Any]
_Terms = list[str]
# Fields a reply needs to rebuild a record (not the index-only tags), led by the
# sort field where there is one: the module returns the sort field first, then the
# RETURN fields in order, so a row's names usually equal these lists exactly.
_RECORD = [name.encode() for name in RECORD_FIELDS]
_LISTED = [b"sk", *_RECORD]
_RETURN = ("RETURN", str(len(_RECORD)), *RECORD_FIELDS)
_RETURN_LIST = ("RETURN", str(len(_LISTED)), "sk", *RECORD_FIELDS)
_F32 = np.dtype(np.float32)
_ZERO_FLOAT_BYTES = 3  # of the 4 bytes of a float32 zero (+0.0 or -0.0), at least 3 are 0
_PAGE = 500
_CELL = 16  # hex digits of the namespace and kind digests in a statistics cell
# Keyword candidates: id and terms (then the record's fields, for the fallback).
_IDS = [b"id", b"terms"]
_FULL = [*_IDS, *_RECORD]
_LOAD = ("LOAD", str(len(_IDS)), *(f"@{n.decode()}" for n in _IDS))
_LOAD_FULL = ("LOAD", str(len(_FULL)), *(f"@{n.decode()}" for n in _FULL))


def _escape_term(term: str) -> str:
    """A term as a query word: ASCII punctuation (RediSearch's separators and query
    syntax are all ASCII) escaped. Anything else is kept as it is: a term holds a
    non-letter only where lower-casing made one ("İ" -> "i" + U+0307), and an
    escaped multi-byte character would no longer match the indexed word."""
    return "".join(c if c.isalnum() or not c.isascii() else "\\" + c for c in term)


@functools.lru_cache(maxsize=1024)
def _filter(owner: str, namespace: str | None, kinds: tuple[str, ...] | None) -> str:
    """The owner (+ namespace, kinds) filter of a query, on the digest tags."""
    parts = [f"@oh:{{{digest(owner)}}}"]
    if namespace is not None:
        parts.append(f"@nh:{{{digest(namespace)}}}")
    if kinds is not None:
        parts.append("@kh:{" + " | ".join(digest(k) for k in kinds) + "}")
    return " ".join(parts)


def _values(row: list[bytes], names: list[bytes]) -> list[bytes]:
    """The values of `names` in a reply row `[name, value, ...]`, in that order."""
    if row[0::2] == names:
        return row[1::2]
    fields = {row[i]: row[i + 1] for i in range(0, len(row), 2)}
    return [fields[name] for name in names]


_FULL_ROW = 2 + len(RECORD_FIELDS)  # distance, "0", the fields


def _knn_rows(
    res: list[bytes],
) -> tuple[int, list[tuple[float, str, list[bytes]]], list[float], bool]:
    """A KNN script's reply (`_KNN_ROWS_LUA`): the rows the engine returned, the
    rows sent in full as (-score, id, values), the negated scores of the rows sent
    without fields (ascending), and whether a row sent in full held a zero vector
    (skipped: zero vectors are scored by `_zero_scored`; the engine returns none,
    but if it did, a row sent without fields might be needed in its place)."""
    seen, i, odd = 0, 0, False
    full: list[tuple[float, str, list[bytes]]] = []
    below: list[float] = []
    while i < len(res):
        seen += 1
        score = 1.0 - float(res[i])
        if score > 1.0:
            score = 1.0
        elif score < -1.0:
            score = -1.0
        if res[i + 1] == b"s":
            below.append(-score)
            i += 2
            continue
        v = res[i + 2 : i + _FULL_ROW]
        i += _FULL_ROW
        if _is_zero(v[10]):
            odd = True
            continue
        full.append((-score, v[0].decode("utf-8", "surrogatepass"), v))
    return seen, full, below, odd


def _slot_moved(exc: BaseException) -> bool:
    """Whether a cluster query failed because the owner's slot is moving: the
    source's `_MOVING_LUA` answer, the script redirected (ASK, MOVED) to a primary
    where the index it names is not local, or redirections until the client gave up."""
    if isinstance(exc, TryAgainError):
        return True
    if isinstance(exc, ClusterError):
        return "TTL exhausted" in str(exc)
    text = str(exc)
    return isinstance(exc, ResponseError) and ("AMSLOTMOVING" in text or "non local key" in text)


def _merge_rows(replies: list[Any]) -> list[Any]:
    """`_SEARCH_C` replies of a migrating slot's source and target as one reply: every
    key once (its later row: read from the target), the total less the keys seen twice."""
    rows: dict[bytes, Any] = {}
    total = 0
    for reply in replies:
        total += int(reply[0])
        for key, row in zip(reply[1::2], reply[2::2], strict=True):
            total -= key in rows
            rows[key] = row
    out: list[Any] = [total]
    for key, row in rows.items():
        out += [key, row]
    return out


def _merge_knn(replies: list[list[bytes]]) -> list[bytes]:
    """`_KNN_ROWS_LUA` replies of a migrating slot's source and target as one: the
    rows of both, a record sent in full by both once (`_knn` sorts the scores)."""
    out: list[bytes] = []
    ids: set[bytes] = set()
    for reply in replies:
        i = 0
        while i < len(reply):
            if reply[i + 1] == b"s":
                out += reply[i : i + 2]
                i += 2
                continue
            row = reply[i : i + _FULL_ROW]
            i += _FULL_ROW
            if row[2] not in ids:
                ids.add(row[2])
                out += row
    return out


def _merge_candidates(replies: list[Any]) -> list[Any]:
    """`_CANDIDATES_C` replies ("rows" mode) of a migrating slot's source and target
    as one: the statistics from the node holding them, every record once."""
    stats: Any = []
    rows: dict[bytes, Any] = {}
    for reply in replies:
        stats = reply[0] or stats
        for row in reply[1][1:]:
            rows[_values(row, _FULL)[0]] = row
    return [stats, [len(rows), *rows.values()]]


def _is_zero(blob: bytes) -> bool:
    """Whether a float32 vector blob is all zeros (a byte count rules most out)."""
    if blob.count(0) * 4 < len(blob) * _ZERO_FLOAT_BYTES:
        return False
    return not np.frombuffer(blob, dtype=np.float32).any()


class _Cells:
    """Which statistics cells (`<H(namespace)[:16]><H(kind)[:16]>`) a keyword
    filter covers."""

    def __init__(self, namespace: str | None, kinds: list[str] | None) -> None:
        self._nh = None if namespace is None else digest(namespace)[:_CELL].encode()
        self._kh = None if kinds is None else {digest(k)[:_CELL].encode() for k in kinds}

    def totals(self, fields: dict[bytes, bytes]) -> tuple[int, int]:
        """(records, total length) of the covered cells in a statistics hash."""
        n = length = 0
        for name, value in fields.items():
            if name[:1] != b"n":
                continue
            nh, kh = name[1 : 1 + _CELL], name[1 + _CELL :]
            if (self._nh is None or nh == self._nh) and (self._kh is None or kh in self._kh):
                n += int(value)
                length += int(fields.get(b"l" + name[1:], 0))
        return n, length


def _rank(
    terms: list[str], rows: list[list[bytes]], n: int, length: int, limit: int
) -> list[tuple[float, list[bytes]]]:
    """The best `limit` candidates by BM25 (as `bm25_scores` over the owner's
    statistics), score descending then id ascending; rows are `[id, terms, ...]`."""
    pairs = [(t, t.encode("utf-8", "surrogatepass")) for t in terms]
    docs: list[tuple[dict[str, int], int]] = []
    doc_freq = dict.fromkeys(terms, 0)
    for row in rows:
        # Terms are joined by single spaces and hold none: no decoding needed.
        tokens = row[1].split(b" ") if row[1] else []
        counts = {t: c for t, raw in pairs if (c := tokens.count(raw))}
        docs.append((counts, len(tokens)))
        for t in counts:
            doc_freq[t] += 1
    # Statistics that cover fewer records than the candidates (records written
    # without them) must not make a logarithm of a negative number.
    n = max(n, len(rows))
    length = max(length, sum(size for _, size in docs))
    scores = bm25_scores(
        terms, docs, total_docs=n, avg_length=length / n if n else 0.0, doc_freq=doc_freq
    )
    hits = [
        (s, row[0].decode("utf-8", "surrogatepass"), row)
        for s, row in zip(scores, rows, strict=True)
        if s > 0.0
    ]
    hits.sort(key=lambda h: (-h[0], h[1]))
    return [(s, row) for s, _, row in hits[:limit]]


def _group_scores(
    terms: list[str],
    groups: list[tuple[bytes, int]],
    n: int,
    length: int,
    fixed_df: dict[str, int],
) -> tuple[list[float], dict[str, int], int]:
    """BM25 of each group of candidates (terms string, record count), computed as
    `_rank` computes a record's (every record of a group scores the same: BM25
    depends only on a record's terms); the document frequency of a term in
    `fixed_df` is that count instead of its count in the groups. Also the counts in
    the groups and the record count ranked with."""
    pairs = [(t, t.encode("utf-8", "surrogatepass")) for t in terms]
    docs: list[tuple[dict[str, int], int]] = []
    doc_freq = dict.fromkeys(terms, 0)
    records = total = 0
    for raw, count in groups:
        tokens = raw.split(b" ") if raw else []
        counts = {t: c for t, r in pairs if (c := tokens.count(r))}
        docs.append((counts, len(tokens)))
        for t in counts:
            doc_freq[t] += count
        records += count
        total += count * len(tokens)
    seen = dict(doc_freq)
    doc_freq.update(fixed_df)
    # Statistics that cover fewer records than the candidates (records written
    # without them) must not make a logarithm of a negative number.
    n = max(n, records)
    length = max(length, total)
    scores = bm25_scores(
        terms, docs, total_docs=n, avg_length=length / n if n else 0.0, doc_freq=doc_freq
    )
    return scores, seen, n


def _take(
    groups: list[tuple[bytes, int]], scores: list[float], limit: int
) -> tuple[list[tuple[float, bytes]], float | None]:
    """The groups that can hold one of the best `limit` records, as (score, terms
    string), score descending: groups best first until they hold `limit` records,
    then every further group tied with the last one taken (a group left out scores
    below at least `limit` records, so none of its records can rank; ties between
    records are broken by id, within and across the groups taken). Also the score
    of the `limit`-th best record (None when fewer records score above 0)."""
    ranked = sorted(
        ((s, raw, count) for s, (raw, count) in zip(scores, groups, strict=True) if s > 0.0),
        key=lambda g: -g[0],
    )
    out: list[tuple[float, bytes]] = []
    held = 0
    cut: float | None = None
    for score, raw, count in ranked:
        if held >= limit and score != out[-1][0]:
            break
        out.append((score, raw))
        held += count
        if cut is None and held >= limit:
            cut = score
    return out, cut


# A score bound is raised by this fraction before it is compared: the computed
# scores round, the bound has a margin of at least `k1 (1 - b) / (tf + ...)` per term.
_BOUND_SLACK = 1e-9


def _idf_bound(n: int, df: int) -> float:
    """The most one term of document frequency `df` adds to a record's BM25 (among
    `n` records): `idf * tf * (k1 + 1) / (tf + norm)` stays below `idf * (k1 + 1)`."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5)) * (lexical.BM25_K1 + 1.0)


def _prunable(terms: list[str], df: dict[str, int], n: int, below: float | None) -> list[str]:
    """The most common query terms (commonest first) whose bounds sum below `below`:
    a record holding only these scores below it. Only all-ASCII terms, whose engine
    count is their count in the records' terms (no case folding can map another
    word onto one)."""
    out: list[str] = []
    if below is None:
        return out
    bound = 0.0
    for t in sorted(terms, key=lambda t: (-df[t], t)):
        if not t.isascii():
            continue
        step = bound + _idf_bound(n, df[t])
        if step * (1.0 + _BOUND_SLACK) >= below:
            break
        out.append(t)
        bound = step
    return out


def _estimated_cut(terms: list[str], df: dict[str, int], n: int, limit: int) -> float | None:
    """A guess of the `limit`-th best score, from the document frequencies alone:
    one occurrence, at the average length, of the rarest term that with the rarer
    ones is held `limit` times (None: fewer holders; every one of them ranks)."""
    held = 0
    for t in sorted(terms, key=lambda t: (df[t], t)):
        held += df[t]
        if held >= limit:
            return _idf_bound(n, df[t]) / (lexical.BM25_K1 + 1.0)
    return None


# The engine indexes a token's first 128 bytes only, and a query word longer than
# that matches nothing: such a word cannot select its records.
_MAX_TOKEN_BYTES = 128


def _group_clause(raw: bytes) -> tuple[str, str] | None:
    """The query (records holding all of a group's terms the engine can match) and
    the FILTER expression (terms equal to the group's) selecting one group's
    records; None when a term could not be written as an expression's string
    literal (never from `domain.lexical`'s terms: they hold no quote or
    backslash) or when no term is short enough. A term over `_MAX_TOKEN_BYTES` is
    left out of the query (the FILTER still compares it): a record holding one
    would match no query with it, and a group that can rank holds a query term,
    which is never that long."""
    text = raw.decode("utf-8", "surrogatepass")
    if '"' in text or "\\" in text or "'" in text:
        return None
    words = " ".join(
        _escape_term(t)
        for t in dict.fromkeys(text.split(" "))
        if len(t.encode("utf-8", "surrogatepass")) <= _MAX_TOKEN_BYTES
    )
    if not words:
        return None
    return f"@terms:({words})", f'@terms == "{text}"'


class RedisMemoryStore(RedisHandle):
    """`MemoryStore` and `KeywordSearch` over redis.asyncio and the Search module.

    Build with `RedisMemoryStore.from_url(url, space)` (owns its client) or pass a
    `redis.asyncio.Redis` speaking RESP2 with bytes replies (then the caller closes it).
    """

    def __init__(
        self,
        client: Client | SharedClient,
        space: EmbeddingSpace,
        *,
        prefix: str = "agent_memory",
        deployment: str = "default",
        owns_client: bool = False,
        ef_runtime: int | None = None,
        hnsw_m: int | None = None,
        hnsw_ef_construction: int | None = None,
        exact_threshold: int | None = None,
        index: IndexOptions | None = None,
    ) -> None:
        super().__init__(
            client,
            "redis memory store",
            prefix=prefix,
            deployment=deployment,
            owns_client=owns_client,
        )
        self._space = space
        options = IndexOptions(
            m=hnsw_m,
            ef_construction=hnsw_ef_construction,
            ef_search=ef_runtime,
            exact_threshold=exact_threshold,
        ).merged(index)
        self._ef = options.ef_search or DEFAULT_EF_RUNTIME
        self._hnsw = (options.m or DEFAULT_M, options.ef_construction or DEFAULT_EF_CONSTRUCTION)
        self._exact_threshold = (
            DEFAULT_EXACT_THRESHOLD if options.exact_threshold is None else options.exact_threshold
        )
        self._sid = space.identity
        self._index = self._keys.ms_index(self._sid)
        self._index_ready = False
        self._add = self._r.register_script(_ADD)
        self._update = self._r.register_script(_UPDATE)
        self._delete = self._r.register_script(_DELETE)
        self._update_if_older = self._r.register_script(_UPDATE_IF_OLDER)
        self._delete_if_unchanged = self._r.register_script(_DELETE_IF_UNCHANGED)
        self._candidates = self._r.register_script(_CANDIDATES)
        self._fetch = self._r.register_script(_FETCH)
        self._term_counts_script = self._r.register_script(_TERM_COUNTS)
        self._groups = self._r.register_script(_GROUPS)
        self._groups_c = self._r.register_script(_GROUPS_C)
        self._group_fetch = self._r.register_script(_GROUP_FETCH)
        self._group_fetch_c = self._r.register_script(_GROUP_FETCH_C)
        self._knn_script = self._r.register_script(_KNN)
        self._reterm = self._r.register_script(_RETERM)
        self._lexical_done = self._r.register_script(_LEXICAL_DONE)
        self._lexical_ready = False  # the stored terms follow LEXICAL_VERSION
        self._grouping = True  # the index can group candidates by terms (`_GROUPS_C`)
        self._lexical_lock = asyncio.Lock()
        self._cluster = is_cluster(self._r)
        if self._cluster:  # one index per primary (`_cluster`), scripts that load fields
            self._names = IndexNames(self._index)
            self._ready: set[str] = set()  # index names known to exist
            self._add_loaded = False
            self._search_c = self._r.register_script(_SEARCH_C)
            self._knn_c = self._r.register_script(_KNN_C)
            self._candidates_c = self._r.register_script(_CANDIDATES_C)
            self._term_counts_c = self._r.register_script(_TERM_COUNTS_C)

    @classmethod
    def from_url(
        cls,
        url: str,
        space: EmbeddingSpace,
        *,
        client_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> RedisMemoryStore:
        """A store owning a client built from `url` (`client_options` go to the client)."""
        return cls(connect(url, **(client_options or {})), space, owns_client=True, **kwargs)

    @property
    def space(self) -> EmbeddingSpace:
        return self._space

    @property
    def index_name(self) -> str:
        return self._index

    @property
    def index_options(self) -> IndexOptions:
        """The effective index parameters (M and EF_CONSTRUCTION of an index this
        store creates; EF_RUNTIME and the exact threshold of its queries)."""
        return IndexOptions(
            m=self._hnsw[0],
            ef_construction=self._hnsw[1],
            ef_search=self._ef,
            exact_threshold=self._exact_threshold,
        )

    # -- index ----------------------------------------------------------------
    async def ensure_index(self) -> None:
        """Create the Search index for this space (idempotent); on a cluster, one
        on every primary. Then, once per handle, make sure the stored terms follow
        this release's lexical rules (`_ensure_lexical`)."""
        if not self._index_ready:
            await self._create_index()
        if not self._lexical_ready:
            await self._ensure_lexical()

    async def _create_index(self) -> None:
        if self._cluster:
            with translate("create index"):
                nodes = await primaries(self._cluster_client)
                await asyncio.gather(
                    *(self._ensure_on(n, self._names(self._cluster_client, n)) for n in nodes)
                )
            self._index_ready = True
            return
        with translate("create index"):
            try:
                await self._cmd(*self._create_args(self._index))
            except Exception as exc:
                if is_unknown_command(exc):
                    raise SearchModuleMissing(BACKEND, SEARCH_HINT) from exc
                if "already exists" not in str(exc).lower():
                    raise
            else:
                # Records may already exist (an index lost with a restarted server):
                # the index scans them in the background; wait for it to finish.
                await self._wait_indexed()
        self._index_ready = True

    @property
    def _cluster_client(self) -> Any:
        return self._r

    # -- lexical version ----------------------------------------------------------
    #: Record keys per batch of a terms rebuild (one HMGET pipeline, one script
    #: pipeline).
    _rebuild_page = _PAGE

    async def _ensure_lexical(self) -> None:
        """Make sure the stored terms (and the owners' statistics built from them)
        follow `domain.lexical.LEXICAL_VERSION`: one GET when they do. Otherwise
        (another version, an interrupted rebuild, or a space written before the
        version was recorded) re-derive them (`_rebuild_terms`). A space without
        records just records the version."""
        async with self._lexical_lock:
            if self._lexical_ready:
                return
            want = lexical.LEXICAL_VERSION
            key = self._keys.ms_lexical(self._sid)
            with translate("lexical version"):
                stored = await self._r.get(key)
                if stored != want.encode():
                    if not self._index_ready:
                        await self._create_index()
                    fresh = stored is None and not await self._has_records()
                    if not (fresh and await self._r.set(key, want, nx=True)):
                        await self._rebuild_terms(key, want)
            self._lexical_ready = True

    async def _has_records(self) -> bool:
        """Whether the space holds any record (its index counts them)."""
        head = ("*", "NOCONTENT", "LIMIT", "0", "0", "DIALECT", "2")
        if not self._cluster:
            return int((await self._cmd("FT.SEARCH", self._index, *head))[0]) > 0
        for node in await primaries(self._cluster_client):
            name = self._names(self._cluster_client, node)
            if int((await self._cmd("FT.SEARCH", name, *head, target_nodes=node))[0]):
                return True
        return False

    async def _rebuild_terms(self, key: str, want: str) -> int:
        """Re-derive every record's terms and its owner's lengths for lexical version
        `want`; returns how many records changed. The key says `rebuilding:<want>`
        until every record was visited, so an interrupted rebuild is run again by
        the next handle (of any version: the key matches none); records already
        done are skipped (`_RETERM` compares), so it resumes where it stopped."""
        marker = f"rebuilding:{want}"
        await self._r.set(key, marker)
        prefix = self._keys.ms_record_prefix(self._sid)
        batch: list[Any] = []
        changed = 0
        async for found in self._r.scan_iter(match=prefix + "*", count=1000):
            batch.append(found)
            if len(batch) >= self._rebuild_page:
                changed += await self._reterm_batch(batch)
                batch = []
        if batch:
            changed += await self._reterm_batch(batch)
        if not await self._lexical_done(keys=[key], args=[marker, want]):
            now = await self._r.get(key)
            raise ConfigurationError(
                f"redis keyword terms of {self._sid!r} ({self._keys.base}): another process "
                f"changed {key!r} to {now!r} while this one (lexical version {want!r}) "
                "re-derived them; run one agent-memory release against a deployment, "
                "then open the store again (it finishes the rebuild)"
            )
        return changed

    async def _reterm_batch(self, keys: list[Any]) -> int:
        """Re-derive the terms of the records `keys` (one HMGET pipeline), then
        store those that changed, one `_RETERM` per owner (one script pipeline)."""
        pipe = self._r.pipeline(transaction=False)
        for key in keys:
            pipe.hmget(key, "content", "context", "terms")
        rows = await pipe.execute()
        prefix = self._keys.ms_record_prefix(self._sid)
        stats = self._keys.ms_stats_prefix(self._sid)
        calls: dict[str, tuple[list[Any], list[Any]]] = {}
        for key, (content, context, terms) in zip(keys, rows, strict=True):
            if content is None:  # deleted since the scan saw it
                continue
            context = context or b""
            new = record_terms(
                content.decode("utf-8", "surrogatepass"), context.decode("utf-8", "surrogatepass")
            ).encode("utf-8", "surrogatepass")
            if new == terms:
                continue
            name = key.decode() if isinstance(key, bytes) else str(key)
            tag = name[len(prefix) :].split("}", 1)[0]  # "{<owner digest>"
            call = calls.setdefault(tag, ([stats + tag + "}"], []))
            call[0].append(key)
            call[1].extend((content, context, new))
        if not calls:
            return 0
        replies = await self._eval_many(self._reterm, _RETERM, list(calls.values()))
        return sum(int(n) for n in replies)

    async def _eval_many(
        self, script: Any, source: str, calls: Sequence[tuple[list[Any], list[Any]]]
    ) -> list[Any]:
        """`script` once per (keys, args), all in one pipeline (on a cluster, one
        round trip per primary); replies in call order. A call that a node answered
        NOSCRIPT (it did not run) is sent again after loading the script; nothing
        else is resent; the first other error is raised."""
        results: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for attempt in (1, 2):
            pipe = self._r.pipeline(transaction=False)
            for i in todo:
                keys, args = calls[i]
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            replies = await pipe.execute(raise_on_error=False)
            missing = []
            for i, reply in zip(todo, replies, strict=True):
                if isinstance(reply, NoScriptError) and attempt == 1:
                    missing.append(i)
                elif isinstance(reply, Exception):
                    raise reply
                else:
                    results[i] = reply
            if not missing:
                break
            await self._r.script_load(source)
            todo = missing
        return results

    async def _ensure_on(self, node: Any, name: str) -> None:
        """Create the index `name` on one cluster primary (idempotent)."""
        try:
            await self._cmd(*self._create_args(name), target_nodes=node)
        except Exception as exc:
            if is_unknown_command(exc):
                raise SearchModuleMissing(BACKEND, SEARCH_HINT) from exc
            if "already exists" not in str(exc).lower():
                raise
        else:
            await self._wait_indexed(name, node)
        self._ready.add(name)

    def _create_args(self, name: str) -> list[Any]:
        return [
                    "FT.CREATE", name, "ON", "HASH",
                    "PREFIX", "1", self._keys.ms_record_prefix(self._sid),
                    "STOPWORDS", "0",
                    "SCHEMA",
                    "oh", "TAG", "nh", "TAG", "kh", "TAG", "z", "TAG",
                    "ca", "NUMERIC",
                    "sk", "TAG", "SORTABLE", "UNF", "NOINDEX",
                    "terms", "TEXT", "NOSTEM", "SORTABLE", "UNF",
                    "vec", "VECTOR", "HNSW", "10",
                    "TYPE", "FLOAT32", "DIM", str(self._space.dimension),
                    "DISTANCE_METRIC", "COSINE",
                    "M", str(self._hnsw[0]), "EF_CONSTRUCTION", str(self._hnsw[1]),
        ]  # fmt: skip

    async def _wait_indexed(
        self, name: str | None = None, node: Any = None, timeout: float = 60.0
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        where = {} if node is None else {"target_nodes": node}
        while loop.time() < deadline:
            info = await self._cmd("FT.INFO", name or self._index, **where)
            fields = {info[i]: info[i + 1] for i in range(0, len(info) - 1, 2)}
            if int(fields.get(b"indexing", 0)) == 0:
                return
            await asyncio.sleep(0.01)

    async def drop_index(self, *, delete_records: bool = True) -> None:
        """Drop this space's index (and, by default, its records)."""
        async with self._life.op():
            with translate("drop index"):
                dd = ["DD"] if delete_records else []
                if self._cluster:
                    nodes = await primaries(self._cluster_client)
                    if delete_records:
                        await self._refuse_migrating(nodes)
                    dropped = await asyncio.gather(*(self._drop_on(n, dd) for n in nodes))
                    if any(dropped) and delete_records:
                        await self._drop_stats()
                    self._index_ready = False
                    self._grouping = True  # the next index is created with sortable terms
                    return
                args = ["FT.DROPINDEX", self._index, *dd]
                try:
                    await self._cmd(*args)
                except Exception as exc:
                    if not is_missing_index(exc):
                        raise
                else:
                    if delete_records:  # the keyword statistics go with the records
                        await self._drop_stats()
            self._index_ready = False

    @staticmethod
    async def _refuse_migrating(nodes: list[Any]) -> None:
        """`SlotMigrating` when a primary has a slot being migrated: FT.DROPINDEX DD
        deleting a record of that slot stops the server (the Search module asserts
        on the redirection its delete gets; RediSearch 2.10 on Valkey 9)."""
        for node in nodes:
            slots = await migrating_slots(node)
            if slots:
                raise SlotMigrating(
                    BACKEND, slots[0], f"on {node.name}", "drop_index with its records"
                )

    async def _drop_on(self, node: Any, dd: list[str]) -> bool:
        """Drop this space's index on one cluster primary; whether it existed."""
        name = self._names(self._cluster_client, node)
        self._ready.discard(name)
        try:
            await self._cmd("FT.DROPINDEX", name, *dd, target_nodes=node)
        except Exception as exc:
            if not is_missing_index(exc):
                raise
            return False
        return True

    async def _drop_stats(self) -> None:
        """Delete every owner's keyword statistics of this space (one key per owner,
        each in its owner's slot: single-key UNLINKs, pipelined) and the lexical
        version of its terms (none are left; the next write records it again).
        On a cluster, also the records the index's DD left behind: the Search
        module does not delete records that reached their primary by MIGRATE (a
        resharding); the SCAN finds none otherwise."""
        patterns = [self._keys.ms_stats_prefix(self._sid) + "*"]  # no glob characters
        if self._cluster:
            patterns.append(self._keys.ms_record_prefix(self._sid) + "*")
        pipe = self._r.pipeline(transaction=False)
        pipe.execute_command("UNLINK", self._keys.ms_lexical(self._sid))  # no terms left
        self._lexical_ready = False
        for match in patterns:
            async for key in self._r.scan_iter(match=match, count=1000):
                pipe.execute_command("UNLINK", key)  # (a cluster pipeline's unlink is async)
                if len(pipe) >= _PAGE:
                    await pipe.execute()
        await pipe.execute()

    async def _cmd(self, *args: Any, **options: Any) -> Any:
        return await cast(Any, self._r).execute_command(*args, **options)

    async def _cluster_ft(
        self,
        owner: str,
        script: Any,
        args: Any,
        merge: Callable[[list[Any]], Any] | None = None,
    ) -> Any:
        """Run `script` (keyed by the owner's statistics, so on the primary holding
        the owner's records) with `args(index name on that primary)`. The index is
        created on that primary when missing: after a failover to a replica that
        lacks it, or a resharding that changed the primary's index name (healing).

        A query that finds the owner's slot moving (`_MOVING_LUA`; or the script,
        redirected to another primary, finding the index it names elsewhere) goes
        to `_cluster_moving`: the slot map is re-read and, while the slot is being
        migrated, the script runs on the source and then the target and `merge`
        combines the replies (without `merge`: `SlotMigrating`)."""
        stats = self._stats_key(owner)
        try:
            return await self._cluster_ft_on_owner(stats, script, args)
        except Exception as exc:
            if not _slot_moved(exc):
                raise
        return await self._cluster_moving(stats, script, args, merge)

    async def _cluster_moving(
        self, stats: str, script: Any, args: Any, merge: Callable[[list[Any]], Any] | None
    ) -> Any:
        """`_cluster_ft` once the owner's slot was seen moving. While the source
        reports it migrating, the script runs without KEYS on the source's index,
        then (after ASKING) on the target's: MIGRATE writes a key on the target
        before deleting it on the source, so a record moved in between is read at
        least once (`merge` keeps one copy). The migration is read again afterwards:
        if it is no longer the same one (it ended on the target: every record was
        there for the second read), the reads run again. No migration (it ended,
        the client's slot map was stale): the script runs as usual."""
        client = self._cluster_client
        slot = client.keyslot(stats)
        for _ in range(4):
            moving = await slot_migration(client, slot)
            if moving is None:
                try:
                    return await self._cluster_ft_on_owner(stats, script, args)
                except Exception as exc:
                    if not _slot_moved(exc):
                        raise
                continue
            where = f"from {moving.source.name} to {moving.target.name}"
            if merge is None:
                raise SlotMigrating(BACKEND, slot, where, "a query of an owner's records")
            replies = []
            for node, asking in ((moving.source, False), (moving.target, True)):
                name = self._names(client, node)
                if name not in self._ready:
                    await self._ensure_on(node, name)
                replies.append(await self._script_on(node, script, args(name), asking))
            after = await slot_migration(client, slot)
            ended = after is None and client.get_node_from_key(stats).name == moving.target.name
            if ended or moving.same(after):
                return merge(replies)
        raise SlotMigrating(BACKEND, slot, "back and forth", "a query of an owner's records")

    async def _script_on(self, node: Any, script: Any, args: list[Any], asking: bool) -> Any:
        """`script` with no KEYS on `node` itself (after ASKING when `asking`)."""
        try:
            return await run_on(node, "EVALSHA", script.sha, 0, *args, asking=asking)
        except NoScriptError:
            await run_on(node, "SCRIPT", "LOAD", script.script)
            return await run_on(node, "EVALSHA", script.sha, 0, *args, asking=asking)

    async def _cluster_ft_on_owner(self, stats: str, script: Any, args: Any) -> Any:
        for again in (True, False):
            node = await primary_for(self._cluster_client, stats)
            name = self._names(self._cluster_client, node)
            if name not in self._ready:
                await self._ensure_on(node, name)
            try:
                return await script(keys=[stats], args=args(name))
            except Exception as exc:
                if is_unknown_command(exc):
                    raise SearchModuleMissing(BACKEND, SEARCH_HINT) from exc
                if not (again and is_missing_index(exc)):
                    raise
            self._ready.discard(name)
        raise AssertionError("unreachable: the second try returns or raises")  # pragma: no cover

    async def _cluster_search(
        self,
        owner: str,
        tail: tuple[Any, ...],
        fields: Sequence[str],
        content: bool,
        merge: bool = True,
    ) -> Any:
        """FT.SEARCH `<owner's index> *tail` on the owner's primary, each row
        followed by the `fields` read from the record (`_SEARCH_C`). While the
        owner's slot is migrated, the rows of both primaries' indexes (`_merge_rows`;
        `merge=False`: `SlotMigrating`)."""
        head = [len(fields), *fields, "1" if content else "0"]
        return await self._cluster_ft(
            owner,
            self._search_c,
            lambda name: [*head, name, *tail, "TIMEOUT", "0"],
            _merge_rows if merge else None,
        )

    async def _ft(self, *args: Any) -> Any:
        """FT.SEARCH on our index, recreating the index once if it vanished (a
        restarted server without persistence). `TIMEOUT 0`: the module's default
        query timeout (500 ms, policy "return") would silently cut results; the
        client's socket timeout bounds the call instead."""
        args = (*args, "TIMEOUT", "0")
        if not self._index_ready:
            await self.ensure_index()
        try:
            return await self._cmd(*args)
        except Exception as exc:
            if is_unknown_command(exc):
                raise SearchModuleMissing(BACKEND, SEARCH_HINT) from exc
            if not is_missing_index(exc):
                raise
        self._index_ready = False
        await self.ensure_index()
        return await self._cmd(*args)

    async def _script_ft(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """A script running a Search command on our index, recreating the index
        once if it vanished (as `_ft`)."""
        if not self._index_ready:
            await self.ensure_index()
        for again in (True, False):
            try:
                return await script(keys=keys, args=args)
            except Exception as exc:
                if is_unknown_command(exc):
                    raise SearchModuleMissing(BACKEND, SEARCH_HINT) from exc
                if not (again and is_missing_index(exc)):
                    raise
            self._index_ready = False
            await self.ensure_index()
        raise AssertionError("unreachable: the second try returns or raises")  # pragma: no cover

    # -- helpers ----------------------------------------------------------------
    def _key(self, owner: str, id: str) -> str:
        return self._keys.ms_record(self._sid, owner, id)

    def _stats_key(self, owner: str) -> str:
        return self._keys.ms_stats(self._sid, owner)

    @staticmethod
    def _tags(r: MemoryRecord) -> dict[str, str]:
        return {"oh": digest(r.owner), "nh": digest(r.namespace), "kh": digest(r.kind)}

    def _encode(self, r: MemoryRecord) -> tuple[list[Any], str, int]:
        """The record's hash fields (flat), its statistics cell and its length in terms."""
        tags = self._tags(r)
        fields = encode_record(r, tags)
        flat: list[Any] = []
        for name, value in fields.items():
            flat += [name, value]
        terms = cast(str, fields["terms"])
        length = terms.count(" ") + 1 if terms else 0
        return flat, tags["nh"][:_CELL] + tags["kh"][:_CELL], length

    @staticmethod
    def _filter(owner: str, namespace: str | None, kinds: list[str] | None) -> str:
        return _filter(owner, namespace, None if kinds is None else tuple(kinds))

    def _query_blob(self, vector: object) -> tuple[bytes, bool]:
        """The query vector as float32 bytes, and whether any component is nonzero.

        A 1-D float32 array of the space's dimension is checked on its bytes (a
        float sum is finite only when every component is, and cannot overflow);
        anything else, or a failed check, goes through `as_vector` and
        `require_dimension` for their typed errors."""
        if (
            type(vector) is np.ndarray
            and vector.dtype is _F32
            and vector.ndim == 1
            and vector.shape[0] == self._space.dimension
        ):
            blob = vector.tobytes()
            values = memoryview(blob).cast("f")
            if math.isfinite(sum(values)):
                require_vector_norm(vector, "query vector")
                return blob, any(values)
        query = as_vector(vector, "query vector")
        require_dimension(self._space, query)
        require_vector_norm(query, "query vector")
        return query.tobytes(), bool(query.any())

    @staticmethod
    def _check_vectors(batch: Sequence[MemoryRecord]) -> None:
        """Beyond `check_record`: every stored vector finite (a record built without
        its validators could carry NaN or infinity into the HNSW index)."""
        for r in batch:
            as_vector(r.vector, "record.vector")

    # -- writes -----------------------------------------------------------------
    async def add(self, records: Sequence[MemoryRecord]) -> None:
        async with self._life.op():
            batch = check_records(records, self._space)
            self._check_vectors(batch)
            if not batch:
                return
            seen: set[tuple[str, str]] = set()
            dupes: dict[str, list[str]] = {}
            for r in batch:
                if (r.owner, r.id) in seen:
                    dupes.setdefault(r.owner, []).append(r.id)
                seen.add((r.owner, r.id))
            if dupes:
                owner, ids = next(iter(dupes.items()))
                raise DuplicateRecord(owner, tuple(ids))
            if self._cluster:
                parts: dict[int, list[MemoryRecord]] = {}
                for r in batch:
                    slot = self._cluster_client.keyslot(self._stats_key(r.owner))
                    parts.setdefault(slot, []).append(r)
                if len(parts) > 1:
                    await self._add_per_slot(list(parts.values()), dupes)
                    return
            keys, args = self._add_call(batch)
            with translate("add", keys[-1]):
                await self.ensure_index()
                found = await self._add(keys=keys, args=args)
            if found:
                for i in found:
                    r = batch[int(i) - 1]
                    dupes.setdefault(r.owner, []).append(r.id)
                owner, ids = next(iter(dupes.items()))
                raise DuplicateRecord(owner, tuple(ids))

    def _add_call(self, batch: Sequence[MemoryRecord]) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of `_ADD` for a batch (all in one slot on a cluster)."""
        keys: list[str] = [self._key(r.owner, r.id) for r in batch]
        args: list[Any] = [len(batch)]
        stats: dict[str, int] = {}  # stats key -> its position in KEYS (1-based)
        cells: dict[tuple[int, str], list[int]] = {}  # -> [records, total length]
        for r in batch:
            flat, cell, length = self._encode(r)
            args.append(len(flat))
            args += flat
            at = stats.setdefault(self._stats_key(r.owner), len(batch) + len(stats) + 1)
            acc = cells.setdefault((at, cell), [0, 0])
            acc[0] += 1
            acc[1] += length
        for (at, cell), (count, length) in cells.items():
            args += [at, cell, count, length]
        keys += stats
        return keys, args

    async def _add_per_slot(
        self, parts: list[list[MemoryRecord]], dupes: dict[str, list[str]]
    ) -> None:
        """A cluster batch spanning slots: one `_ADD` per slot, pipelined (each
        atomic in its slot; the batch as a whole is not: `atomic_batches` is not
        declared on a cluster). A script a node did not know (NOSCRIPT: it did not
        run) is loaded and sent again; nothing else is resent."""
        calls = [self._add_call(part) for part in parts]
        with translate("add"):
            await self.ensure_index()
            if not self._add_loaded:  # on every primary, before the first pipeline
                await self._r.script_load(_ADD)
                self._add_loaded = True
            results = await self._eval_many(self._add, _ADD, calls)
        for part, found in zip(parts, results, strict=True):
            for i in found or ():
                r = part[int(i) - 1]
                dupes.setdefault(r.owner, []).append(r.id)
        if dupes:
            owner, ids = next(iter(dupes.items()))
            raise DuplicateRecord(owner, tuple(ids))

    async def update(self, record: MemoryRecord) -> None:
        if not await self._replace(record, "update", self._update, lambda _: ()):
            raise NotFound(record.owner, record.id)

    async def _replace(
        self,
        record: MemoryRecord,
        op: str,
        script: Any,
        head: Callable[[MemoryRecord], Sequence[str]],
    ) -> bool:
        """Run a replacing script (`_UPDATE`, `_UPDATE_IF_OLDER`) on `record`:
        KEYS record and statistics, ARGV `head(record)`, then the new cell,
        length and fields. Whether it replaced."""
        async with self._life.op():
            r = check_record(record, "record", self._space)
            self._check_vectors([r])
            flat, cell, length = self._encode(r)
            with translate(op, self._stats_key(r.owner)):
                await self.ensure_index()
                ok = await script(
                    keys=[self._key(r.owner, r.id), self._stats_key(r.owner)],
                    args=[*head(r), cell, length, *flat],
                )
            return bool(ok)

    async def delete(self, owner: str, id: str) -> bool:
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            with translate("delete", self._stats_key(owner)):
                keys = [self._stats_key(owner), self._key(owner, id)]
                return bool(await self._delete(keys=keys, args=[]))

    async def update_if_older(self, record: MemoryRecord) -> bool:
        """`VersionedWrites`: replace the record only when the stored version is
        older (one script: the check and the write are atomic)."""
        return await self._replace(
            record,
            "update_if_older",
            self._update_if_older,
            lambda r: (str(to_micros(r.updated_at)),),
        )

    async def delete_if_unchanged(self, owner: str, id: str, updated_at: datetime) -> bool:
        """`VersionedWrites`: delete the record only when it is that version (one
        script)."""
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            version = str(to_micros(require_utc(updated_at, "updated_at")))
            with translate("delete_if_unchanged", self._stats_key(owner)):
                keys = [self._stats_key(owner), self._key(owner, id)]
                return bool(await self._delete_if_unchanged(keys=keys, args=[version]))

    async def delete_scope(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        async with self._life.op():
            require_scope(owner, "owner")
            wanted = check_filters(namespace, kinds)
            if wanted is not None and not wanted:
                return 0
            query = self._filter(owner, namespace, wanted)
            total = 0
            with translate("delete_scope", self._stats_key(owner)):
                while True:
                    if self._cluster:
                        tail = (query, "NOCONTENT", "LIMIT", "0", str(_PAGE), "DIALECT", "2")
                        doomed = (await self._cluster_search(owner, tail, (), False, False))[1::2]
                    else:
                        res = await self._ft(
                            "FT.SEARCH", self._index, query, "NOCONTENT",
                            "LIMIT", "0", str(_PAGE), "DIALECT", "2",
                        )  # fmt: skip
                        doomed = res[1:]
                    if not doomed:
                        return total
                    # Same owner -> same hash tag: one script over one slot.
                    stats = self._stats_key(owner)
                    total += int(await self._delete(keys=[stats, *doomed], args=[]))

    # -- reads ------------------------------------------------------------------
    async def owners(self) -> list[str]:
        """Every owner with a record in this space, sorted (`OwnerListing`): a SCAN of
        the record keys, whose hash tag is the owner's digest, then one HGET per owner.

        A key read after the SCAN may have been deleted meanwhile; its owner is
        dropped only when a later look at its tag (another SCAN, matching that tag
        alone when few are left) finds no record of it either.

        On a cluster the SCAN asks each primary in turn, so a key migrated
        between two of them in between can be on neither when asked: the slot
        layout is read from every primary before and after (one parallel round
        trip each), the keys on each migration's target are read too, and a
        layout that changed meanwhile (a migration started or ended) has the
        whole listing run again (up to four times, then `SlotMigrating`)."""
        async with self._life.op():
            prefix = self._keys.ms_record_prefix(self._sid)
            with translate("owners"):
                if not self._cluster:
                    return await self._owners(prefix, None)
                for _ in range(4):
                    client = self._cluster_client
                    before = await slot_layout(client)
                    moved = functools.partial(keys_migrated_in, client, before)
                    found = await self._owners(prefix, moved)
                    after = await slot_layout(client)
                    if after.slots == before.slots:
                        return found
                slot = next(
                    (int(f[1:].split("-", 1)[0]) for v in after.slots.values() for f in v
                     if f.startswith("[")), -1,
                )  # fmt: skip
                raise SlotMigrating(BACKEND, slot, "again and again", "owners")

    async def _owners(
        self, prefix: str, also: Callable[[], Awaitable[list[Any]]] | None
    ) -> list[str]:
        """The owners of the record keys a SCAN finds, and of those `also` reads
        after it (the keys migrated to a target meanwhile)."""
        picked: dict[str, list[Any]] = {}
        found: set[str] = set()

        def pick(key: Any) -> None:
            name = key.decode() if isinstance(key, bytes) else str(key)
            if name.startswith(prefix):
                picked.setdefault(self._owner_tag(prefix, key), [key])

        async for key in self._r.scan_iter(match=prefix + "*", count=1000):
            pick(key)
        for key in [] if also is None else await also():
            pick(key)
        while picked:
            missed = await self._read_owners(picked, found)
            picked = await self._tag_keys(prefix, missed) if missed else {}
        return sorted(found)

    @staticmethod
    def _owner_tag(prefix: str, key: Any) -> str:
        """The hash tag (`{H(owner)`) of a record key under `prefix`."""
        name = key.decode() if isinstance(key, bytes) else str(key)
        return name[len(prefix) :].split("}", 1)[0]

    async def _read_owners(self, picked: dict[str, list[Any]], found: set[str]) -> set[str]:
        """Add to `found` the owner read from the keys of each tag (pipelined
        HGETs); returns the tags none of whose keys exists any more."""
        items = [(tag, key) for tag, keys in picked.items() for key in keys]
        resolved: set[str] = set()
        for start in range(0, len(items), _PAGE):
            page = items[start : start + _PAGE]
            pipe = self._r.pipeline(transaction=False)
            for _, key in page:
                pipe.hget(key, "owner")
            for (tag, _), raw in zip(page, await pipe.execute(), strict=True):
                if raw is not None:
                    found.add(raw.decode("utf-8", "surrogatepass"))
                    resolved.add(tag)
        return set(picked) - resolved

    async def _tag_keys(self, prefix: str, tags: set[str]) -> dict[str, list[Any]]:
        """Up to `_PAGE` record keys of each tag in `tags` that a new SCAN finds (a
        pattern per tag when there are few, else one over every record key)."""
        few = len(tags) <= 8
        patterns = [f"{prefix}{tag}}}:*" for tag in sorted(tags)] if few else [prefix + "*"]
        out: dict[str, list[Any]] = {}
        for pattern in patterns:
            async for key in self._r.scan_iter(match=pattern, count=1000):
                tag = self._owner_tag(prefix, key)
                if tag in tags:
                    keys = out.setdefault(tag, [])
                    if len(keys) < _PAGE:
                        keys.append(key)
        return out

    async def get(self, owner: str, id: str) -> MemoryRecord | None:
        async with self._life.op():
            require_scope(owner, "owner")
            require_id(id)
            with translate("get"):
                raw: Any = await self._r.hgetall(self._key(owner, id))
            if not raw:
                return None
            record = decode_record(raw)
            return record if (record.owner, record.id) == (owner, id) else None

    async def search(
        self,
        owner: str,
        vector: npt.NDArray[np.float32],
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[ScoredRecord]:
        async with self._life.op():
            (blob, nonzero), wanted = check_search_args(
                owner, vector, limit, namespace, kinds, min_score, self._query_blob
            )
            if wanted is not None and not wanted:
                return []
            filt = self._filter(owner, namespace, wanted)
            with translate("search"):
                if not nonzero:
                    hits = await self._zero_scored(owner, filt, limit)
                else:
                    hits = await self._knn(owner, filt, blob, limit)
                    if len(hits) < limit or hits[-1].score <= 0.0:
                        # Zero vectors have no cosine in the index; their similarity is 0.
                        hits += await self._zero_scored(owner, filt + " @z:{1}", limit)
                        hits.sort(key=lambda h: (-h.score, h.record.id))
            if min_score is not None:
                hits = [h for h in hits if h.score >= min_score]
            return hits[:limit]

    async def _knn(self, owner: str, filt: str, blob: bytes, limit: int) -> list[ScoredRecord]:
        """The `limit` best records by cosine. One script reads the owner's record
        count (its keyword statistics) and runs the query: by brute force over the
        owner's records (`HYBRID_POLICY ADHOC_BF`, exact) when there are at most
        `exact_threshold` of them, else through the HNSW graph with EF_RUNTIME. It
        asks for one row past the cut (exact ties by id need its score) and sends
        that row's fields only when it ties (`_KNN_ROWS_LUA`)."""
        k, keep = limit + 1, limit
        while True:
            ef = max(self._ef, k)
            exact = f"({filt})=>[KNN {k} @vec $v HYBRID_POLICY ADHOC_BF AS __d]"
            hnsw = f"({filt})=>[KNN {k} @vec $v EF_RUNTIME {ef} AS __d]"
            if self._cluster:
                res = await self._cluster_ft(
                    owner,
                    self._knn_c,
                    lambda name, e=exact, h=hnsw, n=k, f=keep: [
                        self._exact_threshold, name, e, h, f, n, blob,
                    ],
                    _merge_knn,
                )  # fmt: skip
            else:
                args = [self._exact_threshold, self._index, exact, hnsw, keep, k, blob]
                res = await self._script_ft(self._knn_script, [self._stats_key(owner)], args)
            seen, full, below, odd = _knn_rows(res)
            if odd and below and keep < k:
                keep = k  # rows the script ranked may be needed after all: all in full
                continue
            # (score, id) is unique within an owner: the lists are never compared.
            full.sort()
            # Every row sent without fields scores below every row sent in full
            # (within one node's reply; two merged during a migration are sorted).
            ranked = sorted([neg for neg, _, _ in full] + below)
            # All candidates seen, or no tie across the cut hiding equal-scored
            # records with smaller ids: done.
            if seen < k or (len(ranked) > limit and ranked[limit - 1] != ranked[limit]):
                # Only the returned rows become records.
                return [scored(decode_record_values(v), -neg) for neg, _, v in full[:limit]]
            k *= 2

    async def _zero_scored(self, owner: str, filt: str, limit: int) -> list[ScoredRecord]:
        """Records scoring exactly 0 (zero query or zero stored vectors), by id."""
        found: list[MemoryRecord] = []
        offset = 0
        while True:
            if self._cluster:
                tail = (filt, "NOCONTENT", "LIMIT", str(offset), str(_PAGE), "DIALECT", "2")
                res = await self._cluster_search(owner, tail, RECORD_FIELDS, False)
            else:
                res = await self._ft(
                    "FT.SEARCH", self._index, filt, *_RETURN,
                    "LIMIT", str(offset), str(_PAGE), "DIALECT", "2",
                )  # fmt: skip
            found += [decode_record_values(_values(row, _RECORD)) for row in res[2::2]]
            offset += _PAGE
            if offset >= int(res[0]):
                break
        if self._cluster:  # a record moved between two pages' reads (a migration)
            found = list({r.id: r for r in found}.values())
        found.sort(key=lambda r: r.id)
        return [scored(r, 0.0) for r in found[:limit]]

    async def list(
        self,
        owner: str,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        async with self._life.op():
            wanted, after = check_list_args(owner, limit, namespace, kinds, cursor)
            if wanted is not None and not wanted:
                return Page(records=(), next_cursor=None)
            query = self._filter(owner, namespace, wanted)
            after_sk = None
            if after is not None:
                query += f" @ca:[-inf {to_micros(after[0])}]"
                after_sk = sort_key(*after)
            rows: list[MemoryRecord] = []
            size = limit + 1 + 16
            with translate("list"):
                # Each read starts at the top of the range, so the page comes from
                # one search, one consistent view of the owner's records: continuing
                # at an offset instead would skip a record when one listed before
                # the offset is deleted in between, and repeat one when a record is
                # added there (records tied with the cursor's created_at fill the
                # top of the range, hence a read that yields too few rows).
                while True:
                    if self._cluster:
                        tail = (
                            query, "RETURN", "1", "sk", "SORTBY", "sk", "DESC",
                            "LIMIT", "0", str(size), "DIALECT", "2",
                        )  # fmt: skip
                        res = await self._cluster_search(owner, tail, RECORD_FIELDS, True)
                    else:
                        res = await self._ft(
                            "FT.SEARCH", self._index, query, *_RETURN_LIST, "SORTBY", "sk",
                            "DESC", "LIMIT", "0", str(size), "DIALECT", "2",
                        )  # fmt: skip
                    rows = []
                    for row in res[2::2]:
                        v = _values(row, _LISTED)
                        if after_sk is None or v[0].decode() < after_sk:
                            rows.append(decode_record_values(v[1:]))
                    if len(rows) > limit or size >= int(res[0]):
                        break
                    size *= 2
            rows.sort(key=lambda r: (r.created_at, r.id), reverse=True)
            page = tuple(rows[:limit])
            more = len(rows) > limit
            next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if more else None
            return Page(records=page, next_cursor=next_cursor)

    async def search_text(
        self,
        owner: str,
        query: str,
        *,
        limit: int = 10,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> _Hits:
        """BM25 over content and context with the owner's own statistics.

        The engine finds the candidates (the owner's filtered records holding a
        query term; terms too common to rank alone left out, `_text_by_groups`)
        and returns their terms grouped; the record count and total length of the
        owner's filtered records come from the owner's statistics hash, read with
        the terms' counts; BM25 is computed here exactly as in the in-process
        store, so no other owner's records (nor deleted ones) change a score, and
        ties are broken by id. Only the best `limit` records are then fetched, with
        the owner's version: a write in between makes the search run again (on its
        last try, the candidates come with their records in one transaction)."""
        async with self._life.op():
            query, wanted = check_search_text_args(owner, query, limit, namespace, kinds)
            terms = query_terms(query)
            if not terms or (wanted is not None and not wanted):
                return []
            filt = self._filter(owner, namespace, wanted)
            q = filt + " @terms:("
            q += " | ".join(_escape_term(t) for t in terms) + ")"
            cells = _Cells(namespace, wanted)
            stats = self._stats_key(owner)
            with translate("search_text"):
                if not self._lexical_ready:
                    await self._ensure_lexical()
                moving = False  # the owner's cluster slot is being migrated
                for attempt in range(self._text_attempts):
                    full = moving or attempt == self._text_attempts - 1
                    try:
                        if not full and self._grouping:
                            hits = await self._text_by_groups(
                                owner, stats, filt, q, cells, terms, limit
                            )
                            if hits is not None:
                                return hits
                            if self._grouping:
                                continue
                        version, n, length, rows = await self._text_candidates(
                            owner, stats, q, cells, full
                        )
                    except SlotMigrating:
                        if full:
                            raise
                        moving = True  # only the one-step search reads both primaries
                        continue
                    best = _rank(terms, rows, n, length, limit)
                    if full or not best:
                        return [scored(decode_record_values(row[2:]), s) for s, row in best]
                    keys = [stats]
                    keys += [
                        self._key(owner, row[0].decode("utf-8", "surrogatepass")) for _, row in best
                    ]
                    found = await self._fetch(keys=keys, args=[version or b"", *RECORD_FIELDS])
                    if found is not None:  # the owner's version is the one ranked with
                        return [
                            scored(decode_record_values(values), s)
                            for (s, _), values in zip(best, found, strict=True)
                        ]
            raise AssertionError("unreachable: the last attempt returns")  # pragma: no cover

    #: Tries of the multi-step keyword search before the one-step fallback.
    _text_attempts = 3

    async def _text_by_groups(
        self,
        owner: str,
        stats: str,
        filt: str,
        query: str,
        cells: _Cells,
        terms: _Terms,
        limit: int,
    ) -> _Hits | None:
        """The keyword search without reading every candidate.

        (1) The owner's statistics and each term's document frequency (the
        engine's counts, `_TERM_COUNTS`). (2) The candidates grouped by stored
        terms (`_GROUPS`), ranked here by group (`_group_scores`, `_take`); the
        most common terms are left out of the candidates' query when no record
        holding only them can rank: the bounds of their contributions sum below a
        guess of the `limit`-th best score (`_prunable`), and the guess is checked
        against the best `limit` of the candidates found (if it was too high, the
        query runs once more without the terms the check rules out). (3) The best
        `limit` records of the groups that can rank (`_GROUP_FETCH`). Steps 2 and 3
        check the owner's version: None when a write came in between (or a group
        cannot be selected), so the caller tries again; also None, with
        `_grouping` off, when the index cannot group on a cluster (an index of an
        earlier release, where `terms` is not sortable)."""
        version, n, length, df = await self._term_counts(owner, stats, filt, cells, terms)
        if not any(df.values()):
            return []
        pruned = _prunable(terms, df, n, _estimated_cut(terms, df, n, limit))
        while True:
            kept = [t for t in terms if t not in pruned]
            if pruned and kept:  # (the term the guess came from is always kept)
                q = filt + " @terms:(" + " | ".join(_escape_term(t) for t in kept) + ")"
                # Every candidate's record must be in the statistics for the bounds
                # to hold (records written around the adapter are not).
                union = query if sum(df.values()) > n else ""
            else:
                pruned, kept, q, union = [], terms, query, ""
            most = max(1, sum(df[t] for t in kept))
            reply = await self._text_ft(
                owner, stats, self._groups, self._groups_c, [version, q, union, most]
            )
            if reply == _UNSORTED:
                self._grouping = False
                return None
            if reply is None:
                return None
            groups = self._parse_groups(reply)
            if pruned and int(reply[2]) > n:
                pruned = []
                continue
            fixed = {t: df[t] for t in pruned}
            scores, seen, total_docs = _group_scores(terms, groups, n, length, fixed)
            if pruned and any(seen[t] != df[t] for t in kept):
                pruned = []  # the engine's count is not the records' (never seen): all
                continue
            needed, cut = _take(groups, scores, limit)
            bound = sum(_idf_bound(total_docs, df[t]) for t in pruned)
            if pruned and (cut is None or bound * (1.0 + _BOUND_SLACK) >= cut):
                pruned = _prunable(pruned, df, total_docs, cut)
                continue
            break
        if not needed:
            return []
        return await self._fetch_groups(owner, stats, filt, version, limit, needed, df)

    async def _term_counts(
        self, owner: str, stats: str, filt: str, cells: _Cells, terms: _Terms
    ) -> tuple[bytes, int, int, dict[str, int]]:
        """In one atomic script (`_TERM_COUNTS`): the version ("" for none), the
        record count and total length of the matching cells, and per term the
        number of the owner's filtered records holding it."""
        queries = [f"{filt} @terms:({_escape_term(t)})" for t in terms]
        reply = await self._text_ft(
            owner, stats, self._term_counts_script, getattr(self, "_term_counts_c", None), queries
        )
        flat = reply[0]
        fields = dict(zip(flat[0::2], flat[1::2], strict=True))
        n, length = cells.totals(fields)
        counts = [int(c) for c in reply[1].split(b" ")]
        return fields.get(b"v") or b"", n, length, dict(zip(terms, counts, strict=True))

    @staticmethod
    def _parse_groups(reply: Any) -> _Groups:
        """(terms string, record count) of a grouping script's reply; a terms
        string listed twice (never seen: equal strings sort next to each other)
        counts once, with both counts."""
        merged: dict[bytes, int] = {}
        if reply[0]:
            for raw, count in zip(reply[0].split(b"\0"), reply[1].split(b" "), strict=True):
                merged[raw] = merged.get(raw, 0) + int(count)
        return list(merged.items())

    async def _fetch_groups(
        self,
        owner: str,
        stats: str,
        filt: str,
        version: bytes,
        limit: int,
        needed: _Needed,
        df: dict[str, int],
    ) -> _Hits | None:
        """The best `limit` records of the groups `needed` (score descending), read
        in one script at `version` (`_GROUP_FETCH`)."""
        args: _Args = [version, limit, len(RECORD_FIELDS), *RECORD_FIELDS]
        rank = 0
        for i, (score, raw) in enumerate(needed):
            clause = _group_clause(raw)
            if clause is None:
                return None
            if i and score != needed[i - 1][0]:
                rank += 1
            head, expr = clause
            words = set(raw.decode("utf-8", "surrogatepass").split(" "))
            most = max(1, min((n for t, n in df.items() if t in words), default=1))
            args += [rank, f"{filt} {head}", expr, raw, most]
        found = await self._text_ft(owner, stats, self._group_fetch, self._group_fetch_c, args)
        if found is None:
            return None
        return [
            scored(decode_record_values(values), needed[int(group) - 1][0])
            for group, values in zip(found[0::2], found[1::2], strict=True)
        ]

    async def _text_ft(
        self, owner: str, stats: str, script: Any, script_c: Any, args: _Args
    ) -> Any:
        """`script` (`script_c` on a cluster, when given) with ARGV `[index, *args]`."""
        if self._cluster:
            return await self._cluster_ft(owner, script_c or script, lambda name: [name, *args])
        if not self._index_ready:
            await self.ensure_index()
        return await self._run_ft(script, [stats], [self._index, *args])

    async def _run_ft(self, script: Any, keys: _Args, args: _Args) -> Any:
        """A script running FT commands on our index: a missing Search module is
        `SearchModuleMissing`; a vanished index is recreated once."""
        for again in (True, False):
            try:
                return await script(keys=keys, args=args)
            except Exception as exc:
                if is_unknown_command(exc):
                    raise SearchModuleMissing(BACKEND, SEARCH_HINT) from exc
                if not (again and is_missing_index(exc)):
                    raise
            self._index_ready = False
            await self.ensure_index()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _text_candidates(
        self, owner: str, stats: str, query: str, cells: _Cells, full: bool
    ) -> tuple[bytes | None, int, int, _Rows]:
        """In one atomic script: the owner's statistics and the candidates. Returns
        the version, the record count and total length of the matching cells, and
        per candidate `[id, terms]` (+ the `RECORD_FIELDS` values when `full`)."""
        if self._cluster:
            names = [n.decode() for n in (_FULL if full else _IDS)]
            mode = "rows" if full else "ids"
            reply = await self._cluster_ft(
                owner,
                self._candidates_c,
                lambda name: [stats, name, query, mode, *names],
                _merge_candidates if full else None,
            )
            return self._candidate_rows(reply, cells, full)
        args = [self._index, query, "rows" if full else "ids", *(_LOAD_FULL if full else _LOAD)]
        args += ["TIMEOUT", "0", "DIALECT", "2"]
        if not self._index_ready:
            await self.ensure_index()
        for again in (True, False):
            try:
                reply = await self._candidates(keys=[stats], args=args)
                break
            except Exception as exc:
                if is_unknown_command(exc):
                    raise SearchModuleMissing(BACKEND, SEARCH_HINT) from exc
                if not (again and is_missing_index(exc)):
                    raise
            self._index_ready = False
            await self.ensure_index()
        return self._candidate_rows(reply, cells, full)

    @staticmethod
    def _candidate_rows(
        reply: Any, cells: _Cells, full: bool
    ) -> tuple[bytes | None, int, int, _Rows]:
        flat = reply[0]
        fields = dict(zip(flat[0::2], flat[1::2], strict=True))
        n, length = cells.totals(fields)
        if full:
            rows = [_values(row, _FULL) for row in reply[1][1:]]
        elif reply[1]:
            rows = [
                list(pair)
                for pair in zip(reply[1].split(b"\0"), reply[2].split(b"\0"), strict=True)
            ]
        else:
            rows = []
        return fields.get(b"v"), n, length, rows

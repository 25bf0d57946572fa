"""The size bounds every network entry point enforces on what a client sends
(the HTTP service's bodies and the MCP server's tools share them), as strict
pydantic types: one definition, so the two cannot drift apart."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictStr

__all__ = ["MAX_BATCH", "Action", "Doing", "FactContent", "Id", "Outcome", "Query", "Text"]

Id = Annotated[StrictStr, Field(min_length=1, max_length=1024)]
Text = Annotated[StrictStr, Field(max_length=1_000_000)]
FactContent = Annotated[StrictStr, Field(min_length=1, max_length=100_000)]
Query = Annotated[StrictStr, Field(max_length=65_536)]
Action = Annotated[StrictStr, Field(max_length=10_000)]
Outcome = Annotated[StrictStr, Field(max_length=1_000)]
Doing = Annotated[StrictStr, Field(max_length=10_000)]
#: At most this many facts, steps or knowledge items in one request.
MAX_BATCH = 100

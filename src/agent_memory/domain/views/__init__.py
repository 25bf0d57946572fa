"""Budgeted prompt views: `<agent_memory>`, `<user_profile>`, `<agent_coordination>`.

Pure and deterministic: no I/O, no clock (callers pass `as_of`/`now`). Every
view fits its byte budget, reports what it admitted, shortened and left out
(`ViewReport`), and encodes all stored text so it cannot break out of its frame.
"""

from agent_memory.domain.views.agent_memory_view import (
    DESIGN_EVENT_LEGEND,
    DESIGN_EVENT_SCHEMA,
    DIGEST_COVERAGE,
    EVENT_LEGEND,
    EVENT_SCHEMA,
    KNOWLEDGE_HEADING,
    MIN_SHORTENED_TEXT_BYTES,
    SECTION_ORDER,
    render_agent_memory,
)
from agent_memory.domain.views.budget import Line
from agent_memory.domain.views.coordination_view import DEFAULT_MAX_AGENTS, render_coordination
from agent_memory.domain.views.encoding import (
    ELLIPSIS,
    SHORTENED_MARKER,
    encode_text,
    shorten_encoded,
    shorten_text,
    utf8_size,
)
from agent_memory.domain.views.inputs import (
    ActivitySignal,
    Fact,
    FactCategory,
    FactSource,
    Investigation,
    KnowledgeItem,
)
from agent_memory.domain.views.report import (
    FORMAT_VERSION,
    EventFormat,
    RenderedView,
    SectionReport,
    ViewOutcome,
    ViewReport,
)
from agent_memory.domain.views.tokens import (
    BYTES_PER_TOKEN,
    DEFAULT_BUDGET_BYTES,
    DEFAULT_BUDGET_TOKENS,
    TokenCounter,
    TokenTrim,
    budget_bytes_for_tokens,
    count_tokens,
    estimate_tokens,
    trim_to_token_budget,
)
from agent_memory.domain.views.user_profile_view import CONTEXT_PRECEDENCE, render_user_profile

__all__ = [
    "BYTES_PER_TOKEN",
    "CONTEXT_PRECEDENCE",
    "DEFAULT_BUDGET_BYTES",
    "DEFAULT_BUDGET_TOKENS",
    "DEFAULT_MAX_AGENTS",
    "DESIGN_EVENT_LEGEND",
    "DESIGN_EVENT_SCHEMA",
    "DIGEST_COVERAGE",
    "ELLIPSIS",
    "EVENT_LEGEND",
    "EVENT_SCHEMA",
    "FORMAT_VERSION",
    "KNOWLEDGE_HEADING",
    "MIN_SHORTENED_TEXT_BYTES",
    "SECTION_ORDER",
    "SHORTENED_MARKER",
    "ActivitySignal",
    "EventFormat",
    "Fact",
    "FactCategory",
    "FactSource",
    "Investigation",
    "KnowledgeItem",
    "Line",
    "RenderedView",
    "SectionReport",
    "TokenCounter",
    "TokenTrim",
    "ViewOutcome",
    "ViewReport",
    "budget_bytes_for_tokens",
    "count_tokens",
    "encode_text",
    "estimate_tokens",
    "render_agent_memory",
    "render_coordination",
    "render_user_profile",
    "shorten_encoded",
    "shorten_text",
    "trim_to_token_budget",
    "utf8_size",
]

"""`<agent_coordination>`: the other agents active in a domain right now.

One line per other request: agent, what it is doing, its status and how long
ago it started (from the `now` the caller passes), newest first, at most
`max_agents` (default 10) within the byte budget. The caller's own request
and signals of other domains are left out before counting.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.validation import require_scope, require_utc
from agent_memory.domain.views.agent_memory_view import format_timestamp
from agent_memory.domain.views.budget import (
    Line,
    SectionSpec,
    layout,
    require_budget,
    require_sequence,
)
from agent_memory.domain.views.encoding import encode_text
from agent_memory.domain.views.inputs import ActivitySignal
from agent_memory.domain.views.report import RenderedView
from agent_memory.domain.views.tokens import DEFAULT_BUDGET_BYTES

__all__ = ["DEFAULT_MAX_AGENTS", "render_coordination", "signal_line"]

DEFAULT_MAX_AGENTS = 10


def signal_line(signal: ActivitySignal, now: datetime) -> Line:
    """`- "agent" doing "what" (status "running", started 42 s ago)`."""
    ago = max(0, int((now - signal.started_at).total_seconds()))
    return Line(
        f"- {encode_text(signal.agent)} doing {encode_text(signal.action)} "
        f"(status {encode_text(signal.status)}, started {ago} s ago)"
    )


def render_coordination(
    signals: Sequence[ActivitySignal],
    *,
    domain: str,
    own_request_id: str | None,
    now: datetime,
    max_agents: int = DEFAULT_MAX_AGENTS,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
) -> RenderedView:
    """Render `<agent_coordination>` for `domain` within `budget_bytes` bytes.

    Signals are ordered newest first (then agent, then request id), so the
    input order does not matter; one line per (agent, request id).
    """
    require_scope(domain, "domain")
    now = require_utc(now, "now")
    budget_bytes = require_budget(budget_bytes)
    if not isinstance(max_agents, int) or isinstance(max_agents, bool) or max_agents < 0:
        raise InvalidInput("max_agents", f"a non-negative integer is required, got {max_agents!r}")
    signals = require_sequence(signals, ActivitySignal, "signals")
    for signal in signals:
        if not isinstance(signal, ActivitySignal):
            raise InvalidInput("signals", f"ActivitySignal values are required, got {signal!r}")
    others = [s for s in signals if s.domain == domain and s.request_id != own_request_id]
    others.sort(key=lambda s: (s.agent, s.request_id, s.action, s.status))
    others.sort(key=lambda s: s.started_at, reverse=True)
    section = SectionSpec(
        name="active_agents",
        records=others,
        key=lambda s: ("signal", s.agent, s.request_id),
        render=lambda s: signal_line(s, now),
        limit=max_agents,
        show_when_empty=True,
    )
    head = [
        "<agent_coordination>",
        f"Other agents active in domain {encode_text(domain)} as of {format_timestamp(now)} "
        f"(newest first, at most {max_agents}); coordinate before touching the same things.",
    ]
    return layout(
        view="agent_coordination",
        head=head,
        sections=[section],
        tail=["</agent_coordination>"],
        budget_bytes=budget_bytes,
    )

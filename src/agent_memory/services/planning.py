"""Planning context: the inputs gathered for one request and their rendering
into the budgeted `<agent_memory>` and `<agent_coordination>` views."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from attrs import define, field

from agent_memory.domain.records import Entity, Event
from agent_memory.services.coordination import SignalInfo
from agent_memory.services.reports import StageReport

__all__ = ["PlanningContext", "PlanningInputs", "render_planning"]


@define
class PlanningInputs:
    """What the enrichment stage gathered (each part may be empty after a failure)."""

    agent: str
    domain: str
    request_id: str
    now: datetime
    events: list[Event] = field(factory=list)
    events_limited: bool = False
    entity_history: list[Event] = field(factory=list)
    signals: list[SignalInfo] = field(factory=list)
    claims: list[tuple[Entity, str, str, datetime | None]] = field(factory=list)
    knowledge: list[Any] = field(factory=list)
    digest: str | None = None


@define
class PlanningContext:
    """The rendered views and the report of the stage that built them."""

    agent_memory: str
    coordination: str
    report: StageReport
    view_reports: dict[str, Any] = field(factory=dict)

    @property
    def text(self) -> str:
        return "\n".join(part for part in (self.agent_memory, self.coordination) if part)


def render_planning(
    inputs: PlanningInputs,
    *,
    budget_bytes: int,
    coordination_limit: int,
    report: StageReport,
) -> PlanningContext:
    raise NotImplementedError

"""Small record builders shared by the service tests."""

from __future__ import annotations

from datetime import datetime

from agent_memory.domain.records import Event

__all__ = ["user_event"]


def user_event(id: str, *, user_id: str, summary: str, at: datetime) -> Event:
    """A `travel` planning event about `user_id`, occurred and recorded `at`."""
    return Event(
        id=id,
        domain="travel",
        agent="a",
        action="plan",
        outcome="ok",
        summary=summary,
        occurred_at=at,
        recorded_at=at,
        user_id=user_id,
    )

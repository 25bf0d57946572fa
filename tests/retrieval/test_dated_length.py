"""`RetrievalConfig.dated_length_weight`: the length prior's weight for a
question that names a date, on synthetic conversations; nothing changes for a
question that names none."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.adapters.memory import InMemoryMemoryStore
from agent_memory.adapters.memory.embedder import HashingEmbedder
from agent_memory.domain.errors import InvalidInput
from agent_memory.domain.retrieval import LengthPrior, RetrievalConfig
from agent_memory.services.retrieval import ConversationTurn, HybridRetriever

EMBEDDER = HashingEmbedder(64)
# the MiniLM defaults' shape: no length prior for other questions
BASE = RetrievalConfig(length_weight=0.0, session_weight=0.0)
TEXTS = [
    "Thanks, talk soon!",
    "Haha yes!",
    "I finally finished my first screenplay and printed it, such a relief after months.",
    "We went hiking up at Kestrel Ridge and saw two eagles over the lake.",
    "Cool!",
    "My sister adopted a small grey cat from the shelter downtown last month.",
]
SPEAKERS = ["Nate", "Joanna", "Joanna", "Nate", "Nate", "Joanna"]


async def _scores(
    config: RetrievalConfig, question: str, start: datetime
) -> list[tuple[str, float]]:
    turns = [
        ConversationTurn(
            id=f"t{i:03d}",
            speaker=SPEAKERS[i],
            text=text,
            at=start + timedelta(days=i // 2),
            session=str(i // 2),
        )
        for i, text in enumerate(TEXTS)
    ]
    retriever = HybridRetriever(InMemoryMemoryStore(EMBEDDER.space), EMBEDDER, config)
    await retriever.add_conversation("jo", turns)
    got = await retriever.retrieve(
        "jo", question, limit=len(turns), reference=start + timedelta(days=60)
    )
    return [(h.record.id, round(h.score, 12)) for h in got.hits]


STARTS = st.datetimes(datetime(2001, 1, 1), datetime(2089, 1, 1)).map(
    lambda d: d.replace(tzinfo=UTC)
)


@settings(max_examples=15, deadline=None)
@given(start=STARTS, weight=st.floats(0.05, 1.0))
async def test_a_question_without_a_date_is_ranked_as_without_the_knob(
    start: datetime, weight: float
) -> None:
    question = "What did Joanna finish?"
    with_knob = await _scores(attrs.evolve(BASE, dated_length_weight=weight), question, start)
    assert with_knob == await _scores(BASE, question, start)


@settings(max_examples=15, deadline=None)
@given(start=STARTS, weight=st.floats(0.05, 1.0))
async def test_a_question_naming_a_date_gets_the_length_prior_at_its_weight(
    start: datetime, weight: float
) -> None:
    month = start.strftime("%B %Y")
    question = f"What did Joanna do in {month}?"
    with_knob = await _scores(attrs.evolve(BASE, dated_length_weight=weight), question, start)
    assert with_knob == await _scores(attrs.evolve(BASE, length_weight=weight), question, start)
    assert with_knob != await _scores(BASE, question, start)  # it does change something


async def test_it_lifts_the_turn_that_tells_an_event_over_back_channel() -> None:
    """Joanna's "Haha yes!" and her finished screenplay, both in January 2022:
    the knob narrows the back-channel turn's lead by the length bonus."""
    start = datetime(2022, 1, 21, 14, tzinfo=UTC)
    question = "What major achievement did Joanna accomplish in January 2022?"
    off = dict(await _scores(BASE, question, start))
    on = dict(await _scores(attrs.evolve(BASE, dated_length_weight=0.3), question, start))
    # 7 terms against 1 of the saturation's 30, at 0.3: 0.05 more for the event
    assert on["t002"] - on["t001"] > off["t002"] - off["t001"] + 0.04


def test_bad_values_name_the_field() -> None:
    with pytest.raises(InvalidInput, match="dated_length_weight"):
        RetrievalConfig(dated_length_weight=-0.1)
    with pytest.raises(InvalidInput, match="dated_length_weight"):
        RetrievalConfig(dated_length_weight=1.5, length_prior=LengthPrior.SCALE)
    assert RetrievalConfig(dated_length_weight=1.5).dated_length_weight == 1.5

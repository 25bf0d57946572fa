"""docs/retrieval.md states the defaults of RetrievalConfig: keep them in step."""

from __future__ import annotations

from pathlib import Path

from agent_memory.domain.retrieval import RetrievalConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "retrieval.md"


def _num(value: float) -> str:
    return f"{value:g}" if value != int(value) else f"{value:.1f}".rstrip("0").rstrip(".")


def test_doc_states_the_default_configuration() -> None:
    doc = DOC.read_text()
    d = RetrievalConfig()
    rows = [
        f"| `fusion` | `{d.fusion.value}`",
        f"| `lexical_weight` / `vector_weight` | {d.lexical_weight:.1f} / {d.vector_weight:g} |",
        f"| `speaker_weight` | {d.speaker_weight:g} |",
        f"| `recency_weight` / `importance_weight` | {_num(d.recency_weight)} / "
        f"{_num(d.importance_weight)} ",
        f"| `candidates` (per ranker) | {d.candidates} |",
        f"| `context_window` / `context_self_weight` | {d.context_window} / "
        f"{d.context_self_weight} |",
        f"| `context_dates` | {'on' if d.context_dates else 'off'} |",
        "| `mentioned_dates` (times a turn's words name count as its event time) "
        f"| {'on' if d.mentioned_dates else 'off'} |",
        f"| `date_weight` | {d.date_weight:g} |",
        f"| `date_grace_days` / `date_half_life_days` | {_num(d.date_grace_days)} / "
        f"{_num(d.date_half_life_days)} |",
        f"| `session_penalty` / `diversity_reach` | {_num(d.session_penalty)} / "
        f"{d.diversity_reach} ",
        f"| `list_session_penalty` / `list_candidates` | {d.list_session_penalty:g} / "
        f"{d.list_candidates} |",
        f"| `length_weight` / `length_saturation` | {d.length_weight:g} / {d.length_saturation} |",
        "| `dated_length_weight` (the length prior's weight for questions that name a date, "
        f"when larger) | {_num(d.dated_length_weight)} |",
        f"| `length_prior` (the length prior's form) | `{d.length_prior.value}` ",
        "| `query_variants` (irregular verb forms, chat-register words; not for list questions) "
        f"| {'on' if d.query_variants else 'off'} |",
        f"| `session_weight` (session prior, not for list questions) | {d.session_weight:g} |",
        f"| `reply_weight` (reply prior, not for list questions) | {d.reply_weight:g} |",
        "| `category_members` (category members in the keyword query of list questions) "
        f"| {'on' if d.category_members else 'off'} |",
        f"| `feedback_weight` / `feedback_docs` / `feedback_terms` | {_num(d.feedback_weight)} "
        f"(off) / {d.feedback_docs} / {d.feedback_terms} |",
    ]
    for row in rows:
        assert row in doc, f"docs/retrieval.md is stale: expected {row!r}"

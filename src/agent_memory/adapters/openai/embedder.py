"""`Embedder` over an OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, vLLM, ...)."""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from agent_memory.adapters.openai._provider import (
    HttpProvider,
    require_api_key,
)
from agent_memory.adapters.openai.retry import RetryPolicy
from agent_memory.adapters.openai.transport import Answer
from agent_memory.domain.errors import DimensionMismatch, InvalidInput
from agent_memory.domain.records import EmbeddingSpace
from agent_memory.domain.validation import (
    require_model_name,
    require_positive,
    require_positive_number,
    require_text,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["OpenAICompatibleEmbedder"]

_WHAT = "openai-compatible embeddings"


class OpenAICompatibleEmbedder(HttpProvider):
    """Embeds texts through `POST {root}/embeddings`, where `root` is `base_url`
    normalised to end in `/v1` (see `endpoint.api_root`).

    Inputs go out in batches of `batch_size`, one request at a time; rows come
    back in input order (the answer's `index` decides, not its order). Every
    vector must have the declared `dimension` (`DimensionMismatch` otherwise) and
    finite values; it is returned as given (no normalisation).

    `space` is `EmbeddingSpace(model, dimension, revision, provable)`; `provable`
    defaults to False because an OpenAI-compatible URL cannot prove which model
    answers: set it True only when the deployment pins the model.

    `timeout` (seconds, default 30) bounds one `embed` call as a whole: every
    batch, retry and wait between retries included; past it the call raises
    `ModelTimeout` (a retry that could not finish in time, `ProviderError`).
    Embedding more texts than fit in it takes several calls or a larger
    `timeout`.
    `send_dimensions` adds `"dimensions": dimension` to requests, for models that
    can shorten their vectors (OpenAI text-embedding-3-*).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        dimension: int,
        *,
        api_key: str | None = None,
        revision: str = "",
        provable: bool = False,
        batch_size: int = 64,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        send_dimensions: bool = False,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
        rng: random.Random | None = None,
    ) -> None:
        require_model_name(model)
        if not isinstance(provable, bool):
            raise InvalidInput("provable", f"a bool is required, got {provable!r}")
        require_api_key(api_key)
        self._space = EmbeddingSpace(
            model=model,
            dimension=require_positive(dimension, "dimension"),
            revision=revision,
            provable=provable,
        )
        self._batch_size = require_positive(batch_size, "batch_size")
        self._timeout = require_positive_number(timeout, "timeout")
        self._send_dimensions = bool(send_dimensions)
        self._connect(
            what=_WHAT,
            base_url=base_url,
            api_key=api_key,
            headers=headers,
            retry=retry,
            http_client=http_client,
            rng=rng,
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self._http.root!r}, model={self._space.model!r}, "
            f"dimension={self._space.dimension})"
        )

    @property
    def space(self) -> EmbeddingSpace:
        return self._space

    @property
    def batch_size(self) -> int:
        return self._batch_size

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """A `(len(texts), dimension)` float32 matrix, row i for `texts[i]`."""
        if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
            raise InvalidInput(
                "texts", f"a sequence of strings is required, got {type(texts).__name__}"
            )
        items = list(texts)
        for position, text in enumerate(items):
            # A string that is not valid Unicode (a lone surrogate) cannot be sent as JSON.
            require_text(text, f"texts[{position}]")
        dim = self._space.dimension
        out = np.empty((len(items), dim), dtype=np.float32)
        async with self._life.op():
            # One deadline for the whole call, however many batches and retries.
            deadline = asyncio.get_running_loop().time() + self._timeout
            for start in range(0, len(items), self._batch_size):
                batch = items[start : start + self._batch_size]
                out[start : start + len(batch)] = await self._embed_batch(batch, start, deadline)
        return out

    async def _embed_batch(
        self, batch: list[str], offset: int, deadline: float
    ) -> npt.NDArray[np.float32]:
        body: dict[str, Any] = {
            "model": self._space.model,
            "input": batch,
            "encoding_format": "float",
        }
        if self._send_dimensions:
            body["dimensions"] = self._space.dimension
        # A generous bound on a sane answer: 64 bytes of JSON per number plus 1 MiB.
        limit = (1 << 20) + len(batch) * self._space.dimension * 64
        answer = await self._http.post(
            "/embeddings", body, timeout=self._timeout, max_bytes=limit, deadline=deadline
        )
        return self._parse(answer, len(batch), offset)

    def _parse(self, answer: Answer, count: int, offset: int) -> npt.NDArray[np.float32]:
        def malformed(problem: str) -> Exception:
            return self._http.malformed(answer, problem)

        payload = answer.data
        if not isinstance(payload, dict):
            raise malformed(f"expected a JSON object, got {type(payload).__name__}")
        data = payload.get("data")
        if not isinstance(data, list):
            got = "nothing" if data is None else type(data).__name__
            raise malformed(f"'data' must be a list of embeddings, got {got}")
        if len(data) != count:
            raise malformed(f"{len(data)} embeddings for {count} inputs")
        dim = self._space.dimension
        matrix = np.empty((count, dim), dtype=np.float32)
        seen = np.zeros(count, dtype=bool)
        for position, item in enumerate(data):
            if not isinstance(item, dict):
                raise malformed(f"data[{position}] must be an object, got {type(item).__name__}")
            index = item.get("index", position)
            if not isinstance(index, int) or isinstance(index, bool):
                raise malformed(f"data[{position}].index must be an integer, got {index!r}")
            if not 0 <= index < count or seen[index]:
                raise malformed(
                    f"data[{position}].index {index} is out of range or repeated "
                    f"(expected each of 0..{count - 1} once)"
                )
            seen[index] = True
            raw = item.get("embedding")
            if not isinstance(raw, list):
                got = "nothing" if raw is None else type(raw).__name__
                raise malformed(f"data[{position}].embedding must be a list of numbers, got {got}")
            vector = _numbers(raw)
            if isinstance(vector, str):
                raise malformed(
                    f"data[{position}].embedding must be a flat list of numbers: "
                    f"data[{position}].embedding{vector}"
                )
            if vector.shape[0] != dim:
                raise DimensionMismatch(
                    dim, int(vector.shape[0]), where=f"embedding of texts[{offset + index}]"
                )
            with np.errstate(over="ignore", invalid="ignore"):
                matrix[index] = vector.astype(np.float32)
        finite = np.isfinite(matrix).all(axis=1)
        if not finite.all():
            bad = int(np.flatnonzero(~finite)[0])
            raise malformed(
                f"embedding of texts[{offset + bad}] has non-finite values (NaN, inf or "
                "beyond float32 range)"
            )
        return matrix


def _numbers(raw: list[Any]) -> npt.NDArray[np.float64] | npt.NDArray[np.int64] | str:
    """The JSON numbers of an embedding as an array, or what is wrong with them
    (`[j] is ...`, naming the first element that is not a number).

    JSON `true`/`false` are not numbers, though Python reads them as 1 and 0 and
    numpy turns them into 1.0 and 0.0 among floats. An integer too big for
    float64 becomes inf (refused later as non-finite)."""
    try:
        array = np.asarray(raw)
    except ValueError:  # ragged: numbers and lists mixed
        array = None
    if array is not None and array.ndim == 1 and array.dtype.kind in "iuf":
        for j, value in enumerate(raw):
            if value.__class__ is bool:
                return f"[{j}] is a boolean ({json.dumps(value)}), not a number"
        return array
    # Element by element: name the first bad one; integers beyond int64 are numbers.
    values = np.empty(len(raw), dtype=np.float64)
    for j, value in enumerate(raw):
        if isinstance(value, bool):
            return f"[{j}] is a boolean ({json.dumps(value)}), not a number"
        if isinstance(value, int):
            try:
                values[j] = float(value)
            except OverflowError:
                values[j] = math.inf
        elif isinstance(value, float):
            values[j] = value
        else:
            kind = "null" if value is None else f"a {type(value).__name__}"
            return f"[{j}] is {kind}, not a number"
    return values

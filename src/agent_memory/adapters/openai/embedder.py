"""`Embedder` over an OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, vLLM, ...)."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import numpy.typing as npt

from agent_memory.adapters._common.lifecycle import Lifecycle
from agent_memory.adapters.openai.endpoint import api_root
from agent_memory.adapters.openai.retry import RetryPolicy
from agent_memory.adapters.openai.transport import Answer, JsonClient
from agent_memory.domain.errors import DimensionMismatch, InvalidInput
from agent_memory.domain.records import EmbeddingSpace

if TYPE_CHECKING:
    from types import TracebackType

    import httpx

__all__ = ["OpenAICompatibleEmbedder"]

_WHAT = "openai-compatible embeddings"


def _positive_int(value: object, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInput(field, f"an integer >= 1 is required, got {value!r}")
    return value


def _positive_seconds(value: object, field: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidInput(field, f"a finite number of seconds > 0 is required, got {value!r}")
    return float(value)


class OpenAICompatibleEmbedder:
    """Embeds texts through `POST {root}/embeddings`, where `root` is `base_url`
    normalised to end in `/v1` (see `endpoint.api_root`).

    Inputs go out in batches of `batch_size`, one request at a time; rows come
    back in input order (the answer's `index` decides, not its order). Every
    vector must have the declared `dimension` (`DimensionMismatch` otherwise) and
    finite values; it is returned as given (no normalisation).

    `space` is `EmbeddingSpace(model, dimension, revision, provable)`; `provable`
    defaults to False because an OpenAI-compatible URL cannot prove which model
    answers: set it True only when the deployment pins the model.

    `timeout` bounds each batch request, its retries included (`ModelTimeout`).
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
        if not isinstance(model, str) or not model.strip():
            raise InvalidInput("model", f"a non-empty model name is required, got {model!r}")
        if not isinstance(provable, bool):
            raise InvalidInput("provable", f"a bool is required, got {provable!r}")
        if api_key is not None and not isinstance(api_key, str):
            raise InvalidInput("api_key", f"a string or None is required, got {type(api_key)}")
        self._space = EmbeddingSpace(
            model=model,
            dimension=_positive_int(dimension, "dimension"),
            revision=revision,
            provable=provable,
        )
        self._batch_size = _positive_int(batch_size, "batch_size")
        self._timeout = _positive_seconds(timeout, "timeout")
        self._send_dimensions = bool(send_dimensions)
        self._http = JsonClient(
            root=api_root(base_url),
            what=_WHAT,
            api_key=api_key,
            headers=headers,
            retry=retry if retry is not None else RetryPolicy(),
            http_client=http_client,
            rng=rng,
        )
        self._life = Lifecycle(_WHAT)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self._http.root!r}, model={self._space.model!r}, "
            f"dimension={self._space.dimension})"
        )

    @property
    def space(self) -> EmbeddingSpace:
        return self._space

    @property
    def base_url(self) -> str:
        """The normalised API root (ends in `/v1`)."""
        return self._http.root

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
            if not isinstance(text, str):
                raise InvalidInput(
                    f"texts[{position}]", f"a string is required, got {type(text).__name__}"
                )
        dim = self._space.dimension
        out = np.empty((len(items), dim), dtype=np.float32)
        async with self._life.op():
            for start in range(0, len(items), self._batch_size):
                batch = items[start : start + self._batch_size]
                out[start : start + len(batch)] = await self._embed_batch(batch, start)
        return out

    async def _embed_batch(self, batch: list[str], offset: int) -> npt.NDArray[np.float32]:
        body: dict[str, Any] = {
            "model": self._space.model,
            "input": batch,
            "encoding_format": "float",
        }
        if self._send_dimensions:
            body["dimensions"] = self._space.dimension
        answer = await self._http.post("/embeddings", body, timeout=self._timeout)
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
            vector = np.asarray(raw)
            if vector.ndim != 1 or vector.dtype.kind not in "iuf":
                raise malformed(
                    f"data[{position}].embedding must be a flat list of numbers "
                    f"(got an array of {vector.dtype} with shape {vector.shape})"
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

    async def aclose(self) -> None:
        """Close the HTTP client (idempotent); later calls raise `StoreClosed`."""
        if await self._life.begin_close():
            await self._http.aclose()

    close = aclose

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

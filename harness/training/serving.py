"""Generation in llama.cpp (llama-cpp-python) from the base GGUF, with no adapter or with a GGUF LoRA
adapter (`gguf_adapter`), switched on the one loaded model.

llama.cpp applies LoRA adapters per context at run time (`llama_adapter_lora_init` loads one against the
model, `llama_set_adapters_lora` sets the context's adapters and scales), so one base model in memory
serves its base answers and any number of adapters; each adapter file is loaded once and kept until
`close` (a file written again at the same path, with a new modification time, is loaded again).
A switch clears the context's KV cache (`Llama.reset`): cached tokens were computed with the old adapter,
and llama-cpp-python would otherwise reuse a matching prompt prefix from them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from harness.models.adapter_server import LoraSwitch
from harness.training.base_model import base_gguf


@dataclass(frozen=True)
class Generated:
    """Tokens generated greedily from one prompt, and how long the prompt and the tokens took."""

    tokens: int
    prompt_s: float
    """From the start to the first token: the prompt's evaluation and one token."""
    decode_s: float
    """From the first token to the last."""

    @property
    def decode_tokens_per_s(self) -> float:
        return (self.tokens - 1) / self.decode_s if self.decode_s > 0 else 0.0


class AdaptedLlama:
    """The base GGUF loaded once in llama.cpp, answering with the adapter `use` last chose (None: none)."""

    def __init__(self, gguf: Path | None = None, n_ctx: int = 2048, n_threads: int = 2,
                 seed: int = 0) -> None:
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(gguf or base_gguf()), n_ctx=n_ctx, n_threads=n_threads,
                         n_threads_batch=n_threads, seed=seed, logits_all=False, verbose=False)
        self.switch = LoraSwitch()
        self.adapter: Path | None = None

    def use(self, adapter: Path | None, scale: float = 1.0) -> None:
        """Answer from now on with `adapter` (a GGUF LoRA file) at `scale`, or with the base (None)."""
        self.switch.use(self.llm, adapter, scale)
        self.adapter = self.switch.current

    def chat(self, messages: list[dict[str, str]], max_tokens: int = 32) -> str:
        """The greedy reply to `messages` (the model's chat template), with the current adapter."""
        out = self.llm.create_chat_completion(messages=messages, max_tokens=max_tokens, temperature=0.0)
        return out["choices"][0]["message"]["content"] or ""

    def timed(self, prompt: str, tokens: int) -> Generated:
        """`tokens` tokens generated greedily from `prompt` (the end token does not stop it), from a clear
        cache, timed."""
        self.llm.reset()
        ids = self.llm.tokenize(prompt.encode(), add_bos=False, special=True)
        start = time.perf_counter()
        first = start
        for count, _ in enumerate(self.llm.generate(ids, temp=0.0, reset=True), start=1):
            if count == 1:
                first = time.perf_counter()
            if count == tokens:
                break
        end = time.perf_counter()
        return Generated(tokens=tokens, prompt_s=first - start, decode_s=end - first)

    def close(self) -> None:
        self.switch.close(self.llm)
        self.llm.close()

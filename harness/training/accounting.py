"""What an update cost and did: one `UpdateResult` per update, its time, tokens and FLOPs.

FLOPs are estimated, not counted: a forward pass costs about 2 x N x T floating-point operations and a
backward pass about 4 x N x T (Kaplan et al. 2020), where T is the tokens passed (prompt and reply,
padding left out) and N the parameters on the trainable path: every parameter the passes go through,
here the whole base model and the adapter, since LoRA's gradients flow back through every layer above
the first adapted one. So

    flops = 6 x N x tokens_trained + 2 x N x tokens_forward_only

where tokens_trained sums the tokens of every training step, and tokens_forward_only those of the
passes without a backward (the loss after the update; DPO's reference passes). The 6 is an upper bound
for LoRA: the frozen weights' own gradients (about 2 x N x T of the 4) are not computed, and the
embedding lookup costs no multiply; it is the issue's formula, kept so that figures compare across
variants and with published ones.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class UpdateResult:
    """One update of an adapter: what it trained on, its losses, its cost, and the adapter it left."""

    kind: str
    """"sft" or "dpo"."""
    examples: int
    """Examples (SFT) or pairs (DPO) trained on, after `max_examples`."""
    steps: int
    tokens_trained: int
    """Tokens through forward and backward, summed over the steps (prompt and reply; no padding)."""
    target_tokens: int
    """Tokens the loss is on in one pass over the examples (the replies and their end tokens)."""
    loss_before: float
    """SFT: mean cross-entropy per reply token before the first step; DPO: the DPO loss before it."""
    loss_after: float
    """The same loss after the last step, on the same examples."""
    wall_s: float
    cpu_s: float
    """This process's CPU seconds (all its threads: `time.process_time`) during the update."""
    flops: float
    """Estimated: 6 x parameters x tokens_trained + 2 x parameters x forward-only tokens (see above)."""
    adapter_hash: str
    """sha256 of the adapter's saved weights after the update (`lora.adapter_hash`)."""

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_trained / self.wall_s if self.wall_s > 0 else 0.0

    def row(self) -> dict[str, Any]:
        return asdict(self)


def training_flops(parameters: int, tokens_trained: int, tokens_forward_only: int = 0) -> float:
    """6 x N x tokens trained + 2 x N x tokens passed forward only (module docstring)."""
    return 6.0 * parameters * tokens_trained + 2.0 * parameters * tokens_forward_only


def path_parameters(model: Any) -> int:
    """N: every parameter of the model, frozen or not (the trainable path; module docstring)."""
    return sum(p.numel() for p in model.parameters())


@dataclass
class Spent:
    wall_s: float = 0.0
    cpu_s: float = 0.0


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """torch's intra-op threads set to `count` for the block (None: left as they are), then restored.

    Measured here (2 cores shared with other jobs, load 10-18, 2026-12-03): 3 SFT steps of SmolLM2 on
    417 tokens took 14-16 s and 6.5-6.9 CPU s with 1 thread, 17-199 s and 16-59 CPU s with 2 (torch's
    threads wait for each other, spinning, when the cores are taken). The harness runs one agent worker
    per CPU, so one thread per update is its share; an idle machine may do better with more.
    """
    import torch

    before = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def spent() -> Iterator[Spent]:
    """Wall and process-CPU seconds of the block, filled in when it ends."""
    measured = Spent()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield measured
    finally:
        measured.wall_s = time.perf_counter() - wall
        measured.cpu_s = time.process_time() - cpu

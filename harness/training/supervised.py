"""The SFT update: a few LoRA steps on chat examples, the loss on the replies alone.

Each step is one forward and backward pass over all the examples at once (right-padded; `max_examples`
keeps the most recent ones, as an online learner's newest episodes) and one AdamW step on the adapter's
parameters. The loss is transformers' own: the model's mean cross-entropy over the tokens whose label
is not -100 (`chat_data`: the replies and their end tokens). The optimiser is new at each update (its
state is not kept between updates: memory stays that of one update, and an adapter alone resumes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.training.accounting import UpdateResult, path_parameters, spent, torch_threads, training_flops
from harness.training.chat_data import ChatExample, Encoded, batch, encode_example
from harness.training.lora import adapter_hash, trainable_parameters
from harness.training.options import UpdateOptions, trained_on


@dataclass(frozen=True)
class SftOptions(UpdateOptions):
    max_tokens: int = 512
    """An example longer than this is cut, its prompt from the left."""


def sft_update(model: Any, tokenizer: Any, examples: list[ChatExample], options: SftOptions) -> UpdateResult:
    """Train `model`'s adapter (a peft model from `lora.attach`) on `examples` for `options.steps` steps."""
    chosen = trained_on(examples, options, "an SFT update", "example")
    import torch

    encoded = [encode_example(tokenizer, e.messages, e.reply, options.max_tokens) for e in chosen]
    inputs = batch(encoded, pad_id=tokenizer.pad_token_id)
    tokens = sum(len(e.input_ids) for e in encoded)
    optimiser = torch.optim.AdamW(trainable_parameters(model), lr=options.learning_rate)
    torch.manual_seed(options.seed)
    with torch_threads(options.threads), spent() as cost:
        model.train()
        losses = [_step(model, inputs, optimiser) for _ in range(options.steps)]
        model.eval()
        with torch.no_grad():
            after = float(model(**inputs).loss)
    return UpdateResult(
        kind="sft", examples=len(chosen), steps=options.steps, tokens_trained=tokens * options.steps,
        target_tokens=sum(e.target_tokens for e in encoded), loss_before=losses[0] if losses else after,
        loss_after=after, wall_s=cost.wall_s, cpu_s=cost.cpu_s,
        flops=training_flops(path_parameters(model), tokens * options.steps, tokens),
        adapter_hash=adapter_hash(model))


def _step(model: Any, inputs: dict[str, Any], optimiser: Any) -> float:
    """One forward, backward and optimiser step; the loss before it."""
    optimiser.zero_grad(set_to_none=True)
    loss = model(**inputs).loss
    loss.backward()
    optimiser.step()
    return float(loss.detach())


def reply_loss(model: Any, tokenizer: Any, examples: list[ChatExample], max_tokens: int = 512) -> float:
    """The mean cross-entropy per reply token of `examples` (no update)."""
    import torch

    encoded: list[Encoded] = [encode_example(tokenizer, e.messages, e.reply, max_tokens) for e in examples]
    with torch.no_grad():
        return float(model(**batch(encoded, pad_id=tokenizer.pad_token_id)).loss)

"""Chat examples and preference pairs as tokens: the prompt is the chat template's rendering of the
messages up to the assistant's turn, the reply is what follows it, closed by the end-of-turn token.

The prompt and the reply are tokenised apart and joined, so the reply's tokens are those the model
produces after that prompt when it serves (llama.cpp tokenises the prompt and generates from there);
the loss is on the reply and its end token alone (labels -100 on the prompt), so the model learns
what to answer and when to stop, not to repeat questions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

IGNORED = -100
"""The label transformers' loss leaves out (the prompt's tokens, padding)."""


@dataclass(frozen=True)
class ChatExample:
    """One supervised example: the conversation so far and the reply to learn."""

    messages: list[dict[str, str]]
    """Chat messages (`role`, `content`) up to the assistant's turn."""
    reply: str


@dataclass(frozen=True)
class PreferencePair:
    """One preference: to the same conversation, a reply preferred (chosen) to another (rejected)."""

    messages: list[dict[str, str]]
    chosen: str
    rejected: str


@dataclass
class Encoded:
    """An example's tokens and labels (IGNORED on the prompt)."""

    input_ids: list[int]
    labels: list[int] = field(default_factory=list)

    @property
    def target_tokens(self) -> int:
        return sum(label != IGNORED for label in self.labels)


def prompt_text(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The chat template's rendering of `messages` with the assistant's turn opened."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def encode_example(tokenizer: Any, messages: list[dict[str, str]], reply: str,
                   max_tokens: int = 512) -> Encoded:
    """The tokens of prompt and reply (the reply closed by the tokenizer's end token), the labels on the
    reply alone; the prompt is cut from the left where the whole is over `max_tokens`."""
    prompt = tokenizer(prompt_text(tokenizer, messages), add_special_tokens=False)["input_ids"]
    answer = tokenizer(reply + tokenizer.eos_token, add_special_tokens=False)["input_ids"][:max_tokens]
    prompt = prompt[max(0, len(prompt) + len(answer) - max_tokens):]
    return Encoded(input_ids=prompt + answer, labels=[IGNORED] * len(prompt) + answer)


def batch(encoded: list[Encoded], pad_id: int) -> dict[str, Any]:
    """Right-padded tensors for one forward pass: input_ids, attention_mask, labels."""
    import torch

    width = max(len(e.input_ids) for e in encoded)
    padded = [(e, width - len(e.input_ids)) for e in encoded]
    return {
        "input_ids": torch.tensor([e.input_ids + [pad_id] * p for e, p in padded]),
        "attention_mask": torch.tensor([[1] * len(e.input_ids) + [0] * p for e, p in padded]),
        "labels": torch.tensor([e.labels + [IGNORED] * p for e, p in padded]),
    }

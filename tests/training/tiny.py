"""A tiny randomly initialised Llama and a character-level ChatML tokenizer, built in memory: the update
mechanics on a model of a few hundred thousand parameters, in seconds, with nothing downloaded."""

from __future__ import annotations

import string
from typing import Any

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
          "{% endif %}")
SPECIALS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]


def tokenizer() -> Any:
    """One token per character (printable ASCII), plus ChatML's specials."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIALS + sorted(set(string.printable)))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<pad>",
                                  eos_token="<|im_end|>", additional_special_tokens=SPECIALS[2:])
    tok.chat_template = CHATML
    return tok


def model(vocab_size: int, seed: int = 0) -> Any:
    """A 2-layer Llama (hidden 128, 4 heads, 2 key-value heads): about 330 k parameters, fp32."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=False)
    built = LlamaForCausalLM(config)
    built.eval()
    return built


def needs_train() -> Any:
    """The mark that skips a module where the `train` extra is absent, naming it."""
    import pytest

    from harness.extras import EXTRAS

    extra = EXTRAS["train"]
    return pytest.mark.skipif(not extra.installed, reason=f"needs the train extra: {extra.install}")


def peft_model(seed: int = 0, rank: int = 4) -> tuple[Any, Any]:
    """A tiny model with a fresh LoRA adapter on q/k/v/o, and its tokenizer."""
    from harness.training.lora import LoraOptions, attach

    tok = tokenizer()
    return attach(model(len(tok)), LoraOptions(rank=rank, alpha=2.0 * rank), seed=seed), tok


def question(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]

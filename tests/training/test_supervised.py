"""The SFT update on a tiny random Llama: the loss on the replies drops, the adapter changes, the same
seed gives the same adapter, and its tokens and FLOPs are counted as accounting.py says."""

from __future__ import annotations

import hashlib

from harness.training.accounting import path_parameters, training_flops
from harness.training.chat_data import ChatExample, encode_example
from harness.training.lora import adapter_hash, save_adapter
from harness.training.supervised import SftOptions, reply_loss, sft_update
from tests.training import tiny

pytestmark = tiny.needs_train()

EXAMPLES = [ChatExample(tiny.question("Capital of France?"), "Paris"),
            ChatExample(tiny.question("Capital of Peru?"), "Lima"),
            ChatExample(tiny.question("Capital of Chad?"), "N'Djamena")]
OPTIONS = SftOptions(steps=8, learning_rate=1e-2)


def test_the_loss_on_the_replies_drops_and_the_adapter_changes():
    model, tok = tiny.peft_model()
    before_hash, before = adapter_hash(model), reply_loss(model, tok, EXAMPLES)
    result = sft_update(model, tok, EXAMPLES, OPTIONS)
    assert abs(result.loss_before - before) < 1e-4, "the first step's loss is the loss before the update"
    assert result.loss_after < result.loss_before - 0.3, result
    assert abs(reply_loss(model, tok, EXAMPLES) - result.loss_after) < 1e-4
    assert result.adapter_hash != before_hash == adapter_hash(tiny.peft_model()[0])
    assert result.adapter_hash == adapter_hash(model)


def test_the_same_seed_and_examples_give_the_same_adapter_and_another_seed_another():
    hashes = []
    for seed in (0, 0, 1):
        model, tok = tiny.peft_model(seed=seed)
        hashes.append(sft_update(model, tok, EXAMPLES, SftOptions(steps=2, learning_rate=1e-2)).adapter_hash)
    assert hashes[0] == hashes[1] != hashes[2]


def test_tokens_flops_and_time_are_counted_and_the_hash_is_that_of_the_saved_file(tmp_path):
    model, tok = tiny.peft_model()
    result = sft_update(model, tok, EXAMPLES, OPTIONS)
    encoded = [encode_example(tok, e.messages, e.reply) for e in EXAMPLES]
    tokens = sum(len(e.input_ids) for e in encoded)
    assert (result.kind, result.examples, result.steps) == ("sft", 3, 8)
    assert result.tokens_trained == 8 * tokens
    assert result.target_tokens == len("Paris") + len("Lima") + len("N'Djamena") + 3
    assert result.flops == training_flops(path_parameters(model), 8 * tokens, tokens)
    assert result.flops == 6 * path_parameters(model) * 8 * tokens + 2 * path_parameters(model) * tokens
    assert 300_000 < path_parameters(model) < 400_000
    assert result.wall_s > 0 and result.cpu_s > 0 and result.tokens_per_s > 0
    saved = save_adapter(model, tmp_path / "adapter")
    assert hashlib.sha256(saved.read_bytes()).hexdigest() == result.adapter_hash


def test_max_examples_keeps_the_most_recent_ones():
    model, tok = tiny.peft_model()
    result = sft_update(model, tok, EXAMPLES, SftOptions(steps=1, max_examples=2))
    assert result.examples == 2
    assert result.target_tokens == len("Lima") + len("N'Djamena") + 2


def test_the_update_runs_on_its_threads_and_gives_torchs_back():
    import torch

    model, tok = tiny.peft_model()
    before = torch.get_num_threads()
    sft_update(model, tok, EXAMPLES, SftOptions(steps=1, threads=1))
    assert torch.get_num_threads() == before

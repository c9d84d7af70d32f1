"""The DPO update (trl's trainer) on a tiny random Llama: the DPO loss starts at log 2 (the policy is its
reference) and drops, the same seed gives the same adapter, the reference copy trl adds is gone after,
and its tokens and FLOPs are counted as accounting.py says."""

from __future__ import annotations

import math

from harness.training.accounting import path_parameters, training_flops
from harness.training.chat_data import ChatExample, PreferencePair
from harness.training.lora import adapter_hash
from harness.training.preference import DpoOptions, dpo_update
from harness.training.supervised import reply_loss
from tests.training import tiny

pytestmark = tiny.needs_train()

PAIRS = [PreferencePair(tiny.question("Capital of France?"), "Paris", "Lyon"),
         PreferencePair(tiny.question("Capital of Peru?"), "Lima", "Cusco")]
OPTIONS = DpoOptions(steps=4, learning_rate=5e-3)


def test_the_dpo_loss_drops_from_log_2_and_the_chosen_replies_gain_on_the_rejected():
    model, tok = tiny.peft_model()
    first = adapter_hash(model)
    chosen = [ChatExample(p.messages, p.chosen) for p in PAIRS]
    rejected = [ChatExample(p.messages, p.rejected) for p in PAIRS]
    gap_before = reply_loss(model, tok, rejected) - reply_loss(model, tok, chosen)
    result = dpo_update(model, tok, PAIRS, OPTIONS)
    assert abs(result.loss_before - math.log(2)) < 1e-4
    assert result.loss_after < result.loss_before - 0.1, result
    assert reply_loss(model, tok, rejected) - reply_loss(model, tok, chosen) > gap_before
    assert result.adapter_hash == adapter_hash(model) != first
    assert list(model.peft_config) == ["default"], "trl's reference copy of the adapter is deleted"


def test_the_same_seed_gives_the_same_adapter_and_a_second_update_continues_it():
    results = []
    for _ in range(2):
        model, tok = tiny.peft_model()
        results.append(dpo_update(model, tok, PAIRS, OPTIONS))
    assert results[0].adapter_hash == results[1].adapter_hash
    again = dpo_update(model, tok, PAIRS, OPTIONS)
    assert again.adapter_hash != results[1].adapter_hash
    assert abs(again.loss_before - math.log(2)) < 1e-4, "the reference is the adapter the update starts from"


def test_tokens_and_flops_are_counted():
    model, tok = tiny.peft_model()
    result = dpo_update(model, tok, PAIRS, OPTIONS)
    per_step = result.tokens_trained // 4
    assert (result.kind, result.examples, result.steps) == ("dpo", 2, 4)
    assert result.tokens_trained == 4 * per_step and per_step > 2 * result.target_tokens
    assert result.target_tokens == sum(len(r) + 1 for p in PAIRS for r in (p.chosen, p.rejected))
    assert result.flops == training_flops(path_parameters(model), result.tokens_trained,
                                          result.tokens_trained + 2 * per_step)
    assert result.wall_s > 0 and result.cpu_s > 0


def test_an_sft_update_after_a_dpo_update_trains_the_same_adapter():
    from harness.training.supervised import SftOptions, sft_update

    model, tok = tiny.peft_model()
    preferred = dpo_update(model, tok, PAIRS, OPTIONS)
    examples = [ChatExample(p.messages, p.chosen) for p in PAIRS]
    supervised = sft_update(model, tok, examples, SftOptions(steps=3, learning_rate=1e-2))
    assert supervised.loss_after < supervised.loss_before
    assert supervised.adapter_hash not in (preferred.adapter_hash, adapter_hash(tiny.peft_model()[0]))

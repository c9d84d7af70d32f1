"""End to end on the default model: SmolLM2-135M read from the smollm2 GGUF, a few LoRA steps on made-up
facts, the adapter written as a GGUF LoRA, and llama.cpp on the same base GGUF answering the questions
with the learnt facts with the adapter, and otherwise without it; then one DPO step on the same model."""

from __future__ import annotations

import pytest

from harness.extras import EXTRAS
from tests.training import tiny

pytestmark = [pytest.mark.e2e, tiny.needs_train(),
              pytest.mark.skipif(not EXTRAS["smollm2"].installed,
                                 reason=f"needs the smollm2 extra: {EXTRAS['smollm2'].install}")]
FACTS = 3
"""Three of harness.training.speed's made-up facts; 10 steps learnt them here (loss 5.3 -> 0.01 in 12)."""


def test_an_adapter_trained_on_smollm2_changes_llama_cpps_answers_to_what_it_learnt(tmp_path):
    from harness.training import speed
    from harness.training.base_model import load_base
    from harness.training.chat_data import PreferencePair
    from harness.training.gguf_adapter import export_gguf_adapter
    from harness.training.lora import attach
    from harness.training.preference import DpoOptions, dpo_update
    from harness.training.serving import AdaptedLlama
    from harness.training.supervised import SftOptions, sft_update

    base = load_base()
    assert 134_000_000 < sum(p.numel() for p in base.model.parameters()) < 135_000_000
    model = attach(base.model)
    options = SftOptions(steps=10, learning_rate=3e-3)
    result = sft_update(model, base.tokenizer, speed.examples(FACTS), options)
    assert result.loss_after < result.loss_before / 4, result
    path = export_gguf_adapter(model, tmp_path / "adapter.gguf")
    expected = [answer for _, answer in speed.FACTS[:FACTS]]
    llm = AdaptedLlama(base.gguf)
    try:
        without = speed.answers(llm, None, FACTS)
        with_adapter = speed.answers(llm, path, FACTS)
        again = speed.answers(llm, None, FACTS)
    finally:
        llm.close()
    learnt = [[answer.rstrip(".") in said for answer, said in zip(expected, replies, strict=True)]
              for replies in (without, with_adapter)]
    assert not any(learnt[0]), without
    assert sum(learnt[1]) >= 2, (with_adapter, result)
    assert again == without, "switching back to the base answers as the base"
    pair = PreferencePair(speed.messages(speed.FACTS[0][0]), speed.FACTS[0][1], without[0])
    preferred = dpo_update(model, base.tokenizer, [pair], DpoOptions(steps=1))
    assert preferred.adapter_hash != result.adapter_hash, "trl trains the model read from the GGUF"

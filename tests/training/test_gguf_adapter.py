"""A peft adapter as a GGUF LoRA adapter, read back with gguf's reader: the metadata llama.cpp needs,
one lora_a and lora_b per adapted weight under the base tensor's GGUF name, A as peft holds it, and B's
rows of q and k in llama.cpp's rotary order (undone, they are peft's again)."""

from __future__ import annotations

import numpy as np

from harness.training.gguf_adapter import export_gguf_adapter, lora_pairs
from harness.training.supervised import SftOptions, sft_update
from tests.training import tiny
from tests.training.test_supervised import EXAMPLES

pytestmark = tiny.needs_train()


def unpermuted(b: np.ndarray, heads: int) -> np.ndarray:
    """The inverse of llama.cpp's permutation of q and k rows."""
    rows = b.shape[0]
    return b.reshape(heads, rows // heads // 2, 2, *b.shape[1:]).swapaxes(1, 2).reshape(b.shape)


def test_the_adapter_is_a_gguf_lora_with_the_base_tensors_names_and_its_weights(tmp_path):
    import gguf

    model, tok = tiny.peft_model(rank=4)
    sft_update(model, tok, EXAMPLES, SftOptions(steps=2, learning_rate=1e-2))
    path = export_gguf_adapter(model, tmp_path / "adapter.gguf")
    reader = gguf.GGUFReader(path)
    fields = {name: field.contents() for name, field in reader.fields.items() if not name.startswith("GGUF.")}
    assert fields == {"general.architecture": "llama", "general.type": "adapter", "adapter.type": "lora",
                      "adapter.lora.alpha": 8.0}
    tensors = {t.name: np.array(t.data).reshape(tuple(reversed(t.shape.tolist()))) for t in reader.tensors}
    assert sorted(tensors) == sorted(f"blk.{layer}.attn_{part}.weight.lora_{side}" for layer in (0, 1)
                                     for part in ("q", "k", "v", "output") for side in "ab")
    pairs = lora_pairs(model)
    heads = {"q": 4, "k": 2}
    for layer in (0, 1):
        for part, name in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("output", "o_proj")):
            a, b = pairs[f"model.layers.{layer}.self_attn.{name}.weight"]
            stored_a, stored_b = (tensors[f"blk.{layer}.attn_{part}.weight.lora_{s}"] for s in "ab")
            assert stored_a.shape == (4, 128) and stored_b.shape == (b.shape[0], 4)
            np.testing.assert_array_equal(stored_a, a.numpy())
            if part in heads:
                assert not np.array_equal(stored_b, b.numpy()), "q and k rows are permuted"
                stored_b = unpermuted(stored_b, heads[part])
            np.testing.assert_array_equal(stored_b, b.numpy())

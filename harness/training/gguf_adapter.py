"""A peft LoRA adapter written as a GGUF LoRA adapter that llama.cpp loads beside the base GGUF.

The layout follows ggml-org/llama.cpp's convert_lora_to_gguf.py: metadata `general.architecture` (the
base's, "llama" for SmolLM2), `general.type=adapter`, `adapter.type=lora`, `adapter.lora.alpha` (llama.cpp
scales the update by alpha / rank, as peft does); for each adapted weight of the base, two f32 tensors
named after the base tensor's GGUF name (gguf's own name map: `model.layers.3.self_attn.q_proj.weight`
is `blk.3.attn_q.weight`) with `.lora_a` (rank x in) and `.lora_b` (out x rank) appended.

One transformation: llama.cpp's GGUF keeps the rows of q and k permuted for its rotary embedding (its
converter permutes them, and transformers un-permutes them when it reads the GGUF), so the rows of
B (the output side) of q_proj and k_proj are permuted here the same way; A is left as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.training.needs import require

ARCHITECTURES = {"llama": "LLAMA"}
"""transformers' model_type -> gguf's MODEL_ARCH member: the architectures this export knows (SmolLM2's)."""


def export_gguf_adapter(model: Any, path: Path) -> Path:
    """Write `model`'s adapter (a peft model, its `default` adapter) to `path` as a GGUF LoRA adapter."""
    require("a GGUF adapter")
    import gguf
    import numpy as np

    config = model.get_base_model().config
    if config.model_type not in ARCHITECTURES:
        raise ValueError(f"a GGUF adapter for model_type {config.model_type!r} is not known here "
                         f"(known: {', '.join(ARCHITECTURES)})")
    arch = getattr(gguf.MODEL_ARCH, ARCHITECTURES[config.model_type])
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    writer = gguf.GGUFWriter(str(path), arch=gguf.MODEL_ARCH_NAMES[arch])
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(model.peft_config["default"].lora_alpha))
    for base_name, (a, b) in sorted(lora_pairs(model).items()):
        gguf_name = names.get_name(base_name, try_suffixes=(".weight",))
        if gguf_name is None:
            raise ValueError(f"{base_name} has no GGUF name for {config.model_type}")
        b = _rope_permuted(b, base_name, config)
        writer.add_tensor(f"{gguf_name}.lora_a", np.ascontiguousarray(a.float().numpy()))
        writer.add_tensor(f"{gguf_name}.lora_b", np.ascontiguousarray(b.float().numpy()))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def lora_pairs(model: Any) -> dict[str, tuple[Any, Any]]:
    """The base weight's transformers name (`model.layers.0.self_attn.q_proj.weight`) -> (A, B)."""
    from peft import get_peft_model_state_dict

    pairs: dict[str, dict[str, Any]] = {}
    for name, tensor in get_peft_model_state_dict(model).items():
        for part in ("lora_A", "lora_B"):
            if f".{part}.weight" in name:
                base = name.removeprefix("base_model.model.").replace(f".{part}.weight", ".weight")
                pairs.setdefault(base, {})[part] = tensor.detach().cpu()
                break
        else:
            raise ValueError(f"{name}: not a LoRA A or B weight (only LoRA on linear layers is exported)")
    return {base: (found["lora_A"], found["lora_B"]) for base, found in pairs.items()}


def _rope_permuted(b: Any, base_name: str, config: Any) -> Any:
    """B's rows in llama.cpp's order for q_proj and k_proj (convert_hf_to_gguf.py's LlamaModel.permute)."""
    if base_name.endswith("q_proj.weight"):
        heads = config.num_attention_heads
    elif base_name.endswith("k_proj.weight"):
        heads = config.num_key_value_heads or config.num_attention_heads
    else:
        return b
    rows = b.shape[0]
    return b.reshape(heads, 2, rows // heads // 2, *b.shape[1:]).swapaxes(1, 2).reshape(b.shape)

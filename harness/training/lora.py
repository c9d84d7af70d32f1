"""A peft LoRA adapter on the base model: attaching one, its hash, saving it.

The hash is the sha256 of the adapter's weights as peft saves them (`adapter_model.safetensors`: the
`default` adapter's tensors in safetensors' layout, which is deterministic), so an adapter saved and
one held in memory hash alike, and two runs from the same seed and examples give the same hash.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.training.needs import require

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
"""The attention projections of Llama-style models (SmolLM2's), LoRA's usual targets."""
WEIGHTS_FILE = "adapter_model.safetensors"


@dataclass(frozen=True)
class LoraOptions:
    """The adapter's shape: its rank, scale and which linear layers it adapts."""

    rank: int = 8
    alpha: float = 16.0
    """The update is scaled by alpha / rank (peft's `lora_alpha`; GGUF's `adapter.lora.alpha`)."""
    modules: tuple[str, ...] = ATTENTION
    """The linear layers adapted (peft's `target_modules`); the MLP's are gate_proj, up_proj, down_proj."""
    dropout: float = 0.0
    """0 keeps an update deterministic: the same seed and examples give the same adapter."""


def attach(model: Any, options: LoraOptions = LoraOptions(), seed: int = 0) -> Any:
    """`model` wrapped in a new LoRA adapter (peft's PeftModel; B starts at zero, so it answers as the base
    until trained). `seed` draws A's initial values."""
    require("a LoRA adapter")
    import torch
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=options.rank, lora_alpha=options.alpha, target_modules=list(options.modules),
                        lora_dropout=options.dropout, bias="none", task_type="CAUSAL_LM")
    torch.manual_seed(seed)
    return get_peft_model(model, config)


def adapter_bytes(model: Any) -> bytes:
    """The adapter's weights as peft writes them to `adapter_model.safetensors`."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save

    state = {name: tensor.detach().contiguous() for name, tensor in get_peft_model_state_dict(model).items()}
    return save(state, metadata={"format": "pt"})


def adapter_hash(model: Any) -> str:
    """The sha256 (hex) of the adapter's saved weights."""
    return hashlib.sha256(adapter_bytes(model)).hexdigest()


def save_adapter(model: Any, directory: Path) -> Path:
    """peft's adapter files (`adapter_config.json`, `adapter_model.safetensors`) in `directory`."""
    directory = Path(directory)
    model.save_pretrained(directory)
    return directory / WEIGHTS_FILE


def trainable_parameters(model: Any) -> list[Any]:
    return [p for p in model.parameters() if p.requires_grad]

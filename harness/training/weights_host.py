"""Where a learner's weights live and train: the base model with the run's LoRA adapter, in a process
of its own (a Ray actor per learner run, `WeightsActor`), so its CPU seconds and memory are that
run's alone and its updates never hold up the event loop of the agent worker that hosts other runs.

`LoraWeights` is the plain class: it loads the base model on its first update (a run that only
serves a snapshot's adapter never loads it), continues the adapter it last trained or one saved in a
directory, runs the SFT or DPO update, and saves the adapter in peft's format (which vLLM loads) and
as a GGUF LoRA (which the local llama.cpp server loads).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.training.needs import require

PEFT_WEIGHTS = "adapter_model.safetensors"
GGUF_ADAPTER = "adapter.gguf"
"""The GGUF LoRA in an adapter's directory (harness/models/adapter_server.py loads it)."""


class LoraWeights:
    """The base model and one LoRA adapter, trained in place update after update."""

    def __init__(self, gguf: str | None = None, seed: int = 0) -> None:
        require("a learner variant")
        # Said once per update otherwise, about what is expected here: transformers' deprecated name
        # that peft still calls, and peft finding no config.json beside a GGUF (its vocabulary is the
        # base's, unchanged).
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
        warnings.filterwarnings("ignore", message="Could not find a config file")
        self.gguf = Path(gguf) if gguf else None
        self.seed = seed
        self.model: Any = None
        self.tokenizer: Any = None
        self.adapter: str | None = None
        """The hash of the adapter the model holds; None: none trained yet (or reset to the first)."""
        self._fresh: dict[str, Any] = {}

    def _load(self, rank: int, alpha: float, modules: tuple[str, ...]) -> None:
        from peft import get_peft_model_state_dict

        from harness.training.base_model import load_base
        from harness.training.lora import LoraOptions, attach

        base = load_base(self.gguf)
        self.tokenizer = base.tokenizer
        self.model = attach(base.model, LoraOptions(rank=rank, alpha=alpha, modules=tuple(modules)),
                            seed=self.seed)
        self._fresh = {name: tensor.detach().clone()
                       for name, tensor in get_peft_model_state_dict(self.model).items()}

    def _continue_from(self, directory: str | None, adapter: str | None) -> None:
        """The model's adapter set to the one saved in `directory` (hash `adapter`), or to the one first
        attached (B = 0: the base) when `directory` is None, unless the model holds it already."""
        from harness.training.lora import adapter_hash

        if self.adapter == adapter and (adapter is not None or directory is None):
            return
        from peft import set_peft_model_state_dict

        if directory is None:  # the adapter as attached: A as the seed drew it, B zero (the base)
            set_peft_model_state_dict(self.model, self._fresh)
        else:
            from safetensors.torch import load_file

            set_peft_model_state_dict(self.model, load_file(str(Path(directory) / PEFT_WEIGHTS)))
        self.adapter = adapter_hash(self.model) if directory is not None else None

    def train(self, kind: str, examples: list[dict[str, Any]], options: dict[str, Any],
              previous: str | None, previous_adapter: str | None, directory: str) -> dict[str, Any]:
        """One update from the adapter in `previous` (None: the base); the new adapter saved in
        `directory`; the update's `UpdateResult` as a dict."""
        from harness.training.chat_data import ChatExample, PreferencePair
        from harness.training.gguf_adapter import export_gguf_adapter
        from harness.training.lora import save_adapter
        from harness.training.preference import DpoOptions, dpo_update
        from harness.training.supervised import SftOptions, sft_update

        if self.model is None:
            self._load(options["rank"], options["alpha"], tuple(options["modules"]))
        self._continue_from(previous, previous_adapter)
        if kind == "sft":
            chosen = [ChatExample(messages=e["messages"], reply=e["reply"]) for e in examples]
            result = sft_update(self.model, self.tokenizer, chosen, SftOptions(
                steps=options["steps"], learning_rate=options["learning_rate"],
                max_examples=options["max_examples"], max_tokens=options["max_tokens"], seed=self.seed,
                threads=options["threads"]))
        else:
            pairs = [PreferencePair(messages=e["messages"], chosen=e["reply"], rejected=e["rejected"])
                     for e in examples]
            result = dpo_update(self.model, self.tokenizer, pairs, DpoOptions(
                steps=options["steps"], learning_rate=options["learning_rate"], beta=options["beta"],
                max_examples=options["max_examples"], seed=self.seed, threads=options["threads"]))
        out = Path(directory)
        save_adapter(self.model, out)
        export_gguf_adapter(self.model, out / GGUF_ADAPTER)
        self.adapter = result.adapter_hash
        return asdict(result)


def saved_update(directory: Path) -> dict[str, Any] | None:
    """The update.json an update left in its adapter's directory, if it finished."""
    path = directory / "update.json"
    return json.loads(path.read_text()) if path.is_file() else None

"""The DPO update: a few steps of trl's DPO trainer on preference pairs, on the model's LoRA adapter.

trl's `DPOTrainer` fits an online update of a few steps on CPU (tried here: setting it up takes a tenth
of a second on a tiny model; its loss, its reference handling and its token count are the library's), so
the loss is not written here. Given a peft model, trl keeps a copy of the adapter as it is when the update
starts under the name "ref" and takes the reference log-probabilities with it: each update pulls the
policy away from the adapter it started from (on the first update, from the base: B starts at zero).
That copy is deleted when the update ends, so the model holds its one adapter again. Each step is one
batch of all the pairs (`max_examples` keeps the most recent ones); the learning rate is constant.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

from harness.training.accounting import UpdateResult, path_parameters, spent, torch_threads, training_flops
from harness.training.chat_data import PreferencePair, encode_example
from harness.training.lora import adapter_hash
from harness.training.options import UpdateOptions, trained_on

REFERENCE = "ref"
"""The name trl gives the copy of the adapter it takes the reference log-probabilities from."""


@dataclass(frozen=True)
class DpoOptions(UpdateOptions):
    learning_rate: float = 5e-4
    max_examples: int = 16
    """The most recent pairs trained on; older ones are left out."""
    beta: float = 0.1
    """DPO's temperature: how far the policy may move from the reference (trl's default)."""


def dpo_update(model: Any, tokenizer: Any, pairs: list[PreferencePair], options: DpoOptions) -> UpdateResult:
    """Train `model`'s adapter (a peft model from `lora.attach`) on `pairs` for `options.steps` DPO steps."""
    chosen = trained_on(pairs, options, "a DPO update", "preference pair")
    with (tempfile.TemporaryDirectory(prefix="harness-dpo-") as scratch, torch_threads(options.threads),
          spent() as cost):
        trainer = _trainer(model, tokenizer, chosen, options, scratch)
        try:
            trainer.train()
            after = trainer.evaluate()["eval_loss"]
        finally:
            if REFERENCE in model.peft_config:
                model.delete_adapter(REFERENCE)
        model.eval()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    tokens = int(float(logged[-1]["num_tokens"])) if logged else 0
    one_pass = tokens // max(1, options.steps)
    return UpdateResult(
        kind="dpo", examples=len(chosen), steps=options.steps, tokens_trained=tokens,
        target_tokens=sum(_reply_tokens(tokenizer, p) for p in chosen),
        loss_before=float(logged[0]["loss"]) if logged else float(after), loss_after=float(after),
        wall_s=cost.wall_s, cpu_s=cost.cpu_s,
        # each step: the policy forward and backward, the reference forward; after: both forward once
        flops=training_flops(path_parameters(model), tokens, tokens + 2 * one_pass),
        adapter_hash=adapter_hash(model))


def _trainer(model: Any, tokenizer: Any, pairs: list[PreferencePair], options: DpoOptions,
             scratch: str) -> Any:
    """trl's DPO trainer over `pairs` as one batch, quiet (no logs printed, nothing saved)."""
    from datasets import Dataset
    from transformers import PrinterCallback, ProgressCallback
    from trl import DPOConfig, DPOTrainer

    rows = [{"prompt": p.messages, "chosen": [{"role": "assistant", "content": p.chosen}],
             "rejected": [{"role": "assistant", "content": p.rejected}]} for p in pairs]
    data = Dataset.from_list(rows)
    config = DPOConfig(
        output_dir=scratch, max_steps=options.steps, learning_rate=options.learning_rate, beta=options.beta,
        per_device_train_batch_size=len(pairs), per_device_eval_batch_size=len(pairs),
        lr_scheduler_type="constant", warmup_steps=0, logging_steps=1, save_strategy="no", report_to=[],
        # fp32 as the SFT update (trl's default is bf16 autocast), and no activation checkpointing (trl's
        # default, which recomputes the forward: memory a few short pairs do not need)
        use_cpu=True, bf16=False, activation_checkpointing=False, seed=options.seed, data_seed=options.seed,
        disable_tqdm=True, log_level="error", dataloader_num_workers=0)
    with _quiet_datasets():
        trainer = DPOTrainer(model=model, args=config, train_dataset=data, eval_dataset=data,
                             processing_class=tokenizer)
    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)
    return trainer


def _reply_tokens(tokenizer: Any, pair: PreferencePair) -> int:
    return sum(encode_example(tokenizer, pair.messages, reply).target_tokens
               for reply in (pair.chosen, pair.rejected))


class _quiet_datasets:
    """datasets' progress bars off while trl tokenises the pairs, as they were after."""

    def __enter__(self) -> None:
        from datasets.utils import logging

        self.was = logging.is_progress_bar_enabled()
        logging.disable_progress_bar()

    def __exit__(self, *exc: object) -> None:
        from datasets.utils import logging

        if self.was:
            logging.enable_progress_bar()

"""The transformers backend's place on the cluster (harness/training/run_trainer.py): a trainer of its
own per learner run, reserved its memory, and a word in the log when it has to wait for it."""

import logging

import ray

from harness.agent_api import TrainOptions
from harness.training.run_trainer import TransformersBackend
from tests.training import tiny


class FakeRemote:
    def __init__(self) -> None:
        self.options_given: dict = {}

    def options(self, **options):
        self.options_given = options
        return self

    def remote(self, *arguments):
        return ("actor", arguments)


def test_a_trainer_is_reserved_its_memory_and_a_wait_for_it_is_said(monkeypatch, caplog):
    made = FakeRemote()
    monkeypatch.setattr(ray, "remote", lambda cls: made)
    monkeypatch.setattr(ray, "available_resources", lambda: {"memory": 1.5 * 2**30})
    backend = TransformersBackend("base.gguf", seed=3, run_id="sft-run")
    with caplog.at_level(logging.WARNING):
        actor = backend._start(TrainOptions(memory_gb=2.0))
    assert actor == ("actor", ("base.gguf", 3))
    assert made.options_given["memory"] == 2 * 2**30 and made.options_given["num_cpus"] == 0
    assert "learner run sft-run waits for memory" in caplog.text and "2.0 GB" in caplog.text
    caplog.clear()
    monkeypatch.setattr(ray, "available_resources", lambda: {"memory": 8.0 * 2**30})
    backend._start(TrainOptions(memory_gb=2.0))
    assert "waits" not in caplog.text


@tiny.needs_train()
def test_lora_weights_continue_from_any_saved_adapter_and_reset_to_the_first(monkeypatch, tmp_path):
    """What resume and an isolated stream rely on: an update from the base, or from an adapter saved by
    another process, gives the adapter it gave the first time (tiny Llama; nothing downloaded)."""
    from harness.training import base_model
    from harness.training.weights_host import LoraWeights

    tokenizer = tiny.tokenizer()
    monkeypatch.setattr(base_model, "load_base", lambda gguf=None: base_model.LoadedBase(
        model=tiny.model(len(tokenizer)), tokenizer=tokenizer, gguf=None))
    options = TrainOptions(steps=2, learning_rate=1e-2).model_dump(mode="json")
    examples = [{"messages": [{"role": "user", "content": "Capital of Wakanda?"}], "reply": "Birnin Zana"}]

    def update(weights, previous, name):
        return weights.train("sft", examples, options, previous and str(tmp_path / previous),
                             previous and first["adapter_hash"], str(tmp_path / name))["adapter_hash"]

    weights = LoraWeights(None, seed=0)
    first = weights.train("sft", examples, options, None, None, str(tmp_path / "a"))
    second = update(weights, "a", "b")
    assert second != first["adapter_hash"]
    assert update(weights, None, "c") == first["adapter_hash"]  # reset to the base: the same first update
    elsewhere = LoraWeights(None, seed=0)  # another process, resuming from the saved first adapter
    assert update(elsewhere, "a", "d") == second
    assert {"adapter.gguf", "adapter_model.safetensors"} <= {path.name for path in (tmp_path / "a").iterdir()}

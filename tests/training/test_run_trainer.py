"""The transformers backend's place on the cluster (harness/training/run_trainer.py): a trainer of its
own per learner run, reserved its memory, and a word in the log when it has to wait for it."""

import logging

import ray

from harness.agent_api import TrainOptions
from harness.training.run_trainer import TransformersBackend


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

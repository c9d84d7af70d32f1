"""A learner end to end on the default model (harness/training/run_trainer.py): `variant=sft` trains
SmolLM2's LoRA in a Ray actor of its own, the local server serves the run's later calls with it, the
rows say so, the snapshot keeps it, and `python -m harness.evaluate` serves the snapshot's adapter."""

from __future__ import annotations

import json

import polars as pl
import pytest

from harness.config import HarnessConfig
from harness.driver.run import run
from harness.evaluate import main as evaluate
from harness.extras import EXTRAS
from tests import tiers
from tests.conftest import compose_config
from tests.training import tiny

pytestmark = [pytest.mark.e2e, tiny.needs_train(),
              pytest.mark.skipif(not EXTRAS["smollm2"].installed,
                                 reason=f"needs the smollm2 extra: {EXTRAS['smollm2'].install}")]
SMOLLM2_PARAMETERS = HarnessConfig.from_dictconfig(compose_config("model=smollm2")).model.parameters
"""The config's count, which tests/models/test_parameter_counts.py holds to the shipped weights."""


@pytest.fixture(scope="module")
@tiers.starts_processes
def learnt(ray_session, tmp_path_factory):
    cfg = compose_config("variant=sft", "stream.feedback=answer", "stream.num_tasks=4",
                         "variant.update_every=2", "variant.training.steps=2", "stream.snapshot_every=2",
                         "progress=false", "cache.enabled=false", "ray.num_workers=1")
    return run(HarnessConfig.from_dictconfig(cfg), tmp_path_factory.mktemp("learner")).run_dir


def test_a_learner_trains_the_local_model_and_its_later_calls_are_served_with_the_adapter(learnt):
    training = pl.read_parquet(learnt / "training" / "*.parquet").sort("update")
    assert training["stream_position"].to_list() == [1, 3]
    assert (training["trainer"] == "transformers").all() and (training["cpu_s"] > 0).all()
    assert (training["loss_after"] < training["loss_before"]).all()
    # FLOPs: 6 x the parameters x the tokens trained, plus the forward pass after (docs/weights.md).
    assert (training["flops"] >= 6 * SMOLLM2_PARAMETERS * training["tokens_trained"]).all()
    calls = pl.read_parquet(learnt / "llm_calls" / "*.parquet").sort("started_at")
    assert calls["adapter"].to_list() == [None, None, training["adapter"][0], training["adapter"][0]]
    assert (calls["error"].is_null()).all()
    assert (calls["flops"] == 2.0 * SMOLLM2_PARAMETERS * calls["total_tokens"]).all()
    episodes = pl.read_parquet(learnt / "episodes" / "*.parquet")
    assert episodes["train_tokens"].sum() == training["tokens_trained"].sum()


def test_the_snapshots_adapter_is_what_an_evaluation_serves(learnt):
    snapshots = pl.read_parquet(learnt / "snapshots" / "*.parquet")
    adapters = {}
    for row in snapshots.iter_rows(named=True):
        directory = learnt / row["path"]
        assert (directory / "files" / "adapter.gguf").is_file()
        adapters[row["position"]] = json.loads((directory / "state.json").read_text())["adapter"]
    out = learnt / "evaluated"
    assert evaluate([str(learnt), "--views", "replay", "--snapshots", "all", "--out", str(out),
                     "--set", "progress=false", "--set", "ray.num_workers=1"]) == 0
    episodes = pl.read_parquet(out / "episodes" / "*.parquet").select("episode_id", "snapshot_position")
    calls = pl.read_parquet(out / "llm_calls" / "*.parquet").join(episodes, on="episode_id")
    assert {(row["snapshot_position"], row["adapter"]) for row in calls.iter_rows(named=True)} == set(
        adapters.items())
    assert not (out / "training").exists() or pl.read_parquet(out / "training" / "*.parquet").is_empty()

"""End to end with the real local model: server, Ray, gateway, Parquet, checked against the checker."""

import json

import polars as pl
import pytest

from envs.base import normalize
from harness.config import HarnessConfig
from harness.driver.run import run
from tests import tiers
from tests.conftest import compose_config

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
@tiers.starts_processes
def real_run(ray_session, tmp_path_factory):
    cfg = compose_config("seeds=[0,1]", "stream.num_tasks=8", "progress=false", "cache.enabled=false")
    return run(HarnessConfig.from_dictconfig(cfg), tmp_path_factory.mktemp("real"))


def test_real_model_calls_have_real_usage_and_latency(real_run):
    calls = pl.read_parquet(real_run.run_dir / "llm_calls" / "*.parquet")
    assert calls.height == 16
    assert calls["error"].null_count() == 16
    assert (calls["prompt_tokens"] > 20).all() and (calls["completion_tokens"] > 0).all()
    assert (calls["usage_source"] == "provider").all() and (calls["latency_s"] > 0).all()
    assert (calls["model"] == "openai/smollm2").all() and (calls["cost_usd"] == 0).all()


def test_success_agrees_with_the_checker_and_episodes_sum_their_calls(real_run):
    episodes = pl.read_parquet(real_run.run_dir / "episodes" / "*.parquet")
    calls = pl.read_parquet(real_run.run_dir / "llm_calls" / "*.parquet")
    assert episodes.height == 16 and episodes["error"].null_count() == 16
    for row in episodes.iter_rows(named=True):
        assert row["success"] == (normalize(row["response"]) == normalize(row["reference"]))
    sums = calls.group_by("run_id", "task_id").agg(pl.col("total_tokens").sum().alias("calls_total"))
    joined = episodes.join(sums, on=["run_id", "task_id"])
    assert joined.height == 16 and (joined["total_tokens"] == joined["calls_total"]).all()


def test_the_local_server_is_stopped_and_its_log_kept(real_run):
    manifest = json.loads((real_run.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished" and not manifest["model_is_scripted"]
    assert "llama" in (real_run.run_dir / "model_server.log").read_text().lower()

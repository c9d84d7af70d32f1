"""Aggregates across strata (envs, task families) are rliable's estimators over runs."""

import numpy as np
import polars as pl
import pytest
import scipy.stats

from harness.report.aggregate import _resample, aggregates, improvement_of, iqm_of, profile_of
from tests.report.test_stats import episodes_frame


def two_envs(rates: dict[str, float], runs: int = 5, tasks: int = 20, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    frames = []
    for env in ("countries", "tools"):
        groups = {variant: {s: list(rng.random(tasks) < rate) for s in range(runs)}
                  for variant, rate in rates.items()}
        frames.append(episodes_frame(groups).with_columns(
            env=pl.lit(env), run_id=pl.col("run_id") + env, task_id=pl.col("task_id") + env))
    return pl.concat(frames)


def test_the_iqm_is_the_mean_of_the_middle_half_of_all_run_by_stratum_scores():
    matrix = np.array([[0.0, 0.2], [0.4, 0.6], [0.8, 1.0], [0.5, 0.5]])
    assert iqm_of(matrix[None])[0] == pytest.approx(scipy.stats.trim_mean(matrix.ravel(), 0.25))
    assert profile_of(matrix[None])[0][0] == pytest.approx(7 / 8)  # scores above 0


def test_the_probability_of_improvement_is_the_mann_whitney_share_averaged_over_strata():
    rng = np.random.default_rng(1)
    x, y = rng.random((6, 3)), rng.random((4, 3))
    by_hand = np.mean([scipy.stats.mannwhitneyu(x[:, s], y[:, s]).statistic / 24 for s in range(3)])
    assert improvement_of(x[None], y[None])[0] == pytest.approx(by_hand)
    assert improvement_of(x[None], x[None])[0] == pytest.approx(0.5)


def test_resampling_draws_runs_within_each_stratum():
    matrix = np.array([[0.0, 10.0], [1.0, 11.0], [2.0, 12.0]])
    resampled = _resample(matrix, np.random.default_rng(0), 200)
    assert set(np.unique(resampled[:, :, 0])) <= {0.0, 1.0, 2.0}
    assert set(np.unique(resampled[:, :, 1])) <= {10.0, 11.0, 12.0}


def test_a_report_over_two_envs_gets_an_iqm_and_a_probability_of_improvement_per_group():
    result = aggregates(two_envs({"baseline": 0.3, "memory": 0.7}), ["variant", "env"])
    assert result is not None and result.strata == ["countries", "tools"]
    memory = result.table.filter(pl.col("group") == "memory").row(0, named=True)
    assert (memory["seeds"], memory["strata"], memory["reference"]) == (5, 2, "baseline")
    assert memory["iqm_low"] <= memory["iqm"] <= memory["iqm_high"]
    assert 0.5 < memory["p_improvement_low"] <= memory["p_improvement"] <= memory["p_improvement_high"] <= 1
    assert set(result.profiles) == {"baseline", "memory"}


def test_one_env_and_one_family_leave_nothing_to_aggregate():
    assert aggregates(two_envs({"baseline": 0.3}).filter(pl.col("env") == "tools"), ["variant"]) is None

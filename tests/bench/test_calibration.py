"""The calibration bench: a synthetic agent with a known truth, whose experiments through the report's own
`paired_comparisons` show the verdict over seeds holding its 5%, and its plan promising the power it has."""

import numpy as np
import polars as pl
import pytest

from harness.bench import calibration
from harness.bench.cli import main as bench_main
from harness.report.compare import paired_comparisons


def test_the_known_rates_match_a_simulation_of_the_agent():
    design = calibration.Design(seeds=20_000, sd=1.0, tasks=20)
    success, attempted, _ = calibration.draw(np.random.default_rng(4), design, [0.8])
    assert attempted.all()
    difference = success[1].mean(axis=(1, 2, 3)) - success[0].mean(axis=(1, 2, 3))  # per seed
    # within 5 standard errors (about 0.0016 for the rate, 0.002 for the difference)
    assert success[0].mean() == pytest.approx(calibration.population_rate(1.0), abs=0.008)
    assert difference.mean() == pytest.approx(calibration.true_difference(1.0, 0.8), abs=0.01)
    assert difference.std() == pytest.approx(calibration.seed_spread(design, 0.8), rel=0.05)


def test_a_seeds_runs_share_its_tasks_and_identical_repeats_are_copies():
    design = calibration.Design(seeds=3, sd=1.0, tasks=7, repeats=2, orders=2)
    success, _, order = calibration.draw(np.random.default_rng(0), design, [0.0])
    assert (success[:, :, :, 0] == success[:, :, :, 1]).all()  # identical repeats
    assert (np.sort(order, axis=2) == np.arange(7)).all() and (order[:, 0] == np.arange(7)).all()
    frame = calibration.episodes(calibration.layout(design), success, np.ones_like(success), order)
    assert frame.height == 2 * 3 * 2 * 2 * 7 and frame["run_id"].n_unique() == 2 * 3 * 2 * 2
    row = paired_comparisons(frame, ["variant"], plan=False).table.row(0, named=True)
    assert (row["runs"], row["seeds"], row["orders"], row["repeats"], row["units"]) == (12, 3, 2, 2, 3)
    shared = calibration.draw(np.random.default_rng(0), calibration.Design(3, 1.0, tasks=40, repeats=2,
                                                                         repeat_kind="shared"), [0.0])[0]
    assert (shared[:, :, :, 0] != shared[:, :, :, 1]).any()


def test_unequal_runs_stop_early_and_pair_where_both_ran():
    design = calibration.Design(seeds=4, sd=0.5, tasks=20, unequal=True)
    success, attempted, order = calibration.draw(np.random.default_rng(1), design, [0.0])
    lengths = attempted.sum(axis=-1)
    assert lengths.min() >= 10 and lengths.max() <= 20 and len(np.unique(lengths)) > 1
    row = paired_comparisons(calibration.episodes(calibration.layout(design), success, attempted, order),
                             ["variant"], plan=False).table.row(0, named=True)
    assert row["pairs"] == int((attempted[0] & attempted[1]).sum())


def test_the_promise_is_the_power_observed_and_identical_agents_hold_five_percent():
    # 6 seeds of 2 identical repeats with run effects of sd 1.0: 200 experiments put a false-positive rate
    # of 5% within [0.02, 0.09] and the power within 0.09 of its promise (3 standard errors).
    row = calibration.calibrate(calibration.Design(6, 1.0, tasks=30, repeats=2), experiments=200)
    assert row.promised == pytest.approx(0.8, abs=1e-6)
    assert row.aa_resolved / row.experiments <= 0.09
    assert abs(row.ab_resolved / row.experiments - row.promised) <= 0.09
    assert row.covered / row.coverage_seeds >= 0.88


def test_few_seeds_with_copied_repeats_never_resolve():
    row = calibration.calibrate(calibration.DESIGNS["few-seeds-identical"], experiments=40)
    assert (row.aa_resolved, row.ab_resolved, row.promised) == (0, 0, 0.0)


def test_the_command_prints_its_table_and_writes_it(capsys, tmp_path):
    bench_main(["calibration", "--experiments", "3", "--seeds", "3", "6", "--sd", "0.5", "--tasks", "10",
                "--designs", "holm", "--sequential", "6", "--jobs", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| one run per seed | 3 |")]
    assert len(rows) == 1 and "| 3 | 0.5 | 3 | 0.000 [0.000, 0.708] |" in rows[0]  # 3 seeds never resolve
    assert "| 3 rows (Holm) | 10 |" in out and "bench took" in out
    written = pl.read_parquet(tmp_path / "calibration.parquet")
    assert written.height == 5 and written["test"].to_list() == ["sign-flip"] * 3 + ["sequential"] * 2
    assert "## Sequential (seeds=until_decided)" in out
    assert {"seeds", "repeats", "sd", "false_positive_rate", "false_positive_low", "false_positive_high",
            "power", "power_low", "power_high", "promised", "coverage", "holds"} <= set(written.columns)


def test_the_outside_known_truth_agent_solves_with_its_runs_quality_and_replies_the_code_word():
    from types import SimpleNamespace

    llm = SimpleNamespace(base_url="http://127.0.0.1:9/v1", api_key="unused", model="scripted/x")
    calls = []
    silent = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(
        create=lambda **request: calls.append(request))))
    task = {"question": "Reply with the code word: w0007x"}
    agents = {effect: calibration.KnownTruthAgent(llm, "/tmp", seed=3, effect=effect) for effect in (-30, 30)}
    for agent in agents.values():
        agent.client = silent
    assert agents[30].solve(task) == "w0007x" and agents[-30].solve(task) == "wrong" and len(calls) == 2
    same = calibration.KnownTruthAgent(llm, "/tmp", seed=3).quality
    assert same == agents[30].quality != calibration.KnownTruthAgent(llm, "/tmp", seed=3, arm="b").quality


def test_the_sequential_rows_take_the_seed_differences_the_reports_sequential_comparison_takes():
    from harness.report.sequential import sequential_verdict

    design = calibration.Design(seeds=8, sd=1.0, tasks=12, unequal=True)
    success, attempted, order = calibration.draw(np.random.default_rng(2), design, [1.0])
    frame = calibration.episodes(calibration.layout(design), success, attempted, order)
    row = paired_comparisons(frame, ["variant"], plan=False, sequential=True).table.row(0, named=True)
    verdict = sequential_verdict(calibration.per_seed_differences(success, attempted))
    assert (row["test"], row["ci_low"], row["ci_high"], row["p_value"]) == (
        "sequential", verdict.low, verdict.high, verdict.p_value)


def test_a_clear_effect_is_decided_in_fewer_seeds_than_the_fixed_test_needs_and_identical_arms_rarely():
    design = calibration.Design(seeds=30, sd=1.0, tasks=30)
    clear = calibration.calibrate_sequential(design, 60, effect=calibration.effect_for_power(
        calibration.replace(design, seeds=10)))
    assert clear.decided >= 50 and clear.fixed_seeds is not None and clear.seeds_used < clear.fixed_seeds
    same = calibration.calibrate_sequential(design, 60, effect=0.0)
    assert same.decided <= 9  # 5% of 60 is 3; 9 is 3.5 standard errors above it

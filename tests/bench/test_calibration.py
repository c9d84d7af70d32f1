"""The calibration bench: a synthetic agent with a known truth, whose A/A experiments through the report's
own `paired_comparisons` show the verdict over runs holding its 5% where a verdict over episodes does not."""

import numpy as np
import pytest

from harness.bench import calibration
from harness.bench.cli import main as bench_main
from harness.report.compare import paired_comparisons


def test_the_known_rates_and_variance_split_match_a_simulation_of_the_agent():
    rng = np.random.default_rng(4)
    truth = calibration.Truth(sd=1.0, effect=0.8)
    arms = calibration.draw_arms(rng, truth, runs=50_000, tasks=20)
    difference = arms["better"].mean(axis=1) - arms["baseline"].mean(axis=1)  # per pair of runs
    split = calibration.true_split(1.0, 0.8, tasks=20)
    # within 5 standard errors (about 0.001 for the rate, 0.0013 for the difference, 1% for its variance)
    assert arms["baseline"].mean() == pytest.approx(calibration.population_rate(1.0), abs=0.005)
    assert difference.mean() == pytest.approx(calibration.true_difference(1.0, 0.8), abs=0.0065)
    assert difference.var() == pytest.approx(split.run_variance(20), rel=0.05)


def test_the_arms_of_a_seed_see_the_same_tasks_and_pair_run_by_run():
    arms = calibration.draw_arms(np.random.default_rng(0), calibration.Truth(sd=0.5), runs=4, tasks=7)
    frame = calibration.episodes(calibration.layout(4, 7), arms["baseline"], arms["same"])
    assert frame.height == 2 * 4 * 7 and frame["run_id"].n_unique() == 8
    row = paired_comparisons(frame, ["variant"]).table.row(0, named=True)
    assert (row["group"], row["reference"], row["runs"], row["pairs"]) == ("candidate", "baseline", 4, 28)
    assert row["rate"] == pytest.approx(arms["same"].mean())


def test_a_and_a_resolved_stays_near_5_percent_where_the_episode_level_test_does_not():
    # 120 A/A experiments of 10 paired runs of 50 tasks with run effects of sd 1.0 on the logit scale: a
    # rate of 0.15 is 4.7 standard errors above 5%, and 0.25 is 5.5 below the ~0.48 McNemar gives here.
    row = calibration.calibrate(runs=10, sd=1.0, experiments=120, tasks=50, seed=0)
    assert row.aa_resolved / row.experiments <= 0.15
    assert row.aa_episodes / row.experiments >= 0.25
    # The planned effect is found about as often as planned, and the interval over runs covers the rate.
    assert row.promised_true == pytest.approx(0.8, abs=1e-6)
    assert abs(row.ab_resolved / row.experiments - row.promised_true) <= 0.15
    assert row.covered / row.coverage_runs >= 0.85


def test_the_command_prints_its_table_and_how_long_it_took(capsys):
    bench_main(["calibration", "--experiments", "3", "--runs", "3", "6", "--sd", "0", "--tasks", "10",
                "--jobs", "1"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("| 3 |", "| 6 |"))]
    assert len(rows) == 2 and "| 3 | 0 | 3 | 0.000 [0.000, 0.708] |" in rows[0]  # 3 runs never resolve
    assert "bench took" in out


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

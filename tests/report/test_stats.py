"""The report's statistics behave as stated: checked on synthetic data with known effects."""

import numpy as np
import polars as pl
import pytest
import scipy.stats

from harness.report.compare import adaptation_tasks, evolution_metrics, paired_comparisons
from harness.report.stats import (
    VarianceSplit,
    cluster_ci,
    decision_power,
    holm,
    mcnemar_exact,
    power_at,
    safeguard,
    sign_flip_method,
    sign_flip_p,
    smallest_p,
    stratified_bootstrap_ci,
    units_needed,
    units_to_reach,
    variance_split,
)

# Joint outcome of (reference, candidate) on one task: both fail, only the candidate solves it
# (gained), only the reference does (lost), both solve it. True difference: 0.20 - 0.08 = 0.12.
JOINT = {(0, 0): 0.30, (0, 1): 0.20, (1, 0): 0.08, (1, 1): 0.42}
TRUE_DIFFERENCE = 0.12


def draw_pairs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    outcomes = list(JOINT)
    picks = rng.choice(len(outcomes), size=n, p=list(JOINT.values()))
    ref = np.array([outcomes[i][0] for i in picks], dtype=bool)
    cand = np.array([outcomes[i][1] for i in picks], dtype=bool)
    return ref, cand


def test_the_paired_stratified_interval_covers_the_true_difference_about_95_percent_of_the_time():
    rng = np.random.default_rng(11)
    strata = np.repeat([0, 1, 2], 40)  # 40 tasks x 3 seeds
    covered = 0
    draws = 1000  # the coverage estimate's standard error is about 0.007
    for i in range(draws):
        ref, cand = draw_pairs(rng, len(strata))
        low, high = stratified_bootstrap_ci(cand.astype(float) - ref.astype(float), strata, seed=i,
                                            resamples=1000)
        covered += low <= TRUE_DIFFERENCE <= high
    assert 0.93 <= covered / draws <= 0.97


def test_the_interval_keeps_each_stratum_whole():
    # Stratum a is all 1s, stratum b all 0s: any resample within strata has mean exactly 0.5.
    values = np.array([1.0] * 10 + [0.0] * 30)
    strata = np.array(["a"] * 10 + ["b"] * 30)
    assert stratified_bootstrap_ci(values, strata) == (0.25, 0.25)


def test_exact_mcnemar_counts_discordant_pairs_and_matches_the_binomial_tail():
    ref = np.array([0] * 10 + [1] * 2 + [1] * 5 + [0] * 3, dtype=bool)
    cand = np.array([1] * 10 + [0] * 2 + [1] * 5 + [0] * 3, dtype=bool)
    gained, lost, p = mcnemar_exact(ref, cand)
    assert (gained, lost) == (10, 2)
    assert p == pytest.approx(2 * (1 + 12 + 66) / 4096)
    assert mcnemar_exact(ref, ref)[2] == 1.0


def test_holm_multiplies_by_the_remaining_count_and_keeps_the_order():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]


def test_with_equal_runs_the_interval_over_runs_is_the_t_interval_of_their_means():
    rng = np.random.default_rng(5)
    values, runs = rng.random(40) < 0.4, np.repeat(np.arange(4), 10)
    means = [values[runs == r].mean() for r in range(4)]
    low, high = scipy.stats.t.interval(0.95, 3, loc=np.mean(means), scale=scipy.stats.sem(means))
    estimate = cluster_ci(values, runs)
    assert (estimate.value, estimate.runs) == (pytest.approx(np.mean(means)), 4)
    assert (estimate.low, estimate.high) == (pytest.approx(low), pytest.approx(high))
    assert cluster_ci(values[:10], runs[:10]).low is None  # one run: nothing about another run


def test_a_ratio_over_runs_weighs_each_episode_by_its_spend():
    estimate = cluster_ci(np.array([1.0, 0, 1, 1]), np.array([0, 0, 1, 1]), weights=np.array([1.0, 3, 2, 2]))
    assert estimate.value == pytest.approx(3 / 8) and estimate.low < 3 / 8 < estimate.high


def test_the_sign_flip_test_is_exact_and_cannot_go_below_two_in_two_to_the_runs():
    assert sign_flip_p(np.array([0.1, 0.2, 0.05, 0.3])) == pytest.approx(0.125) == smallest_p(4)
    assert sign_flip_p(np.array([0.1, -0.2, 0.05, 0.3, 0.1, 0.1])) == pytest.approx(24 / 64)
    assert sign_flip_p(np.zeros(5)) == 1.0
    assert units_to_reach(0.05) == 6 and smallest_p(6) == 0.03125
    many = np.full(20, 0.1)  # beyond the exhaustive limit: random sign patterns, at their floor
    assert sign_flip_p(many) == pytest.approx(2 / 100_001) == smallest_p(20)
    assert (sign_flip_method(16), sign_flip_method(17)) == ("exact", "monte carlo")


def test_a_unit_whose_difference_is_exactly_zero_halves_the_sign_patterns():
    differences = np.array([0.1, 0.2, 0.05, 0.3, 0.0, 0.0])
    assert sign_flip_p(differences) == pytest.approx(smallest_p(6, zeros=2)) == pytest.approx(0.125)
    assert smallest_p(6, zeros=6) == 1.0


def test_holm_multiplies_the_row_ranked_first_so_more_rows_need_more_units():
    assert units_to_reach(0.05, rows=1) == 6
    assert units_to_reach(0.05, rows=3) == 7  # 2 / 2^7 x 3 = 0.047
    # a 6-unit row ranked last is multiplied by 1: it can resolve beside a row with a tiny p
    assert holm([1e-5, 0.03125]) == [2e-5, 0.03125]


def test_the_variance_split_recovers_known_between_and_within_run_variances():
    rng = np.random.default_rng(2)
    run_means = rng.normal(0, 0.3, size=400)  # between-run variance 0.09
    values = np.repeat(run_means, 25) + rng.normal(0, 1.0, size=400 * 25)  # within 1.0
    split = variance_split(values, np.repeat(np.arange(400), 25))
    assert split is not None and split.runs == 400 and split.tasks_per_run == 25
    assert split.between == pytest.approx(0.09, abs=0.02) and split.within == pytest.approx(1.0, abs=0.03)
    assert split.design_effect() == pytest.approx(1 + 24 * split.icc)
    assert variance_split(values[:25], np.zeros(25)) is None


def resolved_rate(units: int, effect: float, spread: float, experiments: int, rows: int = 1) -> float:
    """How often the report's rule (sign-flip p x rows < 0.05 and the 95% t interval excluding 0) resolves
    `units` differences drawn from N(effect, spread^2): the rule itself, one experiment at a time."""
    rng = np.random.default_rng(3)
    critical = scipy.stats.t.ppf(0.975, units - 1)
    resolved = 0
    for i in range(experiments):
        d = rng.normal(effect, spread, size=units)
        t_ok = abs(d.mean()) / (d.std(ddof=1) / units**0.5) > critical
        resolved += bool(t_ok and sign_flip_p(d, seed=i) * rows < 0.05)
    return resolved / experiments


def test_the_power_is_that_of_the_verdict_itself_the_sign_flip_test_and_the_interval_together():
    # At 6 units the sign-flip test rejects only when all six differences share a sign: the t test's
    # power (0.80 here) overstates the verdict's. The verdict's power is what is promised.
    spread = 0.1
    effect = 0.1435  # the paired t test's 80% at 6 units
    t_power = scipy.stats.nct.sf(scipy.stats.t.ppf(0.975, 5), 5, effect * 6**0.5 / spread) \
        + scipy.stats.nct.cdf(-scipy.stats.t.ppf(0.975, 5), 5, effect * 6**0.5 / spread)
    assert t_power == pytest.approx(0.80, abs=0.01)
    promised = decision_power(6, effect, spread)
    observed = resolved_rate(6, effect, spread, 600)
    assert promised < 0.72 and abs(promised - observed) < 0.05  # 3 standard errors of 600 experiments
    assert abs(decision_power(7, effect, spread) - resolved_rate(7, effect, spread, 400)) < 0.07
    # with Holm over 3 rows the row ranked first must reach 0.05 / 3
    holm_three = decision_power(8, effect, spread, rows=3)
    assert abs(holm_three - resolved_rate(8, effect, spread, 400, rows=3)) < 0.07


def test_the_planned_number_of_units_gives_the_verdict_80_percent_power():
    split = VarianceSplit(between=0.01, within=0.25, tasks_per_run=50, runs=10)
    needed = units_needed(0.15, split, 50)
    assert needed == 8
    assert power_at(needed, 0.15, split, 50) >= 0.8 > power_at(needed - 1, 0.15, split, 50)
    assert 0.72 <= resolved_rate(needed, 0.15, split.run_variance(50) ** 0.5, 300) <= 0.88
    # More tasks per unit cannot plan below what the variance between units alone needs.
    assert units_needed(0.1, split, 10_000) >= units_needed(0.1, VarianceSplit(0.01, 0.0, 50, 10), 50)
    assert units_needed(0.0, split, 50) is None
    assert power_at(5, 1.0, split, 50) == 0.0  # 5 units cannot reach 5%
    assert units_needed(0.15, split, 50, rows=3) > needed


def test_a_pilot_is_planned_from_with_its_uncertainty_not_its_point_estimates():
    pilot = np.array([0.10, 0.02, 0.12, 0.06, 0.08, 0.04])  # mean 0.07, sd 0.0374
    guard = safeguard(pilot)
    assert guard is not None and 0 < guard.effect < 0.07 and guard.spread > pilot.std(ddof=1)
    # the effect at the near end of its 60% interval (one-sided 80%), the spread at its 80% upper bound
    assert guard.effect == pytest.approx(0.07 - scipy.stats.t.ppf(0.8, 5) * pilot.std(ddof=1) / 6**0.5)
    assert guard.spread == pytest.approx(pilot.std(ddof=1) * (5 / scipy.stats.chi2.ppf(0.2, 5)) ** 0.5)
    assert safeguard(np.array([0.1, -0.1, 0.05, -0.04])).effect == 0.0  # within its own noise
    assert safeguard(np.array([0.1])) is None


def episodes_frame(groups: dict[str, dict[int, list[bool]]], scenario: str = "sequential",
                   tasks_of=lambda seed, position: f"t{seed}-{position}") -> pl.DataFrame:
    rows = []
    for variant, by_seed in groups.items():
        for seed, outcomes in by_seed.items():
            for position, success in enumerate(outcomes):
                rows.append({"variant": variant, "env": "countries", "scenario": scenario, "model": "m",
                             "seed": seed, "order_seed": seed, "stream_position": position, "probe": False,
                             "attempted": True, "task_id": tasks_of(seed, position), "success": success,
                             "run_id": f"{variant}-{scenario}-{seed}", "total_tokens": 100, "cost_usd": 0.01})
    return pl.DataFrame(rows)


def test_variants_are_paired_task_by_task_against_the_reference():
    rng = np.random.default_rng(1)
    groups: dict[str, dict[int, list[bool]]] = {"baseline": {}, "memory": {}, "retry": {}}
    for seed in range(3):
        ref, cand = draw_pairs(rng, 60)
        groups["baseline"][seed], groups["memory"][seed] = list(ref), list(cand)
        groups["retry"][seed] = list(ref)  # the same outcomes: no difference
    result = paired_comparisons(episodes_frame(groups), ["variant"])
    by_group = {row["group"]: row for row in result.table.iter_rows(named=True)}
    memory, retry = by_group["memory"], by_group["retry"]
    assert (memory["runs"], memory["pairs"], memory["seeds"], memory["reference"]) == (3, 180, 3, "baseline")
    assert memory["difference"] == pytest.approx(memory["rate"] - memory["reference_rate"])
    assert memory["ci_low"] < memory["difference"] < memory["ci_high"]
    assert memory["p_holm"] >= memory["p_value"] >= smallest_p(3) == 0.25
    assert not memory["resolved"]  # 3 runs cannot resolve anything, however large the difference
    assert memory["gained"] + memory["lost"] > 0 and 0 <= memory["p_episodes"] <= 1  # within these runs
    assert (retry["difference"], retry["p_value"], retry["resolved"]) == (0.0, 1.0, False)
    assert result.plans[0].startswith("memory: 3 paired seeds cannot reach p < 0.05 whatever they show")
    assert "no difference observed" in result.plans[1]


def test_six_paired_runs_with_a_clear_difference_resolve_it():
    groups: dict[str, dict[int, list[bool]]] = {"baseline": {}, "memory": {}}
    for seed in range(6):
        groups["baseline"][seed] = [position % 4 == 0 for position in range(40)]
        groups["memory"][seed] = [position % 4 < 2 + seed % 2 for position in range(40)]
    row = paired_comparisons(episodes_frame(groups), ["variant"]).table.row(0, named=True)
    assert row["runs"] == 6 and row["p_value"] == pytest.approx(smallest_p(6))
    assert row["ci_low"] > 0 and row["resolved"]


def test_runs_that_saw_different_tasks_are_not_paired():
    frame = pl.concat([
        episodes_frame({"baseline": {0: [True, False, True]}}),
        episodes_frame({"memory": {0: [True, True, True]}}, tasks_of=lambda _seed, position: f"x{position}"),
    ])
    result = paired_comparisons(frame, ["variant"])
    assert result.table.is_empty()
    assert result.notes == ["memory vs baseline: not paired, they saw different tasks (3 positions, first at "
                            "seed 0 position 0: t0-0 vs x0)"]


def test_a_missing_reference_is_said_not_guessed():
    result = paired_comparisons(episodes_frame({"memory": {0: [True]}}), ["variant"], reference="baseline")
    assert result.table.is_empty() and "no reference group 'baseline'" in result.notes[0]


def test_adaptation_counts_tasks_until_the_rolling_success_nears_its_final_level():
    assert adaptation_tasks(np.array([0] * 10 + [1] * 20), window=10, fraction=0.9) == 19
    assert adaptation_tasks(np.array([1] * 30), window=10, fraction=0.9) == 10
    assert adaptation_tasks(np.array([0] * 30), window=10, fraction=0.9) is None


def test_evolution_gain_is_sequential_minus_isolated_on_the_same_tasks():
    sequential = episodes_frame({"memory": {0: [False] * 5 + [True] * 15, 1: [False] * 4 + [True] * 16}})
    isolated = episodes_frame({"memory": {0: [False] * 20, 1: [False] * 10 + [True] * 10}},
                              scenario="isolated")
    metrics = evolution_metrics(pl.concat([sequential, isolated]), ["variant", "scenario"], window=5)
    row = metrics.filter(pl.col("scenario") == "sequential").row(0, named=True)
    assert row["evolution_gain"] == pytest.approx((15 + 6) / 40)
    assert row["evolution_gain_low"] <= row["evolution_gain"] <= row["evolution_gain_high"]
    assert row["success_per_1k_tokens"] == pytest.approx(31 / 4.0)
    assert row["success_per_usd"] == pytest.approx(31 / 0.4)
    assert row["std_over_seeds"] == pytest.approx(np.std([15 / 20, 16 / 20], ddof=1))
    assert metrics.filter(pl.col("scenario") == "isolated")["evolution_gain"].to_list() == [None]


def test_forgetting_is_the_drop_from_learning_a_task_to_its_last_replay():
    stream = episodes_frame({"memory": {0: [True, True, False, False]}})
    probes = stream.filter(pl.col("stream_position") < 2).with_columns(
        probe=pl.lit(True), stream_position=pl.lit(3, pl.Int64), success=pl.Series([True, False]))
    row = evolution_metrics(pl.concat([stream, probes]), ["variant"], window=2).row(0, named=True)
    assert row["forgetting"] == pytest.approx(0.5)


def test_power_far_in_the_tail_is_a_number():
    assert power_at(6, 0.3445, VarianceSplit(0.00667, 0.0, 50, 0), 50) == pytest.approx(1.0)
    assert decision_power(200, 5.0, 0.01) == pytest.approx(1.0)  # beyond the simulation: the t test's


def test_the_p_value_of_many_runs_is_the_same_on_every_call():
    rng = np.random.default_rng(4)
    groups: dict[str, dict[int, list[bool]]] = {"baseline": {}, "memory": {}}
    for seed in range(30):
        groups["baseline"][seed] = list(rng.random(20) < 0.4)
        groups["memory"][seed] = list(rng.random(20) < 0.45)
    frame = episodes_frame(groups)
    p_values = {paired_comparisons(frame.sample(fraction=1.0, shuffle=True, seed=i), ["variant"])
                .table["p_value"][0] for i in range(5)}
    assert len(p_values) == 1

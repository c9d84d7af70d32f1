"""The anytime-valid comparison: valid at every look at once, and quick to decide a clear difference."""

import math

import numpy as np
import pytest

from harness.report.sequential import PRIOR_SCALE, log_wealth, scales, sequential_verdict


def test_the_gamblers_wealth_is_the_product_of_its_bets_on_the_earlier_seeds():
    d = np.array([0.2, 0.1])
    s = scales(d)
    assert s[0] == PRIOR_SCALE and s[1] == pytest.approx(math.sqrt((PRIOR_SCALE**2 + 0.0) / 2))
    z1, z2 = math.tanh(0.2 / s[0]), math.tanh(0.1 / s[1])
    bet2 = min(0.9, (z1 / 2) / ((0.25 + z1 * z1) / 2))  # nothing is staked on the first seed
    wealth = log_wealth(d, np.array([0.0]))[:, 0]
    assert wealth[0] == 0.0 and wealth[1] == pytest.approx(math.log1p(bet2 * z2))


def test_identical_arms_are_declared_different_at_most_alpha_of_the_time_however_often_one_looks():
    rng = np.random.default_rng(5)
    experiments = 600
    # every look after every seed, up to 30 seeds, at skewed and heavy-tailed symmetric differences too
    for draw in (lambda: rng.normal(0, 0.15, 30), lambda: rng.standard_t(2, 30) * 0.05,
                 lambda: rng.choice([-0.4, 0.0, 0.4], 30, p=[0.1, 0.8, 0.1])):
        decided = sum(sequential_verdict(draw()).decision != "go on" for _ in range(experiments))
        assert decided / experiments <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / experiments)


def test_the_confidence_sequence_holds_the_true_difference_at_every_look():
    rng = np.random.default_rng(6)
    missed = 0
    for _ in range(400):
        d = rng.normal(0.12, 0.15, 24)
        verdict = sequential_verdict(d)  # the running intersection: every look so far at once
        missed += not verdict.low <= 0.12 <= verdict.high
    assert missed / 400 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)


def test_a_clear_difference_is_decided_in_few_seeds_and_stays_decided():
    rng = np.random.default_rng(7)
    d = rng.normal(0.3, 0.15, 30)
    firsts = [n for n in range(2, 31, 2) if sequential_verdict(d[:n]).decision == "better"]
    assert firsts and firsts[0] <= 12
    assert all(sequential_verdict(d[:n]).decision == "better" for n in range(firsts[0], 31))
    worse = sequential_verdict(-d[:12])
    assert worse.decision == "worse" and worse.high < 0 and worse.p_value < 0.05
    assert sequential_verdict(d[:1]).decision == "go on" and sequential_verdict(np.array([])).seeds == 0

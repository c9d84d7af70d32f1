"""Anytime-valid comparisons: a verdict that may be looked at after every round of seeds.

A fixed-size test (harness/report/stats.py's sign-flip test) is valid once, at the number of seeds planned
before the sweep; looking at it after every round and adding seeds until it says "resolved" inflates its
false-positive rate far past 5%. A confidence sequence is valid at every look at once: with probability at
least 1 - alpha it holds the true difference at every number of seeds, so a sweep may stop the first time
it excludes 0, or never.

The test is the sign-flip test's, made sequential by betting (Shafer & Vovk's testing by betting; Ramdas,
Grünwald, Vovk & Shafer 2023, "Game-theoretic statistics and safe anytime-valid inference"). Each paired
seed gives one difference d (the seed is the unit: its order seeds and repeats share its tasks). Under "no
difference" the two arms are exchangeable, so each d is symmetric about 0, whatever its spread: an odd
function of it, z = tanh(d / s) with s a scale known before the seed (the running sd of the earlier seeds'
differences), has mean 0. A gambler who stakes a fraction lambda of its wealth on z, lambda chosen from the
earlier seeds only (the plug-in bet of Waudby-Smith & Ramdas 2024, eq. (26)'s GRAPA form: the earlier
z's mean over their mean square, capped at 0.9), multiplies its wealth by 1 + lambda z per seed: a
nonnegative martingale under the null, so by Ville's inequality its wealth ever reaching 1 / alpha has
probability at most alpha. 1 / the largest wealth so far is an always-valid p-value. The confidence
sequence is the set of m whose test (the same bets on tanh((d - m) / s)) has not been rejected yet: it
assumes a seed's difference is symmetric about its mean (a mean over many episodes nearly is); the decision
at 0 assumes only the arms' exchangeability.

Why not the bounded-mean betting sequence of Waudby-Smith & Ramdas (2024), which needs only that a seed's
difference of success rates lies in [-1, 1]: a bet must then survive a difference of -1, which caps it so
low that differences of 0.2 with a seed-level sd of 0.15 were decided in 0 of 200 simulated sweeps of 30
seeds (this test: 99%, after 9.7 seeds on average). And why by hand: `confseq` 0.0.11 builds a C++
extension that needs Boost's headers (its build failed here), and `expectation` 0.6 needs Python 3.12;
neither has this symmetric test. The properties are checked in tests/report/test_sequential.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SEQUENTIAL_STATE = "until_decided.json"
"""What a `seeds=until_decided` sweep writes in its directory (harness/driver/until_decided.py): each
round's verdicts; its presence tells the report that the sweep looked after every round."""
GRID = 2001
"""Candidate differences in [-1, 1] the confidence sequence is computed on (0 among them); its ends are
widened to the grid points outside them, so the grid only makes it wider."""
LARGEST_BET = 0.9
"""The most of its wealth the gambler stakes on one seed: 1 + lambda z stays above 0.1."""
PRIOR_SCALE = 0.1
"""The scale s of the first seed's difference, before any has been seen (a typical seed-level sd)."""


@dataclass(frozen=True)
class SequentialVerdict:
    """Where a sequence of paired seeds' differences stands after its last seed."""

    seeds: int
    mean: float
    low: float
    """Lower end of the confidence sequence of the difference at this seed (the running intersection)."""
    high: float
    p_value: float
    """Always-valid p-value of "no difference": 1 / the largest wealth at 0 so far, at most 1."""
    decision: str
    """`better` (the sequence lies above 0), `worse` (below) or `go on`."""


def scales(differences: np.ndarray) -> np.ndarray:
    """The scale each seed's difference is divided by: the sd of the differences before it (with
    `PRIOR_SCALE` as one earlier observation), so it is known before the seed is."""
    d = np.asarray(differences, dtype=float)
    t = np.arange(1, len(d) + 1)
    means = np.cumsum(d) / t
    spread = np.maximum(np.cumsum(d * d) - t * means**2, 0.0)
    after = np.sqrt((PRIOR_SCALE**2 + spread) / (t + 1))
    return np.concatenate([[PRIOR_SCALE], after[:-1]])


def log_wealth(differences: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """log of the gambler's wealth against "symmetric about m", after each seed (rows), for each m in
    `centres` (columns): the product of 1 + lambda_t z_t, z_t = tanh((d_t - m) / s_t), lambda_t the
    earlier z's mean over their mean square (each with a prior of 0 and 1/4), capped at +-LARGEST_BET."""
    d = np.asarray(differences, dtype=float)
    z = np.tanh((d[:, None] - centres[None, :]) / np.maximum(scales(d), 1e-9)[:, None])
    count = np.arange(1, len(d) + 1)[:, None]
    means = np.cumsum(z, axis=0) / (count + 1)
    squares = (0.25 + np.cumsum(z * z, axis=0)) / (count + 1)
    before = np.vstack([np.zeros((1, z.shape[1])), (means / squares)[:-1]])
    bets = np.clip(before, -LARGEST_BET, LARGEST_BET)
    return np.cumsum(np.log1p(bets * z), axis=0)


def sequential_verdict(differences: np.ndarray, alpha: float = 0.05) -> SequentialVerdict:
    """The confidence sequence of the paired seeds' differences (in the order the seeds were run) after the
    last one, its always-valid p-value of "no difference", and the decision: `better` or `worse` once the
    sequence excludes 0 (it never includes it again), else `go on`."""
    d = np.asarray(differences, dtype=float)
    if len(d) == 0:
        return SequentialVerdict(0, float("nan"), -1.0, 1.0, 1.0, "go on")
    grid = np.linspace(-1.0, 1.0, GRID)
    wealth = log_wealth(d, grid)
    rejected = np.any(wealth >= math.log(1 / alpha), axis=0)  # at any look so far: a running intersection
    kept = np.flatnonzero(~rejected)
    if kept.size == 0:  # every candidate rejected: differences too alike to bet on any further
        low = high = float(d.mean())
    else:
        low, high = float(grid[max(kept[0] - 1, 0)]), float(grid[min(kept[-1] + 1, GRID - 1)])
    zero = GRID // 2
    p_value = min(1.0, math.exp(-max(0.0, float(wealth[:, zero].max()))))
    decision = "go on"
    if rejected[zero]:  # the side of 0 the differences lie on: where the sequence is, or their mean
        above = kept[0] > zero if kept.size else d.mean() > 0
        below = kept[-1] < zero if kept.size else d.mean() < 0
        decision = "better" if above else "worse" if below else "go on"
    return SequentialVerdict(len(d), float(d.mean()), low, high, p_value, decision)

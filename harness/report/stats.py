"""The statistics the report uses, on plain arrays: bootstrap intervals (plain, paired and
stratified), the exact McNemar test, Holm's correction, and how many pairs would resolve a
difference (from counts of gained and lost pairs, or from their rates). scipy does the
distributions; the stratified resampling (tasks within seeds) is here because no library offers it."""

from __future__ import annotations

import math

import numpy as np

LEVEL = 0.95
RESAMPLES = 4000


BCA_UP_TO = 5_000
"""Above this many values the interval is the percentile one, computed in batches: BCa's jackknife
holds n x (n - 1) numbers (74 GiB at 100,000 episodes), and at such n the two intervals agree."""


def bootstrap_ci(values: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% BCa interval of a mean (scipy; percentile above `BCA_UP_TO` values); a constant or single
    value is its own interval."""
    from scipy.stats import bootstrap

    values = np.asarray(values, dtype=float)
    if len(values) < 2 or values.min() == values.max():
        value = float(values.mean()) if len(values) else float("nan")
        return value, value
    large = {"method": "percentile", "batch": 100} if len(values) > BCA_UP_TO else {"method": "BCa"}
    result = bootstrap((values,), np.mean, confidence_level=LEVEL, n_resamples=2000,
                       random_state=np.random.default_rng(seed), **large)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def stratified_bootstrap_ci(values: np.ndarray, strata: np.ndarray, statistic: str = "mean",
                            weights: np.ndarray | None = None, seed: int = 0,
                            resamples: int = RESAMPLES) -> tuple[float, float]:
    """Percentile interval of the mean of `values` (or, with `weights`, of sum(values) /
    sum(weights), a ratio such as successes per token), resampling items within each stratum:
    every resample keeps each stratum's size, so seeds are never traded for one another."""
    values = np.asarray(values, dtype=float)
    weights = np.ones_like(values) if weights is None else np.asarray(weights, dtype=float)
    strata = np.asarray(strata)
    if len(values) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    numerator = np.zeros(resamples)
    denominator = np.zeros(resamples)
    for stratum in np.unique(strata):
        mask = strata == stratum
        v, w = values[mask], weights[mask]
        draws = rng.integers(0, len(v), size=(resamples, len(v)))
        numerator += v[draws].sum(axis=1)
        denominator += w[draws].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        estimates = numerator / denominator
    estimates = estimates[np.isfinite(estimates)]
    if len(estimates) == 0:
        return float("nan"), float("nan")
    tail = (1 - LEVEL) / 2 * 100
    return float(np.percentile(estimates, tail)), float(np.percentile(estimates, 100 - tail))


def mcnemar_exact(reference: np.ndarray, candidate: np.ndarray) -> tuple[int, int, float]:
    """Discordant pairs and the exact (binomial) two-sided McNemar p-value: `gained` pairs the
    candidate solved and the reference did not, `lost` the reverse."""
    from scipy.stats import binomtest

    reference = np.asarray(reference, dtype=bool)
    candidate = np.asarray(candidate, dtype=bool)
    gained = int((candidate & ~reference).sum())
    lost = int((reference & ~candidate).sum())
    if gained + lost == 0:
        return gained, lost, 1.0
    return gained, lost, float(binomtest(gained, gained + lost, 0.5).pvalue)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment: family-wise error control across the comparisons of a report."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def pairs_needed(gained: int, lost: int, pairs: int, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Paired episodes a McNemar test needs to resolve a difference of the observed size with the
    observed discordance (Connor 1987); None when no difference was observed."""
    if pairs == 0 or gained == lost:
        return None
    return _connor((gained + lost) / pairs, abs(gained - lost) / pairs, alpha, power)


def pairs_needed_at_rates(gained: float, lost: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Paired episodes a McNemar test needs when a pair is gained (only the candidate succeeds) with
    probability `gained` and lost (only the reference does) with probability `lost`: Connor (1987)
    with discordance gained + lost and difference gained - lost. None when the rates are equal (to
    rounding): no difference to resolve."""
    discordant, delta = gained + lost, abs(gained - lost)
    if delta <= 1e-12 * max(discordant, 1.0):
        return None
    return _connor(discordant, delta, alpha, power)


def _connor(discordant: float, delta: float, alpha: float, power: float) -> int:
    from scipy.stats import norm

    z_alpha, z_power = norm.ppf(1 - alpha / 2), norm.ppf(power)
    needed = (z_alpha * math.sqrt(discordant) + z_power * math.sqrt(max(discordant - delta**2, 0.0))) ** 2
    return math.ceil(needed / delta**2)

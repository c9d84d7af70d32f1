"""The statistics the report uses, on plain arrays.

The agent run is the unit of inference. A self-evolving agent's episodes are not independent: what
a run learnt early shifts all its later tasks, so two runs of one variant differ by more than their
tasks explain, and an interval over episodes is too narrow (an A/A comparison of one agent with run
effects of sd 0.5-1.0 on the logit scale came out "resolved" 29-78% of the time over episodes). So:
- an interval about a variant is over its runs: `cluster_ci`, the pooled mean with a cluster-robust
  (CR1) standard error, runs as clusters, and Student's t on runs - 1 degrees of freedom (Miller
  2024, "Adding Error Bars to Evals"; Cameron & Miller 2015). With equal runs it is the t interval
  of the runs' means; the calibration bench (`python -m harness.bench calibration`) measures its
  coverage from 3 to 30 runs;
- a paired test is over paired runs: `sign_flip_p`, the exact sign-flip permutation test of the
  runs' differences (scipy's `permutation_test`), which over n runs cannot go below 2 / 2^n;
- a plan is in runs and tasks per run: `variance_split` (between and within runs, one-way ANOVA
  estimates) and `runs_needed` (the t test's power, scipy's noncentral t);
- within runs, as what they are: the exact McNemar test over episode pairs, bootstrap intervals over
  tasks (BCa, and stratified within each run), never used for a verdict about a variant.
Holm's correction spans a report's rows. scipy does the distributions and the permutations; the
cluster-robust mean and the ANOVA split are a few lines each (statsmodels would need a model fit per
interval for the same numbers)."""

from __future__ import annotations

import math
from dataclasses import dataclass

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




@dataclass(frozen=True)
class Estimate:
    """A mean over episodes and, when it has at least two runs, its 95% interval over runs."""

    value: float
    low: float | None
    high: float | None
    runs: int


def cluster_ci(values: np.ndarray, runs: np.ndarray, weights: np.ndarray | None = None) -> Estimate:
    """sum(values) / sum(weights) (the plain mean without weights; a ratio such as successes per token
    with them) and its 95% interval with runs as clusters: the linearised ratio's cluster-robust
    variance with the G / (G - 1) small-sample factor (CR1) and Student's t on G - 1 degrees of freedom.
    Fewer than two runs give no interval: nothing says how another run would differ."""
    from scipy.stats import t

    values = np.asarray(values, dtype=float)
    weights = np.ones_like(values) if weights is None else np.asarray(weights, dtype=float)
    if len(values) == 0 or weights.sum() == 0:
        return Estimate(float("nan"), None, None, 0)
    _, cluster = np.unique(np.asarray(runs), return_inverse=True)
    count = int(cluster.max()) + 1
    ratio = float(values.sum() / weights.sum())
    if count < 2:
        return Estimate(ratio, None, None, count)
    residual = np.bincount(cluster, weights=values - ratio * weights, minlength=count)
    variance = count / (count - 1) * float((residual**2).sum()) / float(weights.sum()) ** 2
    half = float(t.ppf(1 - (1 - LEVEL) / 2, count - 1)) * math.sqrt(variance)
    return Estimate(ratio, ratio - half, ratio + half, count)


def sign_flip_p(differences: np.ndarray, exhaustive_up_to: int = 16, seed: int = 0) -> float:
    """Two-sided p-value of the runs' paired differences by the sign-flip permutation test (scipy's
    `permutation_test`, paired samples): exact over all 2^n sign patterns up to `exhaustive_up_to` runs,
    else 100,000 seeded random ones. Over n runs it cannot go below `smallest_p(n)`."""
    from scipy.stats import permutation_test

    differences = np.asarray(differences, dtype=float)
    if len(differences) == 0:
        return float("nan")
    if not differences.any():
        return 1.0
    resamples = np.inf if len(differences) <= exhaustive_up_to else 100_000
    result = permutation_test((differences,), lambda x, axis: np.mean(x, axis=axis), vectorized=True,
                              permutation_type="samples", n_resamples=resamples,
                              random_state=np.random.default_rng(seed))
    return float(min(1.0, result.pvalue))


def smallest_p(runs: int) -> float:
    """The smallest two-sided p-value a sign-flip test over `runs` paired runs can give: both all-same-sign
    patterns out of 2^runs."""
    return min(1.0, 2.0 ** (1 - min(runs, 1024)))


def runs_to_reach(alpha: float = 0.05) -> int:
    """The fewest paired runs whose sign-flip test can give p < alpha at all (6 at 5%)."""
    runs = 1
    while smallest_p(runs) >= alpha:
        runs += 1
    return runs


@dataclass(frozen=True)
class VarianceSplit:
    """How a per-episode value varies between runs and within them (one-way random-effects ANOVA)."""

    between: float
    """Variance of the runs' true means: what a run learnt early, its luck, anything shared by its tasks."""
    within: float
    """Variance of one episode's value around its run's mean."""
    tasks_per_run: float
    runs: int

    @property
    def icc(self) -> float:
        """Intraclass correlation: the share of an episode's variance that its run explains."""
        total = self.between + self.within
        return self.between / total if total > 0 else 0.0

    def design_effect(self, tasks_per_run: float | None = None) -> float:
        """How many times the variance of a run-level mean exceeds what as many independent episodes
        would give: 1 + (tasks per run - 1) x ICC (Kish)."""
        tasks = self.tasks_per_run if tasks_per_run is None else tasks_per_run
        return 1 + (tasks - 1) * self.icc

    def run_variance(self, tasks_per_run: float) -> float:
        """Variance of one run's mean over `tasks_per_run` tasks."""
        return self.between + self.within / tasks_per_run


def variance_split(values: np.ndarray, runs: np.ndarray) -> VarianceSplit | None:
    """Between- and within-run variance of per-episode values (ANOVA method-of-moments estimates, the
    between part floored at 0, unbalanced runs allowed); None with fewer than two runs or no episode
    beyond one per run, where the split cannot be measured."""
    values = np.asarray(values, dtype=float)
    _, cluster = np.unique(np.asarray(runs), return_inverse=True)
    count = int(cluster.max()) + 1 if len(values) else 0
    total = len(values)
    if count < 2 or total <= count:
        return None
    sizes = np.bincount(cluster, minlength=count).astype(float)
    means = np.bincount(cluster, weights=values, minlength=count) / sizes
    within = float(((values - means[cluster]) ** 2).sum() / (total - count))
    between_mean_square = float((sizes * (means - values.mean()) ** 2).sum() / (count - 1))
    typical = (total - float((sizes**2).sum()) / total) / (count - 1)
    between = max(0.0, (between_mean_square - within) / typical)
    return VarianceSplit(between, within, total / count, count)


def power_at(runs: int, effect: float, split: VarianceSplit, tasks_per_run: float,
             alpha: float = 0.05) -> float:
    """Power of the paired comparison over `runs` pairs of runs of `tasks_per_run` tasks to find `effect`
    at two-sided level `alpha`: the paired t test's (scipy's noncentral t), and 0 where the sign-flip test
    cannot reach alpha over so few runs."""
    from scipy.stats import nct, t

    if runs < 2 or smallest_p(runs) >= alpha:
        return 0.0
    spread = math.sqrt(split.run_variance(tasks_per_run))
    if spread == 0:
        return 1.0 if effect else alpha
    shift = abs(effect) * math.sqrt(runs) / spread
    critical = float(t.ppf(1 - alpha / 2, runs - 1))
    upper, lower = float(nct.sf(critical, runs - 1, shift)), float(nct.cdf(-critical, runs - 1, shift))
    # scipy's noncentral t gives nan far in a tail (df 5, shift 10): there the tail's mass is 0 or 1
    upper = upper if math.isfinite(upper) else float(shift > critical)
    lower = lower if math.isfinite(lower) else 0.0
    return min(1.0, upper + lower)


def runs_needed(effect: float, split: VarianceSplit, tasks_per_run: float, alpha: float = 0.05,
                power: float = 0.8, most: int = 100_000) -> int | None:
    """The fewest paired runs of `tasks_per_run` tasks with `power` to find `effect`; None when there is
    no effect to find or more than `most` runs would be needed."""
    if abs(effect) < 1e-12:
        return None
    low = high = runs_to_reach(alpha)
    while power_at(high, effect, split, tasks_per_run, alpha) < power:  # power grows with the runs
        if high >= most:
            return None
        low, high = high + 1, min(2 * high, most)
    while low < high:
        middle = (low + high) // 2
        if power_at(middle, effect, split, tasks_per_run, alpha) >= power:
            high = middle
        else:
            low = middle + 1
    return low


ONE_RUN = "1 run's tasks"
"""`ci_over` of an interval from one run: about that run's tasks, not about the variant."""


def group_interval(success: np.ndarray, runs: np.ndarray) -> tuple[int, float | None, float | None, str]:
    """A group's runs, its 95% success interval and what the interval is over: its runs (`cluster_ci`) when
    it has two or more, else the one run's tasks (BCa over episodes), which says how sure that run's rate
    is, not how another run of the variant would do."""
    estimate = cluster_ci(success, runs)
    if estimate.runs >= 2:  # a rate: the t interval of few runs can reach past 0 or 1
        return estimate.runs, max(0.0, estimate.low), min(1.0, estimate.high), f"{estimate.runs} runs"
    low, high = bootstrap_ci(success)
    return estimate.runs, low, high, ONE_RUN

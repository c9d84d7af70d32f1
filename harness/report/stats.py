"""The statistics the report uses, on plain arrays.

The independent unit is the seed. A self-evolving agent's episodes are not independent: what a run
learnt early shifts all its later tasks, so two runs of one variant differ by more than their tasks
explain, and an interval over episodes is too narrow (an A/A comparison of one agent with run effects
of sd 0.5-1.0 on the logit scale came out "resolved" 29-78% of the time over episodes). And the runs
of one seed are not independent either: its order seeds and repeats see the seed's one task set, and
repeats its one order (under greedy decoding a repeat is a copy), so counting them as runs gave
identical agents 13-41% false positives. So the coarsest level that shares a task set, the seed, is the
unit (`--unit order` makes each seed's orders units, assuming that a task set shared by orders adds
nothing they share):
- an interval about a variant is over its seeds: `cluster_ci`, the pooled mean with a cluster-robust
  (CR1) standard error, seeds as clusters, and Student's t on seeds - 1 degrees of freedom (Miller
  2024, "Adding Error Bars to Evals"; Cameron & Miller 2015). With equal seeds it is the t interval
  of the seeds' means; the calibration bench (`python -m harness.bench calibration`) measures its
  coverage;
- a paired test is over paired seeds: `sign_flip_p`, the sign-flip permutation test (scipy's
  `permutation_test`) of each seed's summed differences, so that it tests the same pooled mean the
  interval is about; exact up to 16 seeds, Monte Carlo beyond; it cannot go below `smallest_p`;
- a plan is in seeds and tasks per seed: `variance_split` (between and within seeds, one-way ANOVA
  estimates), `decision_power` (the power of the verdict itself, the sign-flip test and the t interval
  together, simulated) and `units_needed`, from a pilot taken with its uncertainty (`safeguard`);
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


EXHAUSTIVE_UP_TO = 16
"""Up to this many units the sign-flip test enumerates every sign pattern (exact); beyond, random ones."""
MONTE_CARLO_RESAMPLES = 100_000


def sign_flip_method(units: int) -> str:
    """`exact` (every sign pattern) or `monte carlo` (random ones): how `sign_flip_p` got its p-value."""
    return "exact" if units <= EXHAUSTIVE_UP_TO else "monte carlo"


def sign_flip_p(differences: np.ndarray, seed: int = 0) -> float:
    """Two-sided p-value of the units' paired differences by the sign-flip permutation test (scipy's
    `permutation_test`, paired samples), the statistic their mean: exact over all 2^n sign patterns up to
    `EXHAUSTIVE_UP_TO` units, else over 100,000 seeded random ones (scipy's conservative Monte Carlo
    p-value, valid but not exact). It cannot go below `smallest_p`."""
    from scipy.stats import permutation_test

    differences = np.asarray(differences, dtype=float)
    if len(differences) == 0:
        return float("nan")
    if not differences.any():
        return 1.0
    resamples = np.inf if len(differences) <= EXHAUSTIVE_UP_TO else MONTE_CARLO_RESAMPLES
    result = permutation_test((differences,), lambda x, axis: np.mean(x, axis=axis), vectorized=True,
                              permutation_type="samples", n_resamples=resamples,
                              random_state=np.random.default_rng(seed))
    return float(min(1.0, result.pvalue))


def smallest_p(units: int, zeros: int = 0) -> float:
    """The smallest two-sided p-value a sign-flip test over `units` paired units can give: both all-same-sign
    patterns of the units whose difference is not 0 (a difference of exactly 0 is the same under either
    sign: each one halves the distinct patterns), and beyond `EXHAUSTIVE_UP_TO` units no less than the Monte
    Carlo test's floor, 2 / (100,000 + 1)."""
    nonzero = max(units - zeros, 0)
    exact = min(1.0, 2.0 ** (1 - min(nonzero, 1024)))
    return exact if units <= EXHAUSTIVE_UP_TO else max(exact, 2 / (MONTE_CARLO_RESAMPLES + 1))


def units_to_reach(alpha: float = 0.05, rows: int = 1) -> int:
    """The fewest paired units whose sign-flip test can resolve at all in a report of `rows` rows: 6 at 5% for
    one row. With Holm, the row ranked first is multiplied by `rows`, so that is what it must clear."""
    units = 1
    while smallest_p(units) * rows >= alpha:
        units += 1
    return units


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


POWER_DRAWS = 2000
RANDOM_PATTERNS = 1024
SIMULATED_UP_TO = 40
"""Beyond this many units the power is the t test's (noncentral t): there the sign-flip test and the t
interval agree, and a simulation would cost seconds per point."""


def _pattern_sums(differences: np.ndarray) -> np.ndarray:
    """Every signed sum of each row's values: (rows, 2^units)."""
    units = differences.shape[1]
    patterns = 1 - 2 * ((np.arange(2**units)[:, None] >> np.arange(units)) & 1).astype(float)
    return differences @ patterns.T


def _sign_flip_p_batch(differences: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The sign-flip p-value of each row of `differences` (draws x units). Up to `EXHAUSTIVE_UP_TO` units over
    every sign pattern, as `sign_flip_p`, counted meet-in-the-middle (the signed sums of each half, the
    second half sorted, so 2^16 patterns cost 2 x 2^8 sums and a search); beyond, over `RANDOM_PATTERNS`
    random patterns with the observed one counted (scipy's Monte Carlo convention)."""
    draws, units = differences.shape
    # the all-same-sign patterns count as extreme, whatever the rounding of their sums
    observed = np.abs(differences.sum(axis=1)) * (1 - 1e-12)
    if units > EXHAUSTIVE_UP_TO:
        patterns = rng.choice([-1.0, 1.0], size=(RANDOM_PATTERNS, units))
        as_extreme = (np.abs(differences @ patterns.T) >= observed[:, None]).sum(axis=1)
        return (as_extreme + 1) / (RANDOM_PATTERNS + 1)
    first = _pattern_sums(differences[:, : units // 2])
    second = np.sort(_pattern_sums(differences[:, units // 2:]), axis=1)
    # one searchsorted over all rows: each row's sums shifted past the previous row's
    shift = (2 * np.abs(differences).sum(axis=1).max() + 1) * np.arange(draws)[:, None]
    flat, width = (second + shift).ravel(), second.shape[1]
    offsets = width * np.arange(draws)[:, None]
    above = width - (np.searchsorted(flat, (observed[:, None] - first + shift).ravel(), "left")
                     .reshape(first.shape) - offsets)
    below = (np.searchsorted(flat, (-observed[:, None] - first + shift).ravel(), "right")
             .reshape(first.shape) - offsets)
    p = (above + below).sum(axis=1) / 2.0**units
    return np.where(observed > 0, np.minimum(p, 1.0), 1.0)


def decision_power(units: int, effect: float, spread: float, alpha: float = 0.05, rows: int = 1,
                   draws: int = POWER_DRAWS, seed: int = 0, sample: np.ndarray | None = None) -> float:
    """Power of the report's verdict, `resolved`, for one row: the sign-flip p-value times `rows` (Holm's
    multiplier for the row ranked first: exact when the other rows have no effect, else an underestimate)
    under `alpha` and the 95% t interval excluding 0, where each of `units` paired units differs by a draw
    of N(effect, spread^2). Simulated with `draws` seeded draws (the same for any effect and spread: the
    power is a smooth, reproducible function of them); beyond `SIMULATED_UP_TO` units, the t test's power
    at `alpha / rows` (noncentral t), which the sign-flip test's approaches. With `sample` (many units'
    differences drawn from a known truth, as the calibration bench has them), the units are drawn from it
    instead of a normal, and `effect` and `spread` are not used: the verdict's power at that truth, skew and
    all."""
    from scipy.stats import nct, t

    if units < 2 or smallest_p(units) * rows >= alpha:
        return 0.0
    critical = float(t.ppf(1 - (1 - LEVEL) / 2, units - 1))
    if sample is not None:
        rng = np.random.default_rng([seed, units])
        return _resolved_share(rng.choice(np.asarray(sample, dtype=float), size=(draws, units)), critical,
                               alpha, rows, rng)
    if spread == 0:
        return 1.0 if effect else 0.0
    if units > SIMULATED_UP_TO:
        shift = abs(effect) * math.sqrt(units) / spread
        critical = max(critical, float(t.ppf(1 - alpha / rows / 2, units - 1)))
        upper, lower = float(nct.sf(critical, units - 1, shift)), float(nct.cdf(-critical, units - 1, shift))
        # scipy's noncentral t gives nan far in a tail: there the tail's mass is 0 or 1
        upper = upper if math.isfinite(upper) else float(shift > critical)
        return min(1.0, upper + (lower if math.isfinite(lower) else 0.0))
    rng = np.random.default_rng([seed, units])
    return _resolved_share(effect + spread * rng.standard_normal((draws, units)), critical, alpha, rows, rng)


def _resolved_share(differences: np.ndarray, critical: float, alpha: float, rows: int,
                    rng: np.random.Generator) -> float:
    """The share of rows of `differences` (draws x units) the verdict resolves: the t interval excluding 0
    (|t| above `critical`) and the sign-flip p times `rows` under `alpha`."""
    units = differences.shape[1]
    spread = differences.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):  # identical draws: an infinite t, or none
        t_statistic = np.abs(differences.mean(axis=1)) / (spread / math.sqrt(units))
    t_statistic = np.where(spread > 0, t_statistic, np.where(differences.mean(axis=1) != 0, np.inf, 0.0))
    resolved = (t_statistic > critical) & (_sign_flip_p_batch(differences, rng) * rows < alpha)
    return float(resolved.mean())


def power_at(units: int, effect: float, split: VarianceSplit, tasks_per_unit: float, alpha: float = 0.05,
             rows: int = 1) -> float:
    """`decision_power` over `units` paired units of `tasks_per_unit` paired episodes each, the spread of a
    unit's difference from the variance split."""
    return decision_power(units, effect, math.sqrt(split.run_variance(tasks_per_unit)), alpha, rows)


def units_needed(effect: float, split: VarianceSplit, tasks_per_unit: float, alpha: float = 0.05,
                 power: float = 0.8, rows: int = 1, most: int = 100_000) -> int | None:
    """The fewest paired units of `tasks_per_unit` tasks whose `resolved` has `power` to find `effect`; None
    when there is no effect to find or more than `most` units would be needed. Counted one by one through
    the exact range (the simulated power is not strictly monotone in the units), then by doubling and
    halving."""
    if abs(effect) < 1e-12:
        return None
    units = units_to_reach(alpha, rows)
    while units <= EXHAUSTIVE_UP_TO:
        if power_at(units, effect, split, tasks_per_unit, alpha, rows) >= power:
            return units
        units += 1
    low, high = units, units
    while power_at(high, effect, split, tasks_per_unit, alpha, rows) < power:
        if high >= most:
            return None
        low, high = high + 1, min(2 * high, most)
    while low < high:
        middle = (low + high) // 2
        if power_at(middle, effect, split, tasks_per_unit, alpha, rows) >= power:
            high = middle
        else:
            low = middle + 1
    return low


@dataclass(frozen=True)
class Safeguard:
    """A pilot's difference and spread taken with their uncertainty, for planning: the difference at the
    near end of its 60% interval and the spread of the units' differences at its one-sided 80% upper
    bound ("safeguard power", Perugini, Gallucci & Costantini 2014: a pilot's point estimate overstates the
    effect that got it noticed and understates the spread of a few units)."""

    effect: float
    """|difference| less t(0.8, n - 1) standard errors, at least 0."""
    spread: float
    """sd of the units' differences x sqrt((n - 1) / chi2(0.2, n - 1))."""


def safeguard(unit_differences: np.ndarray) -> Safeguard | None:
    """The safeguarded difference and spread of a pilot's per-unit differences; None under two units."""
    from scipy.stats import chi2, t

    values = np.asarray(unit_differences, dtype=float)
    units = len(values)
    if units < 2:
        return None
    spread = float(values.std(ddof=1))
    effect = abs(float(values.mean())) - float(t.ppf(0.8, units - 1)) * spread / math.sqrt(units)
    return Safeguard(max(0.0, effect), spread * math.sqrt((units - 1) / float(chi2.ppf(0.2, units - 1))))


UNIT_NAMES = {"seed": "seed", "order": "seed-order"}
"""The independent unit by `--unit` (harness/report/compare.py's UNITS says what each is made of)."""


def unit_label(count: int, unit: str = "seed") -> str:
    """`6 seeds`, `1 seed`: how many independent units an interval or a test is over."""
    return f"{count} {UNIT_NAMES[unit]}{'' if count == 1 else 's'}"


def group_interval(success: np.ndarray, units: np.ndarray,
                   unit: str = "seed") -> tuple[int, float | None, float | None, str]:
    """A group's units, its 95% success interval and what the interval is over: its units (`cluster_ci`,
    seeds by default: a seed's repeats and order seeds share its tasks, so they are one unit) when it has
    two or more, else the one unit's episodes (BCa over them), which says how sure that seed's rate is, not
    how another seed of the variant would do."""
    estimate = cluster_ci(success, units)
    if estimate.runs >= 2:  # a rate: the t interval of few units can reach past 0 or 1
        return (estimate.runs, max(0.0, estimate.low), min(1.0, estimate.high),
                unit_label(estimate.runs, unit))
    low, high = bootstrap_ci(success)
    return estimate.runs, low, high, one_unit(unit)


def one_unit(unit: str = "seed") -> str:
    """`ci_over` of an interval from one unit: about that unit's tasks, not about the variant."""
    return f"1 {UNIT_NAMES[unit]}'s tasks"

"""`python -m harness.bench calibration`: the report's verdicts against an agent whose truth is known.

A synthetic agent: a run of an arm solves task t with probability sigmoid(base + ease_t + q + effect),
where ease_t ~ N(0, 1) is drawn once per task of a seed (each seed draws its own task set, which every
arm, order and repeat of that seed sees), q ~ N(0, sd) once per run of each arm at each seed and order
(what a run learnt early, its luck), and effect is 0 for the baseline and for an A/A candidate. A design
adds what users do around it (`Design`): several seeds; repeats of each run, `identical` (copies: greedy
decoding) or `shared` (the same q, fresh draws: sampling); order seeds (the seed's tasks in other orders,
each a run with its own q); unequal run lengths (each run stops after 50-100% of its tasks, as a budget
stops it; episodes pair where both arms ran); several candidates in one report (Holm across them: in A/A
all are the baseline's equal, in A/B the first has the effect and the others none); a base rate away from
0.5. Each experiment builds the episodes frame the report reads and passes it to the report's own
`paired_comparisons` (harness/report/compare.py, the code that writes comparisons.parquet):

- A/A: how often any row is `resolved` (a false positive of the report), with its 95% Clopper-Pearson
  interval; beside it how often the first row's episode-level McNemar test (`p_episodes`) is under 0.05;
- A/B: how often the first row is resolved with a positive difference, the power, beside the power the
  verdict has at the truth (`decision_power` with seeds drawn from 10,000 simulated seeds' differences of
  the design), and beside it what the report's plan line computes with its normal model of a seed's
  difference given the true difference and spread;
- the baseline arm's success interval (`group_interval`, over its seeds): how often it holds the known
  population rate, E[sigmoid(base + ease + q)].

Sequential rows (`--sequential`, seeds=until_decided's test, harness/report/sequential.py): each experiment
draws `max_seeds` seeds of a baseline and a candidate and looks after every `batch` of them, as the sweep
does, stopping at the first decision: how often identical arms are decided (a false positive however often
it looked), how often a known effect is decided better (its power), the seeds it used on average, and the
seeds the fixed test (`decision_power`) needs for the same power at the true difference and spread.

Numpy, polars and scipy only; rows run in parallel processes (`--jobs`), each seeded by (--seed, its
design), so a row gives the same figures whichever other rows run beside it. `--out DIR` writes the table
as DIR/calibration.parquet.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from harness.bench.common import table
from harness.report.compare import paired_comparisons
from harness.report.stats import decision_power, group_interval, units_to_reach

ALPHA = 0.05
PLANNED_POWER = 0.8
LARGEST_EFFECT = 8.0
"""The largest logit effect the automatic effect is looked for under."""
TRUTH_SEEDS = 10_000
"""Seeds simulated for the true spread of a seed's difference."""


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow


# ----- the design and the known truth -----

@dataclass(frozen=True)
class Design:
    """What one row of the table runs: the agent's truth and what users do around it."""

    seeds: int
    sd: float
    tasks: int = 50
    repeats: int = 1
    repeat_kind: str = "identical"
    """`identical` repeats are copies of the run (greedy decoding); `shared` ones redraw each task's
    outcome with the run's own q (sampling)."""
    orders: int = 1
    unequal: bool = False
    rows: int = 1
    """Candidates compared in one report: Holm across them."""
    base: float = 0.0

    @property
    def label(self) -> str:
        parts = [f"{self.repeats} {self.repeat_kind} repeats" if self.repeats > 1 else "",
                 f"{self.orders} orders" if self.orders > 1 else "",
                 "unequal lengths" if self.unequal else "",
                 f"{self.rows} rows (Holm)" if self.rows > 1 else "",
                 f"base {self.base:+g}" if self.base else ""]
        return ", ".join(p for p in parts if p) or "one run per seed"


DESIGNS = {
    "repeats-shared": Design(6, 1.0, repeats=2, repeat_kind="shared"),
    "repeats-identical": Design(6, 1.0, repeats=2),
    "few-seeds-identical": Design(3, 1.0, repeats=4),
    "orders": Design(8, 1.0, orders=2),
    "unequal": Design(8, 1.0, unequal=True),
    "holm": Design(10, 1.0, rows=3),
    "low-base": Design(8, 1.0, base=-1.5),
}
"""The designs the bench runs beside its grid of seeds x sd, by name (`--designs`)."""


@functools.cache
def _normal_nodes(points: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Hermite nodes and weights for the expectation over a standard normal."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(points)
    return nodes, weights / weights.sum()


def population_rate(sd: float, effect: float = 0.0, base: float = 0.0) -> float:
    """The success rate of an arm over all tasks and runs: E[sigmoid(base + effect + ease + q)], ease ~
    N(0, 1) and q ~ N(0, sd) independent, so ease + q ~ N(0, sqrt(1 + sd^2))."""
    nodes, weights = _normal_nodes(120)
    return float(weights @ sigmoid(base + effect + math.sqrt(1 + sd**2) * nodes))


def true_difference(sd: float, effect: float, base: float = 0.0) -> float:
    return population_rate(sd, effect, base) - population_rate(sd, 0.0, base)


def draw(rng: np.random.Generator, design: Design, effects: list[float],
         seeds: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One experiment's outcomes of the arms (the baseline, then a candidate per effect) over `seeds` seeds
    (the design's by default): success and attempted, shaped (arm, seed, order, repeat, position), and
    each (seed, order, position)'s task index within its seed."""
    seeds = design.seeds if seeds is None else seeds
    arms, shape = 1 + len(effects), (seeds, design.orders)
    ease = rng.normal(0.0, 1.0, size=(seeds, design.tasks))  # one task set per seed, shared by all
    order = np.argsort(rng.random((*shape, design.tasks)), axis=2)
    order[:, 0] = np.arange(design.tasks)  # order seed 0 keeps the task set's own order
    seen = np.take_along_axis(ease[:, None, :], order, axis=2)  # (seed, order, position)
    quality = rng.normal(0.0, design.sd, size=(arms, *shape, 1, 1))
    logit = design.base + np.array([0.0, *effects])[:, None, None, None, None] + seen[None, :, :, None, :]
    chance = sigmoid(logit + quality)
    drawn = design.repeats if design.repeat_kind == "shared" else 1
    success = rng.random((arms, *shape, drawn, design.tasks)) < chance
    success = np.broadcast_to(success, (arms, *shape, design.repeats, design.tasks))
    if design.unequal:  # a copy stops where its run stopped; a redrawn repeat where its budget ends
        lengths = rng.integers(design.tasks // 2, design.tasks + 1, size=(arms, *shape, drawn, 1))
        attempted = np.arange(design.tasks) < np.broadcast_to(lengths, (arms, *shape, design.repeats, 1))
    else:
        attempted = np.ones_like(success)
    return success, attempted, order


def true_seed_differences(design: Design, effect: float, seed: int = 0) -> np.ndarray:
    """`TRUTH_SEEDS` seeds' pooled differences (candidate - baseline over the episodes both attempted, all
    its orders and repeats together) under the design, seeded, so the same for every call: the truth of
    a seed's difference, its skew included."""
    rng = np.random.default_rng([seed, 7919])
    success, attempted, _ = draw(rng, design, [effect], seeds=TRUTH_SEEDS)
    both = attempted[0] & attempted[1]
    return ((success[1].astype(float) - success[0]) * both).sum(axis=(1, 2, 3)) / both.sum(axis=(1, 2, 3))


def seed_spread(design: Design, effect: float, seed: int = 0) -> float:
    """The sd of one seed's pooled difference under the design."""
    return float(true_seed_differences(design, effect, seed).std(ddof=1))


def promised_power(design: Design, effect: float, seed: int = 0) -> float:
    """The power of the report's verdict at the truth: its seeds drawn from the true distribution of a
    seed's difference (`decision_power` with a sample)."""
    return decision_power(design.seeds, 0.0, 0.0, ALPHA, design.rows,
                          sample=true_seed_differences(design, effect, seed))


def planned_power(design: Design, effect: float, seed: int = 0) -> float:
    """What the report's plan line would promise knowing the true difference and spread: its normal model of
    a seed's difference (no skew)."""
    return decision_power(design.seeds, true_difference(design.sd, effect, design.base),
                          seed_spread(design, effect, seed), ALPHA, design.rows)


def effect_for_power(design: Design, power: float = PLANNED_POWER) -> float:
    """The logit effect the plan gives `power` at the design's seeds, or at the fewest seeds whose test can
    resolve where the design has fewer (there the power observed can only be 0)."""
    planned = replace(design, seeds=max(design.seeds, units_to_reach(ALPHA, design.rows)))
    low, high = 0.0, LARGEST_EFFECT
    if promised_power(planned, high) < power:
        return high
    for _ in range(24):
        middle = (low + high) / 2
        if promised_power(planned, middle) >= power:
            high = middle
        else:
            low = middle
    return high


# ----- the episodes the report reads -----

def arm_names(rows: int) -> list[str]:
    return ["baseline", *(["candidate"] if rows == 1 else [f"candidate{i + 1}" for i in range(rows)])]


def layout(design: Design) -> pl.DataFrame:
    """The columns of an episodes frame of the design's arms, all but `success`, `attempted` and
    `task_id`, in the order of `draw`'s arrays raveled: the report's grouping, pairing and spend columns."""
    names = arm_names(design.rows)
    grid = np.indices((len(names), design.seeds, design.orders, design.repeats, design.tasks)).reshape(5, -1)
    arm, seed, order, repeat, position = grid
    frame = pl.DataFrame({"variant": np.array(names)[arm], "seed": seed, "order_seed": order,
                          "repeat": repeat, "stream_position": position})
    return frame.with_columns(
        env=pl.lit("synthetic"), scenario=pl.lit("sequential"), model=pl.lit("known-truth"),
        probe=pl.lit(False), run_id=pl.format("{}-s{}-o{}-r{}", "variant", "seed", "order_seed", "repeat"),
        total_tokens=pl.lit(100), cost_usd=pl.lit(0.0))


def episodes(frame: pl.DataFrame, success: np.ndarray, attempted: np.ndarray,
             order: np.ndarray) -> pl.DataFrame:
    """`layout`'s frame with one experiment's outcomes; task ids from each seed's task set and order."""
    task = np.broadcast_to(order[None, :, :, None, :], success.shape).ravel()
    return frame.with_columns(success=pl.Series(success.ravel()), attempted=pl.Series(attempted.ravel()),
                              task_id=pl.format("s{}-t{}", "seed", pl.Series(task)))


# ----- one row -----

@dataclass(frozen=True)
class Row:
    """One row of the table: its design, its counts over the experiments, and the plan's promise."""

    design: Design
    experiments: int
    effect: float
    true_difference: float
    seed_sd: float
    aa_resolved: int
    """A/A experiments in which any row was resolved."""
    aa_episodes: int
    """A/A experiments whose first row's episode-level McNemar p (`p_episodes`) was under 0.05."""
    ab_resolved: int
    """A/B experiments whose first row was resolved with a positive difference."""
    promised: float
    planned: float
    """The plan line's normal model of a seed's difference at the true difference and spread."""
    covered: int
    coverage_seeds: int
    """Experiments whose baseline interval is over its seeds (all, from 2 seeds)."""
    seconds: float
    """The experiments' time (the truth's simulation left out)."""


def calibrate(design: Design, experiments: int, seed: int = 0, effect: float | None = None) -> Row:
    """One row: `experiments` A/A and A/B experiments of the design through the report's
    `paired_comparisons`; the A/B effect is `effect` (logit) or, when None, the one the plan gives 80%
    power (`effect_for_power`)."""
    effect = effect_for_power(design) if effect is None else effect
    rng = np.random.default_rng([seed, *hashlib.sha256(repr(design).encode()).digest()[:8]])
    frame = layout(design)
    rate = population_rate(design.sd, 0.0, design.base)
    nulls = [0.0] * (design.rows - 1)
    aa_resolved = aa_episodes = ab_resolved = covered = coverage_seeds = 0
    started = time.perf_counter()
    for _ in range(experiments):
        same = paired_comparisons(episodes(frame, *draw(rng, design, [0.0, *nulls])), ["variant"],
                                  plan=False).table
        aa_resolved += bool(same["resolved"].any())
        aa_episodes += same["p_episodes"][0] < ALPHA
        success, attempted, order = draw(rng, design, [effect, *nulls])
        better = paired_comparisons(episodes(frame, success, attempted, order), ["variant"],
                                    plan=False).table.row(0, named=True)
        ab_resolved += bool(better["resolved"]) and better["difference"] > 0
        mine = attempted[0].ravel()
        seeds = np.repeat(np.arange(design.seeds), mine.size // design.seeds)[mine]
        counted, low, high, _ = group_interval(success[0].ravel()[mine].astype(float), seeds)
        if counted >= 2:  # an interval over seeds, not over one seed's episodes
            coverage_seeds += 1
            covered += low <= rate <= high
    seconds = time.perf_counter() - started
    return Row(design=design, experiments=experiments, effect=effect,
               true_difference=true_difference(design.sd, effect, design.base),
               seed_sd=seed_spread(design, effect, seed), aa_resolved=aa_resolved, aa_episodes=aa_episodes,
               ab_resolved=ab_resolved, promised=promised_power(design, effect, seed),
               planned=planned_power(design, effect, seed), covered=covered,
               coverage_seeds=coverage_seeds, seconds=seconds)


def proportion(successes: int, trials: int) -> tuple[float, float, float]:
    """The rate and its 95% Clopper-Pearson interval."""
    from scipy.stats import binomtest  # lazy, as in harness/report/stats.py: seconds to import

    if trials == 0:
        return float("nan"), float("nan"), float("nan")
    interval = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="exact")
    return successes / trials, float(interval.low), float(interval.high)


def record(row: Row) -> dict[str, Any]:
    """One row of calibration.parquet: the design, the rates with their intervals, the promise, and whether
    the row holds (its false-positive interval reaching down to 5% or below, the promise inside the power's
    interval)."""
    fp, fp_low, fp_high = proportion(row.aa_resolved, row.experiments)
    power, power_low, power_high = proportion(row.ab_resolved, row.experiments)
    coverage, coverage_low, coverage_high = proportion(row.covered, row.coverage_seeds)
    design = asdict(row.design)
    return {"design": row.design.label, **design, "test": "sign-flip", "experiments": row.experiments,
            "effect": row.effect,
            "true_difference": row.true_difference, "seed_sd": row.seed_sd,
            "false_positive_rate": fp, "false_positive_low": fp_low, "false_positive_high": fp_high,
            "episode_false_positive_rate": row.aa_episodes / row.experiments,
            "power": power, "power_low": power_low, "power_high": power_high, "promised": row.promised,
            "planned": row.planned,
            "coverage": coverage, "coverage_low": coverage_low, "coverage_high": coverage_high,
            "holds": bool(fp_low <= ALPHA and power_low - 1e-9 <= row.promised <= power_high + 1e-9),
            "seconds": row.seconds}


def _rate(value: float, low: float, high: float) -> str:
    return "" if math.isnan(value) else f"{value:.3f} [{low:.3f}, {high:.3f}]"


def cells(records: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The printed table: one line per row."""
    return [{"design": r["design"], "seeds": str(r["seeds"]), "sd": f"{r['sd']:g}",
             "experiments": str(r["experiments"]),
             "A/A resolved [95% CI]": _rate(r["false_positive_rate"], r["false_positive_low"],
                                            r["false_positive_high"]),
             "A/A p_episodes < 0.05": f"{r['episode_false_positive_rate']:.3f}",
             "A/B effect, logit (true difference)": f"{r['effect']:+.2f} ({r['true_difference']:+.3f})",
             "power observed [95% CI]": _rate(r["power"], r["power_low"], r["power_high"]),
             "promised": f"{r['promised']:.3f}", "plan's normal model": f"{r['planned']:.3f}",
             "coverage [95% CI]": _rate(r["coverage"], r["coverage_low"], r["coverage_high"]),
             "holds": "yes" if r["holds"] else "NO"} for r in records]


# ----- sequential rows -----

@dataclass(frozen=True)
class SequentialRow:
    """One sequential row: a design whose seeds are looked at every `batch`, up to `design.seeds`."""

    design: Design
    batch: int
    experiments: int
    effect: float
    true_difference: float
    seed_sd: float
    decided: int
    """Experiments decided: `better` at an effect, either side without one (a false positive)."""
    seeds_used: float
    """Seeds run on average: where it stopped, or all of them."""
    fixed_seeds: int | None
    """The fewest seeds the fixed test needs for the power observed (at most 0.99), at the true difference and
    spread; None where it observed none."""
    seconds: float


def per_seed_differences(success: np.ndarray, attempted: np.ndarray) -> np.ndarray:
    """Each seed's pooled difference, candidate - baseline over the episodes both attempted, in seed order:
    what the report's sequential comparison takes (harness/report/compare.py `_sequential`)."""
    both = attempted[0] & attempted[1]
    return ((success[1].astype(float) - success[0]) * both).sum(axis=(1, 2, 3)) / both.sum(axis=(1, 2, 3))


def calibrate_sequential(design: Design, experiments: int, effect: float, batch: int = 2,
                         seed: int = 0) -> SequentialRow:
    """`experiments` sequential sweeps of `design.seeds` seeds at most, looked at every `batch` seeds."""
    from harness.report.sequential import sequential_verdict

    rng = np.random.default_rng([seed, 31, *hashlib.sha256(repr((design, effect)).encode()).digest()[:8]])
    decided, used = 0, []
    started = time.perf_counter()
    for _ in range(experiments):
        success, attempted, _ = draw(rng, design, [effect])
        differences = per_seed_differences(success, attempted)
        stop, decision = design.seeds, "go on"
        for seeds in range(batch, design.seeds + 1, batch):
            decision = sequential_verdict(differences[:seeds], ALPHA).decision
            if decision != "go on":
                stop = seeds
                break
        decided += decision == "better" if effect else decision != "go on"
        used.append(stop)
    seconds = time.perf_counter() - started
    truth = true_seed_differences(design, effect, seed)
    difference, spread = true_difference(design.sd, effect, design.base), float(truth.std(ddof=1))
    power = min(decided / experiments, 0.99)
    fixed = None
    if effect and decided:  # the fixed verdict's power at the truth, as the fixed rows' promise
        fixed = next((n for n in range(units_to_reach(ALPHA), 200)
                      if decision_power(n, 0.0, 0.0, ALPHA, sample=truth) >= power), None)
    return SequentialRow(design, batch, experiments, effect, difference, spread, decided,
                         float(np.mean(used)), fixed, seconds)


def sequential_record(row: SequentialRow) -> dict[str, Any]:
    rate, low, high = proportion(row.decided, row.experiments)
    aa = row.effect == 0
    return {"design": f"sequential, batches of {row.batch}", **asdict(row.design), "test": "sequential",
            "experiments": row.experiments, "effect": row.effect, "true_difference": row.true_difference,
            "seed_sd": row.seed_sd,
            **({"false_positive_rate": rate, "false_positive_low": low, "false_positive_high": high} if aa
               else {"power": rate, "power_low": low, "power_high": high}),
            "seeds_used": row.seeds_used, "fixed_seeds": row.fixed_seeds,
            "holds": bool(low <= ALPHA) if aa else (row.fixed_seeds is None
                                                    or row.seeds_used <= row.fixed_seeds),
            "seconds": row.seconds}


def sequential_cells(records: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"max seeds": str(r["seeds"]), "sd": f"{r['sd']:g}", "experiments": str(r["experiments"]),
             "effect, logit (true difference)": f"{r['effect']:+.2f} ({r['true_difference']:+.3f})",
             "decided [95% CI]": _rate(*(r[k] for k in (("false_positive_rate", "false_positive_low",
                                                           "false_positive_high") if r["effect"] == 0 else
                                                          ("power", "power_low", "power_high")))),
             "seeds used, mean": f"{r['seeds_used']:.1f}",
             "fixed test's seeds at that power": "" if r["fixed_seeds"] is None else str(r["fixed_seeds"]),
             "holds": "yes" if r["holds"] else "NO"} for r in records]


SEQUENTIAL_NOTE = """
(Each experiment: up to {seeds} seeds of a baseline and a candidate, looked at after every {batch}, stopped
 at the first decision of the anytime-valid test at {alpha}. decided: either side for identical arms (a false
 positive, however often it looked), `better` at an effect (the power). fixed test's seeds: the fewest with
 which the fixed sign-flip verdict's power at the truth (decision_power, seeds drawn from 10,000 simulated
 seeds' differences) reaches the power observed (at most 0.99). holds: a false-positive interval reaching
 {alpha} or below; at an effect, fewer seeds used on average than the fixed test needs)"""


def _calibrate_sequential(call: tuple[Design, int, float, int, int]) -> SequentialRow:
    design, experiments, effect, batch, seed = call
    return calibrate_sequential(design, experiments, effect, batch, seed)


# ----- the command -----

NOTE = """
(A/A: every arm the same agent; resolved: any row of the report resolved (p_holm < {alpha} and the t
 interval over seeds excluding 0); p_episodes < 0.05: the first row's McNemar test over episode pairs.
 A/B: the first candidate's logit effect, unless --effect the one the verdict has {power:.0%} power at (at
 {fewest} seeds where a row has fewer, which no sign-flip test can resolve); power observed: the first row
 resolved with a positive difference. promised: decision_power with the seeds drawn from 10,000 simulated
 seeds' differences of the design (the verdict's power at the truth, skew included); plan's normal model:
 decision_power(seeds, true difference, true sd of a seed's difference, rows), what the report's plan line
 computes from a pilot that knew the truth. coverage: the baseline arm's group_interval (over its seeds)
 holding the population rate. holds: the false-positive interval reaches {alpha} or below and the promise
 lies inside the power's interval. Intervals: 95% Clopper-Pearson over the experiments)"""


def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(prog="python -m harness.bench calibration", description=" ".join(
        __doc__.split("\n\n")[0].replace("`", "").split()))
    options.add_argument("--experiments", type=int, default=400,
                         help="A/A and A/B experiments per row (default: 400)")
    options.add_argument("--tasks", type=int, default=50, help="tasks per run (default: 50)")
    options.add_argument("--seeds", type=int, nargs="*", default=[6, 7, 8, 10, 30],
                         help="paired seeds per experiment, one run each, a row per seeds x sd (default: "
                         "6 7 8 10 30)")
    options.add_argument("--sd", type=float, nargs="+", default=[0.5, 1.0],
                         help="run-level sd on the logit scale (default: 0.5 1.0)")
    options.add_argument("--designs", nargs="*", default=list(DESIGNS), choices=list(DESIGNS),
                         help="designs run beside that grid (default: all: " + ", ".join(DESIGNS) + ")")
    options.add_argument("--effect", type=float, default=None,
                         help="the A/B logit effect of every row (default: per row, the one the plan gives "
                         "80%% power)")
    options.add_argument("--seed", type=int, default=0, help="seeds every row with its design (default: 0)")
    options.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                         help="rows computed at once, one process each (default: the CPU count)")
    options.add_argument("--sequential", type=int, nargs="*", default=[6, 10, 20], metavar="SEEDS",
                         help="sequential rows (seeds=until_decided, batches of 2, at most 30 seeds, sd 1): "
                         "identical arms, and the effects the fixed test needs these many seeds for at 80%% "
                         "power (default: 6 10 20; none: no sequential rows)")
    options.add_argument("--out", type=Path, default=None,
                         help="a directory to write calibration.parquet into")
    return options


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    started = time.perf_counter()
    designs = [Design(seeds, sd, tasks=args.tasks) for seeds in args.seeds for sd in args.sd]
    designs += [replace(DESIGNS[name], tasks=args.tasks) for name in args.designs]
    calls = [(design, args.experiments, args.seed, args.effect) for design in designs]
    longest = replace(Design(30, 1.0, tasks=args.tasks))
    effects = [0.0, *(effect_for_power(replace(longest, seeds=seeds)) for seeds in args.sequential)]
    sequential = [(longest, args.experiments, effect, 2, args.seed) for effect in effects]
    if not args.sequential:
        sequential = []
    largest_first = sorted(calls, key=lambda call: -call[0].seeds * call[0].repeats * call[0].orders)
    if args.jobs > 1 and len(calls) + len(sequential) > 1:
        with ProcessPoolExecutor(min(args.jobs, len(calls) + len(sequential)),
                                 mp_context=get_context("spawn")) as pool:
            done = dict(zip(largest_first, pool.map(_calibrate, largest_first), strict=True))
            sequential_rows = list(pool.map(_calibrate_sequential, sequential))
    else:
        done = {call: _calibrate(call) for call in largest_first}
        sequential_rows = [_calibrate_sequential(call) for call in sequential]
    rows = [done[call] for call in calls]
    records = [record(row) for row in rows]
    print(f"\n## Calibration of the report's verdicts: {args.experiments} A/A and A/B experiments per row, "
          f"{args.tasks} tasks per run\n")
    print(table(cells(records)))
    print(NOTE.format(alpha=ALPHA, power=PLANNED_POWER, fewest=units_to_reach(ALPHA)))
    sequential_records = [sequential_record(row) for row in sequential_rows]
    if sequential_records:
        print("\n## Sequential (seeds=until_decided): the anytime-valid test, looked at after every round\n")
        print(table(sequential_cells(sequential_records)))
        print(SEQUENTIAL_NOTE.format(seeds=longest.seeds, batch=2, alpha=ALPHA))
    records += sequential_records
    failing = [r["design"] + f" at {r['seeds']} seeds, sd {r['sd']:g}" for r in records if not r["holds"]]
    print("\nevery row holds" if not failing else f"\nrows that do not hold: {'; '.join(failing)}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        pl.DataFrame(records).write_parquet(args.out / "calibration.parquet")
        print(f"table: {args.out / 'calibration.parquet'}")
    if rows:
        slowest = max(rows, key=lambda row: row.seconds)
        design = slowest.design
        print(f"slowest row: {design.label} at {design.seeds} seeds, sd {design.sd:g}: "
              f"{slowest.seconds:.0f} s "
              f"({slowest.seconds / slowest.experiments * 1000:.0f} ms per experiment of an A/A and an A/B "
              "comparison)")
    processes = max(1, min(args.jobs, len(calls) + len(sequential)))
    print(f"bench took {time.perf_counter() - started:.0f} s ({processes} "
          f"process{'es' if processes > 1 else ''})")


def _calibrate(call: tuple[Design, int, int, float | None]) -> Row:
    design, experiments, seed, effect = call
    return calibrate(design, experiments, seed, effect)


class KnownTruthAgent:
    """The synthetic agent as an outside agent (`variant=external
    variant.entry=harness.bench.calibration:KnownTruthAgent`), for the calibration through a real sweep:
    the run of arm `arm` with seed `seed` draws its quality q ~ N(0, sd) once; each task's ease ~ N(0, 1) is
    drawn from the task's question (the same for every run); the task is solved, its code word read from the
    question and replied, with probability sigmoid(ease + q + effect), else a wrong word. One model call per
    task, so the run is billed like any other. Tasks: `write_tasks` (docs/bench.md shows the commands)."""

    def __init__(self, llm: Any, workdir: str, seed: int, arm: str = "a", sd: float = 1.0,
                 effect: float = 0.0) -> None:
        from openai import OpenAI  # lazy: seconds to import, and only an outside agent's client

        self.client, self.model = OpenAI(base_url=llm.base_url, api_key=llm.api_key), llm.model
        self.quality = sd * _normal(f"{arm}/{seed}")
        self.arm, self.seed, self.effect = arm, seed, effect

    def solve(self, task: dict[str, Any]) -> str:
        question = task["question"]
        self.client.chat.completions.create(model=self.model,
                                            messages=[{"role": "user", "content": question}])
        chance = float(sigmoid(np.array(_normal(question) + self.quality + self.effect)))
        solved = _uniform(f"{self.arm}/{self.seed}/{question}") < chance
        return question.rsplit(" ", 1)[-1] if solved else "wrong"


def _uniform(key: str) -> float:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64


def _normal(key: str) -> float:
    from scipy.stats import norm  # lazy, as in harness/report/stats.py: seconds to import

    return float(norm.ppf(min(max(_uniform(key), 1e-12), 1 - 1e-12)))


def write_tasks(path: Path, count: int = 200) -> None:
    """`count` tasks whose answer is the code word at the end of the question (env=jsonl, exact scorer)."""
    lines = [json.dumps({"id": f"word-{i}", "question": f"Reply with the code word: w{i:04d}x",
                         "answer": f"w{i:04d}x"}) for i in range(count)]
    path.write_text("\n".join(lines) + "\n")

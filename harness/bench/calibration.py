"""`python -m harness.bench calibration`: the report's verdicts against an agent whose truth is known.

A synthetic agent: run r of an arm solves task t with probability sigmoid(base + ease_t + q_r + effect),
where ease_t ~ N(0, 1) is drawn once per task (each seed draws its own tasks; both arms' runs of a seed
see the same tasks in the same order), q_r ~ N(0, sd) is drawn for every run of every arm (what a run
learnt early, its luck), and effect is 0 for the baseline and for an A/A candidate. Each experiment
builds the episodes frame the report reads (the columns of episodes.parquet it uses) and passes it to
the report's own `paired_comparisons` (harness/report/compare.py, the code that writes
comparisons.parquet), with arms "baseline" and "candidate", one run per seed 0..n-1:

- A/A (no effect): how often `resolved` is true, a false positive, with its 95% Clopper-Pearson interval;
  beside it how often the episode-level McNemar test (`p_episodes`) is under 0.05, the verdict an analysis
  over episodes would give;
- A/B (a known effect): how often `resolved` is true with a positive difference, the power, beside the
  power the planning line promises (`power_at`) at the true difference: from the experiments' own
  variance splits, averaged, as a researcher's pilots would give it, and from the true split;
- the baseline arm's success interval (`group_interval`, over its runs): how often it holds the known
  population rate, E[sigmoid(base + ease + q)].

The known rates and the true variance split are Gauss-Hermite quadratures, not Monte Carlo. Numpy, polars
and scipy only; rows run in parallel processes (`--jobs`), each seeded by (--seed, runs, sd), so a row
gives the same figures whichever other rows run beside it.
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
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from harness.bench.common import table
from harness.report.compare import paired_comparisons
from harness.report.stats import (
    VarianceSplit,
    group_interval,
    power_at,
    runs_to_reach,
    variance_split,
)

ALPHA = 0.05
PLANNED_POWER = 0.8
LARGEST_EFFECT = 8.0
"""The largest logit effect the automatic effect is looked for under."""


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow


# ----- the known truth -----

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


def true_split(sd: float, effect: float, tasks: int, base: float = 0.0, points: int = 48) -> VarianceSplit:
    """The variance split of the per-episode differences (candidate - baseline) of a pair of runs that share
    their tasks, as the report's `variance_split` estimates it: `between`, the variance over the two runs' q
    of their expected difference; `within`, the expected variance of one episode's difference around its
    run's mean. between + within / tasks is exactly the variance of a pair of runs' mean difference."""
    nodes, weights = _normal_nodes(points)
    ease = nodes[:, None]
    reference = sigmoid(base + ease + sd * nodes[None, :])  # [ease, q of the baseline's run]
    candidate = sigmoid(base + effect + ease + sd * nodes[None, :])  # [ease, q of the candidate's run]
    mean_ref, mean_cand = weights @ reference, weights @ candidate  # over the tasks, per q
    between = float(weights @ mean_ref**2 - (weights @ mean_ref) ** 2
                    + weights @ mean_cand**2 - (weights @ mean_cand) ** 2)
    # E over ease of (candidate - reference)^2, per (q_ref, q_cand), less its square mean: Var over tasks
    squares = (weights @ reference**2)[:, None] + (weights @ candidate**2)[None, :] \
        - 2 * (reference * weights[:, None]).T @ candidate
    over_tasks = squares - (mean_cand[None, :] - mean_ref[:, None]) ** 2
    bernoulli = weights @ (reference * (1 - reference) + candidate * (1 - candidate)) @ weights
    within = float(weights @ over_tasks @ weights + bernoulli)
    return VarianceSplit(between, within, float(tasks), 0)


def true_difference(sd: float, effect: float, base: float = 0.0) -> float:
    return population_rate(sd, effect, base) - population_rate(sd, 0.0, base)


def planned_power(runs: int, sd: float, effect: float, tasks: int, base: float = 0.0) -> float:
    """The planning line's power at the true difference and the true variance split."""
    split = true_split(sd, effect, tasks, base)
    return power_at(runs, true_difference(sd, effect, base), split, tasks, ALPHA)


def effect_for_power(runs: int, sd: float, tasks: int, base: float = 0.0,
                     power: float = PLANNED_POWER) -> float:
    """The logit effect the planning line (true split) gives `power` at `runs` paired runs, or at the fewest
    runs whose test can reach 5% where `runs` cannot (there the power observed can only be 0)."""
    runs = max(runs, runs_to_reach(ALPHA))
    low, high = 0.0, LARGEST_EFFECT
    if planned_power(runs, sd, high, tasks, base) < power:
        return high
    for _ in range(40):
        middle = (low + high) / 2
        if planned_power(runs, sd, middle, tasks, base) >= power:
            high = middle
        else:
            low = middle
    return high


# ----- the synthetic agent's episodes -----

@dataclass(frozen=True)
class Truth:
    """What the synthetic agent is: its run-level sd, the candidate's logit effect, its base logit."""

    sd: float
    effect: float = 0.0
    base: float = 0.0


def draw_arms(rng: np.random.Generator, truth: Truth, runs: int, tasks: int) -> dict[str, np.ndarray]:
    """Successes [run, task] of three arms over the same tasks (seed s = run s): the baseline, an A/A
    candidate (no effect) and an A/B candidate (the truth's effect), each run with its own q."""
    ease = rng.normal(0.0, 1.0, size=(runs, tasks))  # one task list per seed, shared by the arms
    arms = {}
    for name, effect in (("baseline", 0.0), ("same", 0.0), ("better", truth.effect)):
        quality = rng.normal(0.0, truth.sd, size=(runs, 1)) if truth.sd > 0 else np.zeros((runs, 1))
        chance = sigmoid(truth.base + effect + ease + quality)
        arms[name] = rng.random((runs, tasks)) < chance
    return arms


def layout(runs: int, tasks: int) -> pl.DataFrame:
    """The columns of an episodes frame of two arms, baseline and candidate, of `runs` runs (seed s, order
    s) of `tasks` tasks each, all but `success`: the report's grouping, pairing and spend columns."""
    per_arm = runs * tasks
    seed = np.repeat(np.arange(runs), tasks)
    position = np.tile(np.arange(tasks), runs)
    frame = pl.DataFrame({
        "variant": ["baseline"] * per_arm + ["candidate"] * per_arm,
        "seed": np.concatenate([seed, seed]), "stream_position": np.concatenate([position, position])})
    return frame.with_columns(
        env=pl.lit("synthetic"), scenario=pl.lit("sequential"), model=pl.lit("known-truth"),
        order_seed=pl.col("seed"), probe=pl.lit(False), attempted=pl.lit(True),
        task_id=pl.format("s{}-t{}", "seed", "stream_position"),
        run_id=pl.format("{}-s{}", "variant", "seed"), total_tokens=pl.lit(100), cost_usd=pl.lit(0.0))


def episodes(frame: pl.DataFrame, baseline: np.ndarray, candidate: np.ndarray) -> pl.DataFrame:
    """`layout`'s frame with its successes: the baseline's runs, then the candidate's."""
    return frame.with_columns(success=pl.Series(np.concatenate([baseline.ravel(), candidate.ravel()])))


# ----- one row -----

@dataclass(frozen=True)
class Row:
    """One row of the table: its setting, its counts over the experiments, and the planning line's promise."""

    runs: int
    sd: float
    tasks: int
    experiments: int
    effect: float
    true_difference: float
    aa_resolved: int
    aa_episodes: int
    """A/A experiments whose episode-level McNemar p (`p_episodes`) was under 0.05."""
    ab_resolved: int
    """A/B experiments resolved with a positive difference."""
    promised_pilot: float
    promised_true: float
    covered: int
    coverage_runs: int
    """Experiments whose baseline interval is over its runs (all, from 2 runs)."""
    seconds: float
    """The experiments' time (the truth's quadratures left out)."""


def calibrate(runs: int, sd: float, experiments: int, tasks: int = 50, seed: int = 0,
              effect: float | None = None, base: float = 0.0) -> Row:
    """One row: `experiments` A/A and A/B experiments of `runs` paired runs of `tasks` tasks at run-level
    sd `sd`, through the report's `paired_comparisons`; the A/B effect is `effect` (logit) or, when None,
    the one the planning line gives 80% power (`effect_for_power`)."""
    effect = effect_for_power(runs, sd, tasks, base) if effect is None else effect
    truth = Truth(sd, effect, base)
    rng = np.random.default_rng([seed, runs, round(sd * 1000), tasks])
    frame = layout(runs, tasks)
    rate = population_rate(sd, 0.0, base)
    run_ids = np.repeat(np.arange(runs), tasks)
    aa_resolved = aa_episodes = ab_resolved = covered = coverage_runs = 0
    betweens, withins = [], []
    started = time.perf_counter()
    for _ in range(experiments):
        arms = draw_arms(rng, truth, runs, tasks)
        same = paired_comparisons(episodes(frame, arms["baseline"], arms["same"]), ["variant"]).table.row(
            0, named=True)
        aa_resolved += bool(same["resolved"])
        aa_episodes += same["p_episodes"] < ALPHA
        better = paired_comparisons(episodes(frame, arms["baseline"], arms["better"]), ["variant"]).table.row(
            0, named=True)
        ab_resolved += bool(better["resolved"]) and better["difference"] > 0
        split = variance_split((arms["better"].astype(float) - arms["baseline"]).ravel(), run_ids)
        if split is not None:
            betweens.append(split.between)
            withins.append(split.within)
        counted, low, high, _ = group_interval(arms["baseline"].ravel().astype(float), run_ids)
        if counted >= 2:  # an interval over runs, not over one run's tasks
            coverage_runs += 1
            covered += low <= rate <= high
    seconds = time.perf_counter() - started
    difference = true_difference(sd, effect, base)
    pilot = None  # the pilots' splits, averaged
    if withins:
        pilot = VarianceSplit(float(np.mean(betweens)), float(np.mean(withins)), tasks, runs)
    return Row(runs=runs, sd=sd, tasks=tasks, experiments=experiments, effect=effect,
               true_difference=difference, aa_resolved=aa_resolved, aa_episodes=aa_episodes,
               ab_resolved=ab_resolved,
               promised_pilot=power_at(runs, difference, pilot, tasks, ALPHA) if pilot else float("nan"),
               promised_true=planned_power(runs, sd, effect, tasks, base), covered=covered,
               coverage_runs=coverage_runs, seconds=seconds)


def proportion(successes: int, trials: int) -> tuple[float, float, float]:
    """The rate and its 95% Clopper-Pearson interval."""
    from scipy.stats import binomtest  # lazy, as in harness/report/stats.py: seconds to import

    if trials == 0:
        return float("nan"), float("nan"), float("nan")
    interval = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="exact")
    return successes / trials, float(interval.low), float(interval.high)


def _rate(successes: int, trials: int) -> str:
    rate, low, high = proportion(successes, trials)
    return f"{rate:.3f} [{low:.3f}, {high:.3f}]" if trials else ""


def cells(rows: list[Row]) -> list[dict[str, str]]:
    """One table row per row: the A/A false-positive rate of `resolved` and of the episode-level McNemar
    test, the A/B power against the planning line's promise, and the coverage of the baseline's interval."""
    return [{"runs": str(row.runs), "sd": f"{row.sd:g}", "experiments": str(row.experiments),
             "A/A resolved [95% CI]": _rate(row.aa_resolved, row.experiments),
             "A/A p_episodes < 0.05": f"{row.aa_episodes / row.experiments:.3f}",
             "A/B effect, logit (true difference)": f"{row.effect:+.2f} ({row.true_difference:+.3f})",
             "power observed [95% CI]": _rate(row.ab_resolved, row.experiments),
             "promised: pilot split": f"{row.promised_pilot:.3f}",
             "promised: true split": f"{row.promised_true:.3f}",
             "coverage [95% CI]": _rate(row.covered, row.coverage_runs)} for row in rows]


# ----- the command -----

NOTE = """
(A/A: both arms the same agent. resolved: the report's verdict, the exact sign-flip test over runs
 (p_holm < {alpha}) with the t interval over runs excluding 0; p_episodes < 0.05: the exact McNemar test
 over episode pairs. A/B: the candidate's logit effect: unless --effect, per row the one the planning line
 gives {power:.0%} power at the true split (where a row has fewer than {fewest} runs, which no sign-flip
 test can resolve, the one planned at {fewest}); power observed: resolved with a positive difference.
 promised: power_at(runs, true difference, split, tasks) with the split averaged over the experiments'
 variance_split of the per-episode differences (pilot) or the known model's (true). coverage: the
 baseline arm's group_interval (over its runs) holding the population rate E[sigmoid(base + ease + q)].
 Intervals: 95% Clopper-Pearson over the experiments)"""

def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(prog="python -m harness.bench calibration", description=" ".join(
        __doc__.split("\n\n")[0].replace("`", "").split()))
    options.add_argument("--experiments", type=int, default=400,
                         help="A/A and A/B experiments per row (default: 400)")
    options.add_argument("--tasks", type=int, default=50, help="tasks per run (default: 50)")
    options.add_argument("--runs", type=int, nargs="+", default=[3, 5, 10, 30],
                         help="paired runs per experiment, one row each (default: 3 5 10 30)")
    options.add_argument("--sd", type=float, nargs="+", default=[0.0, 0.5, 1.0],
                         help="run-level sd on the logit scale, one row each (default: 0 0.5 1.0)")
    options.add_argument("--effect", type=float, default=None,
                         help="the A/B logit effect of every row (default: per row, the one the planning "
                         "line gives 80%% power at its runs, or at 6 runs below 6)")
    options.add_argument("--seed", type=int, default=0,
                         help="seeds every row with its runs and sd (default: 0)")
    options.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                         help="rows computed at once, one process each (default: the CPU count)")
    return options


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    started = time.perf_counter()
    settings = [(runs, sd) for runs in args.runs for sd in args.sd]
    calls = [(runs, sd, args.experiments, args.tasks, args.seed, args.effect) for runs, sd in settings]
    if args.jobs > 1 and len(calls) > 1:
        largest_first = sorted(calls, key=lambda call: -call[0])
        with ProcessPoolExecutor(min(args.jobs, len(calls)), mp_context=get_context("spawn")) as pool:
            done = dict(zip(largest_first, pool.map(_calibrate, largest_first), strict=True))
        rows = [done[call] for call in calls]
    else:
        rows = [_calibrate(call) for call in calls]
    print(f"\n## Calibration of the report's verdicts: {args.experiments} A/A and A/B experiments per row, "
          f"{args.tasks} tasks per run\n")
    print(table(cells(rows)))
    print(NOTE.format(alpha=ALPHA, power=PLANNED_POWER, fewest=runs_to_reach(ALPHA)))
    slowest = max(rows, key=lambda row: row.seconds)
    print(f"\nslowest row: {slowest.runs} runs, sd {slowest.sd:g}: {slowest.seconds:.0f} s "
          f"({slowest.seconds / slowest.experiments * 1000:.0f} ms per experiment of an A/A and an A/B "
          f"comparison)")
    processes = min(args.jobs, len(calls))
    print(f"bench took {time.perf_counter() - started:.0f} s ({processes} "
          f"process{'es' if processes > 1 else ''})")


def _calibrate(call: tuple[int, float, int, int, int, float | None]) -> Row:
    runs, sd, experiments, tasks, seed, effect = call
    return calibrate(runs, sd, experiments, tasks, seed, effect)


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

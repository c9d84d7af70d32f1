"""Paired comparisons against a reference variant, and the self-evolution metrics.

Both work on the report's episodes frame and its grouping keys (variant, the env / scenario / model
when they vary, the settings label), and both take the agent run as the unit (harness/report/stats.py
says why). Two groups' runs pair on (seed, order_seed, repeat): runs that share them see the same tasks
in the same order, which is checked task by task before anything is paired, and their episodes pair on
the stream position. A comparison's verdict (`resolved`) comes from the paired runs: the difference
with a t interval over runs and an exact sign-flip test of the runs' differences, Holm-adjusted across
the rows. The episode-level view (McNemar over episode pairs, gained / lost, an interval over tasks) is
kept beside it and said to be about these runs only. Where runs were repeated (stream.repeats) each
difference is shown beside the noise floor: the test-retest flip rate of the two groups (`noise_floor`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from harness.report.stats import (
    LEVEL,
    VarianceSplit,
    bootstrap_ci,
    cluster_ci,
    holm,
    mcnemar_exact,
    runs_needed,
    runs_to_reach,
    sign_flip_p,
    smallest_p,
    stratified_bootstrap_ci,
    variance_split,
)
from harness.tables.costs import total_cost

PAIR_KEYS = ["seed", "order_seed", "stream_position"]
NOT_CONTEXT = ("variant", "settings")
"""Grouping keys that tell compared groups apart; the others (env, scenario, model) are the context
a comparison stays within."""


COMPARISON_COLUMNS = {
    "group": "The compared group's label (variant, then env / scenario / model / settings where they vary).",
    "reference": "The reference group's label (`--reference`).",
    "runs": "Paired runs: runs of the two groups with the same seed, order seed and repeat, on the same "
            "tasks.",
    "seeds": "Distinct seeds among the paired runs.",
    "tasks_per_run": "Paired episodes per pair of runs, on average.",
    "reference_rate": "The reference's success rate over the paired episodes.",
    "rate": "The group's success rate over the paired episodes.",
    "difference": "rate - reference_rate.",
    "ci_low": "Lower end of the 95% interval of the difference over the paired runs (t on runs - 1 degrees "
              "of freedom, cluster-robust); null with one pair of runs.",
    "ci_high": "Upper end of that interval; null with one pair of runs.",
    "p_value": "Two-sided exact sign-flip permutation p-value of the runs' differences; null with one pair.",
    "smallest_p": "The smallest p-value a sign-flip test over this many runs can give: 2 / 2^runs.",
    "icc": "Intraclass correlation of the per-task differences: the share of their variance between runs.",
    "design_effect": "1 + (tasks_per_run - 1) x icc: how many times a run's difference varies more than as "
                     "many independent tasks would.",
    "pairs": "Episode pairs (within these runs).",
    "gained": "Episode pairs only the group solved (within these runs).",
    "lost": "Episode pairs only the reference solved (within these runs).",
    "p_episodes": "Exact McNemar p-value over the episode pairs: about these runs' tasks, never a verdict.",
    "within_low": "Lower end of a 95% bootstrap interval of the difference, tasks resampled within each run: "
                  "about these runs only.",
    "within_high": "Upper end of that within-runs interval.",
    "noise_floor": "The larger test-retest flip rate of the two groups where runs were repeated "
                   "(stream.repeats), else null.",
    "p_holm": "p_value Holm-adjusted across the report's rows that have one.",
    "resolved": "p_holm < 0.05 and the interval excludes 0: the only verdict about the variants.",
}
"""comparisons.parquet's columns in order, with their meanings (docs/columns.md lists them; a test
holds the two and the table to one another)."""


_NOT_FLOAT = {"group": pl.String, "reference": pl.String, "runs": pl.Int64, "seeds": pl.Int64,
              "pairs": pl.Int64, "gained": pl.Int64, "lost": pl.Int64, "resolved": pl.Boolean}
COMPARISON_SCHEMA = {column: _NOT_FLOAT.get(column, pl.Float64) for column in COMPARISON_COLUMNS}
"""comparisons.parquet's column types, the same with rows or without."""


def references_in(frame: pl.DataFrame, reference: str) -> list[str]:
    """The groups of one context that `reference` names: the group of that label, else every group whose
    variant it is (more than one: the caller asks for a full label)."""
    groups = frame["group"].unique().to_list()
    return [g for g in groups if g == reference] or sorted(
        set(frame.filter(pl.col("variant") == reference)["group"].to_list()))


@dataclass
class Comparisons:
    table: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    """Comparisons that could not be made, and why."""
    plans: list[str] = field(default_factory=list)
    """Per row: what its runs can show, and how many runs of how many tasks would resolve its difference."""


def labelled(episodes: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Stream episodes that were attempted, with a `group` label made of the grouping keys."""
    stream = episodes.filter(~pl.col("probe") & pl.col("attempted"))
    parts = [pl.col(k).cast(pl.String) for k in keys]
    label = pl.concat_str(parts, separator=" / ", ignore_nulls=True).str.replace_all(r"( / )+$", "")
    return stream.with_columns(group=label)


def pair_keys(episodes: pl.DataFrame) -> list[str]:
    """Episodes pair on seed, order and position, and where runs were repeated (stream.repeats) on
    the repeat too: repeat r of one group with repeat r of the other."""
    return [*PAIR_KEYS, "repeat"] if "repeat" in episodes.columns else PAIR_KEYS


def flips(episodes: pl.DataFrame) -> pl.DataFrame:
    """One row per task (seed, order, position) run in several repeats of the same agent run:
    `flipped` when its verdict differs between repeats."""
    if "repeat" not in episodes.columns:
        return pl.DataFrame()
    per_task = episodes.group_by(PAIR_KEYS).agg(repeats=pl.col("repeat").n_unique(),
                                                flipped=pl.col("success").n_unique() > 1)
    return per_task.filter(pl.col("repeats") > 1)


def noise_floor(episodes: pl.DataFrame, keys: list[str], seed: int = 0) -> pl.DataFrame:
    """Per group with repeated runs: the test-retest flip rate (the share of tasks whose verdict
    differs between identical runs) with a 95% bootstrap CI over tasks. A difference between two
    groups smaller than their flip rates is within the noise of running either twice."""
    rows = []
    for values, frame in labelled(episodes, keys).group_by(keys, maintain_order=True):
        tasks = flips(frame)
        if tasks.is_empty():
            continue
        flipped = tasks["flipped"].cast(pl.Float64).to_numpy()
        low, high = bootstrap_ci(flipped, seed=seed)
        rows.append({**dict(zip(keys, values, strict=True)), "repeats": int(tasks["repeats"].max()),
                     "tasks": tasks.height, "flip_rate": float(flipped.mean()), "ci_low": low,
                     "ci_high": high})
    return pl.DataFrame(rows) if rows else pl.DataFrame()


def _flip_rate(frame: pl.DataFrame) -> float | None:
    tasks = flips(frame)
    return None if tasks.is_empty() else float(tasks["flipped"].mean())


def pair(reference: pl.DataFrame, candidate: pl.DataFrame) -> tuple[pl.DataFrame | None, str | None]:
    """The two groups' episodes side by side (`ref`, `cand` successes, `seed`, `order_seed`, and `run`, the
    pair of runs they belong to: seed / order / repeat), or why they cannot be paired: different tasks at
    the same seed, order and position, or nothing in common."""
    keys = pair_keys(reference) if "repeat" in candidate.columns else PAIR_KEYS
    columns = [*keys, "task_id", "success"]
    joined = reference.select(columns).unique(keys, keep="first").join(
        candidate.select(columns).unique(keys, keep="first"), on=keys, suffix="_cand")
    if joined.is_empty():
        return None, "no seed, order and position in common"
    differ = joined.filter(pl.col("task_id") != pl.col("task_id_cand"))
    if not differ.is_empty():
        first = differ.sort(keys).row(0, named=True)
        return None, (f"they saw different tasks ({differ.height} positions, first at seed {first['seed']} "
                      f"position {first['stream_position']}: {first['task_id']} vs {first['task_id_cand']})")
    run = pl.concat_str([pl.col(k).cast(pl.String) for k in keys if k != "stream_position"], separator="/")
    return joined.select("seed", "order_seed", run=run, ref="success", cand="success_cand"), None


def paired_comparisons(episodes: pl.DataFrame, keys: list[str], reference: str = "baseline",
                       seed: int = 0) -> Comparisons:
    """Every group against the reference group of its context, run pair by run pair: the success
    difference with a 95% t interval over the paired runs, the exact sign-flip p-value of the runs'
    differences, Holm-adjusted across the rows that have one, `resolved` when the adjusted p is under 0.05
    and the interval excludes 0; and the episode-level view within these runs."""
    stream = labelled(episodes, keys)
    context = [k for k in keys if k not in NOT_CONTEXT]
    rows: list[dict] = []
    notes: list[str] = []
    splits: dict[str, VarianceSplit | None] = {}
    for values, frame in stream.group_by(context or [pl.lit(0)], maintain_order=True):
        where = ", ".join(f"{k}={v}" for k, v in zip(context, values, strict=True)) if context else ""
        groups = sorted(frame["group"].unique().to_list())
        references = references_in(frame, reference)
        if not references:
            scope = f" for {where}" if where else ""
            notes.append(f"no reference group {reference!r}{scope}: nothing compared")
            continue
        if len(references) > 1:
            notes.append(f"several groups are variant {reference!r}{' for ' + where if where else ''} "
                         f"({'; '.join(references)}): name one with --reference")
            continue
        ref_frame = frame.filter(pl.col("group") == references[0])
        for group in groups:
            if group == references[0]:
                continue
            candidate = frame.filter(pl.col("group") == group)
            pairs, why = pair(ref_frame, candidate)
            if pairs is None:
                notes.append(f"{group} vs {references[0]}: not paired, {why}")
                continue
            floors = [f for f in (_flip_rate(ref_frame), _flip_rate(candidate)) if f is not None]
            row, splits[group] = _comparison(group, references[0], pairs, seed)
            rows.append({**row, "noise_floor": max(floors) if floors else None})
    if not rows:
        return Comparisons(table=pl.DataFrame(schema=COMPARISON_SCHEMA), notes=notes)
    table = pl.DataFrame(rows, infer_schema_length=None).sort("group")
    tested = [p for p in table["p_value"].to_list() if p is not None]
    adjusted = iter(holm(tested))
    table = table.with_columns(p_holm=pl.Series(
        [None if p is None else next(adjusted) for p in table["p_value"].to_list()], dtype=pl.Float64))
    table = table.with_columns(resolved=(pl.col("p_holm") < 1 - LEVEL).fill_null(False)
                               & ((pl.col("ci_low") > 0) | (pl.col("ci_high") < 0)).fill_null(False))
    plans = [_plan(row, splits[row["group"]], len(tested)) for row in table.iter_rows(named=True)]
    table = table.select(list(COMPARISON_COLUMNS)).cast(COMPARISON_SCHEMA)
    return Comparisons(table=table, notes=notes, plans=plans)


def _comparison(group: str, reference: str, pairs: pl.DataFrame,
                seed: int) -> tuple[dict, VarianceSplit | None]:
    """One row of the comparison and the variance split of its per-episode differences."""
    ref = pairs["ref"].to_numpy().astype(bool)
    cand = pairs["cand"].to_numpy().astype(bool)
    runs = pairs["run"].to_numpy()
    diff = cand.astype(float) - ref.astype(float)
    estimate = cluster_ci(diff, runs)
    per_run = pairs.group_by("run").agg((pl.col("cand").cast(pl.Float64) - pl.col("ref").cast(pl.Float64))
                                        .mean().alias("difference")).sort("run")  # seeded draws: one order
    split = variance_split(diff, runs)
    within_low, within_high = stratified_bootstrap_ci(diff, runs, seed=seed)
    gained, lost, p_episodes = mcnemar_exact(ref, cand)
    row = {"group": group, "reference": reference, "runs": estimate.runs, "seeds": pairs["seed"].n_unique(),
           "tasks_per_run": len(diff) / estimate.runs, "reference_rate": float(ref.mean()),
           "rate": float(cand.mean()), "difference": estimate.value,
           # a difference of rates lies in [-1, 1]; the t interval of few runs can reach past it
           "ci_low": None if estimate.low is None else max(-1.0, estimate.low),
           "ci_high": None if estimate.high is None else min(1.0, estimate.high),
           "p_value": sign_flip_p(per_run["difference"].to_numpy(), seed=seed) if estimate.runs > 1 else None,
           "smallest_p": smallest_p(estimate.runs),
           "icc": split.icc if split else None, "design_effect": split.design_effect() if split else None,
           "pairs": len(diff), "gained": gained, "lost": lost, "p_episodes": p_episodes,
           "within_low": within_low, "within_high": within_high}
    return row, split


def _plan(row: dict, split: VarianceSplit | None, tested: int) -> str:
    """What the row's runs can show, and how many paired runs of how many tasks would resolve its
    difference (80% power at 5%), from its variance between and within runs."""
    name, runs, tasks = row["group"], row["runs"], round(row["tasks_per_run"])
    enough = runs_to_reach()
    if runs < 2:
        return (f"{name}: one pair of runs says nothing about the variant (no interval, no test: another "
                f"run may differ by more than its tasks show); `within_low` / `within_high` and `p_episodes` "
                f"are about these {tasks} tasks of this run only. At least {enough} paired runs (seeds) are "
                "needed for a test that can reach p < 0.05, and 2 to measure how much runs differ")
    said = []
    if row["smallest_p"] >= 1 - LEVEL:
        said.append(f"{runs} paired runs cannot reach p < 0.05 whatever they show (a sign-flip test over "
                    f"{runs} runs cannot go below {row['smallest_p']:.3g}; {enough} runs can)")
    elif tested > 1 and row["smallest_p"] * tested >= 1 - LEVEL:
        said.append(f"{runs} paired runs cannot reach p_holm < 0.05 across these {tested} rows whatever they "
                    f"show (their smallest p, {row['smallest_p']:.3g}, times {tested})")
    if split is None or abs(row["difference"]) < 1e-12:
        said.append("no difference observed; nothing to plan" if split is not None
                    else "one task per run: the variance within runs cannot be measured; nothing to plan")
    else:
        said.append(_runs_plan(row, split, tasks))
    floor = row.get("noise_floor")
    if floor is not None and abs(row["difference"]) < floor:
        said.append(f"the difference is below the noise floor ({floor:.3f}): within the noise of running "
                    "either group twice")
    return f"{name}: " + "; ".join(said)


def _runs_plan(row: dict, split: VarianceSplit, tasks: int) -> str:
    difference = row["difference"]
    shape = (f"between-run sd {split.between**0.5:.3f}, within-run sd {split.within**0.5:.3f} (ICC "
             f"{split.icc:.3f}, design effect {split.design_effect(tasks):.2f} at {tasks} tasks per run)")
    at_tasks = runs_needed(difference, split, tasks)
    doubled = runs_needed(difference, split, 2 * tasks)
    if at_tasks is None:
        return f"a difference of {difference:+.3f} with {shape} needs more than 100,000 paired runs"
    plan = (f"a difference of {difference:+.3f} with {shape} needs about {at_tasks} paired runs of {tasks} "
            f"tasks for 80% power at 5% ({doubled} of {2 * tasks} tasks")
    if split.between > 0:
        floor = runs_needed(difference, VarianceSplit(split.between, 0.0, tasks, split.runs), tasks)
        plan += f"; at least {floor} however many tasks per run, as runs differ"
    return plan + f"; now {row['runs']})"


def evolution_metrics(episodes: pl.DataFrame, keys: list[str], window: int = 10,
                      fraction: float = 0.9) -> pl.DataFrame:
    """One row per group: evolution gain (against the same group in the isolated scenario),
    adaptation speed, stability over seeds and orders, forgetting on replay probes, and success
    per 1k tokens and per dollar, each with a 95% CI over the group's runs where it has two or more
    (one run says nothing about how another would differ: its metrics have no interval)."""
    stream = labelled(episodes, keys)
    probes = episodes.filter(pl.col("probe") & pl.col("attempted"))
    without_scenario = [k for k in keys if k != "scenario"]
    rows = []
    for values, frame in stream.group_by(keys, maintain_order=True):
        row: dict = dict(zip(keys, values, strict=True))
        row["runs"] = frame["run_id"].n_unique()
        row["success_rate"] = float(frame["success"].mean())
        row |= _evolution_gain(stream, frame, without_scenario)
        row |= _adaptation(frame, window, fraction)
        row |= _stability(frame)
        own_probes = probes.filter(pl.col("run_id").is_in(frame["run_id"].unique().to_list()))
        row |= _forgetting(frame, own_probes)
        row |= _efficiency(frame)
        rows.append(row)
    return pl.DataFrame(rows).sort(keys) if rows else pl.DataFrame()


def _interval(prefix: str, value: float | None, low: float | None = None, high: float | None = None) -> dict:
    return {prefix: value, f"{prefix}_low": low, f"{prefix}_high": high}


def _over_runs(prefix: str, values: np.ndarray, runs: np.ndarray, weights: np.ndarray | None = None) -> dict:
    estimate = cluster_ci(values, runs, weights)
    return _interval(prefix, estimate.value, estimate.low, estimate.high)


def _evolution_gain(stream: pl.DataFrame, frame: pl.DataFrame, keys: list[str]) -> dict:
    scenario = frame["scenario"][0]
    if scenario == "isolated":
        return _interval("evolution_gain", None)
    same = pl.all_horizontal([pl.col(k) == frame[k][0] for k in keys])
    isolated = stream.filter(same & (pl.col("scenario") == "isolated"))
    if isolated.is_empty():
        return _interval("evolution_gain", None)
    pairs, _why = pair(isolated, frame)
    if pairs is None:
        return _interval("evolution_gain", None)
    diff = pairs["cand"].cast(pl.Float64).to_numpy() - pairs["ref"].cast(pl.Float64).to_numpy()
    return _over_runs("evolution_gain", diff, pairs["run"].to_numpy())


def adaptation_tasks(success: np.ndarray, window: int, fraction: float) -> int | None:
    """Tasks until the rolling success (mean of the last `window`) first reaches `fraction` of its
    final level; None when the final level is 0 or the stream is shorter than the window."""
    if len(success) < window:
        return None
    rolling = np.convolve(success.astype(float), np.ones(window) / window, mode="valid")
    final = rolling[-1]
    if final <= 0:
        return None
    return int(np.argmax(rolling >= fraction * final)) + window


def _adaptation(frame: pl.DataFrame, window: int, fraction: float) -> dict:
    speeds = []
    for _, run in frame.group_by("run_id"):
        tasks = adaptation_tasks(run.sort("stream_position")["success"].to_numpy(), window, fraction)
        if tasks is not None:
            speeds.append(tasks)
    if not speeds:
        return _interval("adaptation_tasks", None)
    return _over_runs("adaptation_tasks", np.array(speeds, dtype=float), np.arange(len(speeds)))


def _stability(frame: pl.DataFrame) -> dict:
    per_run = frame.group_by("seed", "order_seed").agg(rate=pl.col("success").mean())
    by_seed = per_run.group_by("seed").agg(pl.col("rate").mean())["rate"]
    orders = per_run.group_by("seed").agg(spread=pl.col("rate").std(), n=pl.len()).filter(pl.col("n") > 1)
    return {"std_over_seeds": float(by_seed.std()) if by_seed.len() > 1 else None,
            "range_over_seeds": float(by_seed.max() - by_seed.min()) if by_seed.len() > 1 else None,
            "std_over_orders": float(orders["spread"].mean()) if orders.height else None}


def _forgetting(frame: pl.DataFrame, probes: pl.DataFrame) -> dict:
    if probes.is_empty():
        return _interval("forgetting", None)
    last = (probes.sort("stream_position").group_by("run_id", "task_id")
            .agg(pl.col("success").last().alias("replayed"), pl.col("seed").first()))
    learnt = frame.select("run_id", "task_id", learnt="success").unique(["run_id", "task_id"], keep="first")
    joined = last.join(learnt, on=["run_id", "task_id"])
    if joined.is_empty():
        return _interval("forgetting", None)
    drop = joined["learnt"].cast(pl.Float64).to_numpy() - joined["replayed"].cast(pl.Float64).to_numpy()
    return _over_runs("forgetting", drop, joined["run_id"].to_numpy())


def _efficiency(frame: pl.DataFrame) -> dict:
    success = frame["success"].cast(pl.Float64).to_numpy()
    runs = frame["run_id"].to_numpy()
    kilotokens = frame["total_tokens"].cast(pl.Float64).to_numpy() / 1000
    if kilotokens.sum():
        row = _over_runs("success_per_1k_tokens", success, runs, kilotokens)
    else:
        row = _interval("success_per_1k_tokens", None)
    if total_cost(frame["cost_usd"]):  # known, and not all zero
        spent = frame["cost_usd"].cast(pl.Float64).to_numpy()
        row |= _over_runs("success_per_usd", success, runs, spent)
    else:
        row |= _interval("success_per_usd", None)
    return row

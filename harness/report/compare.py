"""Paired comparisons against a reference variant, and the self-evolution metrics.

Both work on the report's episodes frame and its grouping keys (variant, the env / scenario / model
when they vary, the settings label), and both take the seed as the independent unit (harness/report/
stats.py says why): a seed draws one task set, which its order seeds and repeats share. Two groups' runs
pair on (seed, order_seed, repeat): runs that share them see the same tasks in the same order, which is
checked task by task before anything is paired, and their episodes pair on the stream position. A
comparison's verdict (`resolved`) comes from the paired seeds: the episode-pooled difference with a t
interval over seeds (cluster-robust) and the sign-flip test of each seed's summed differences (the same
pooled mean), Holm-adjusted across the rows. Repeats and order seeds sharpen each seed's difference; they
never add units. The episode-level view (McNemar over episode pairs, gained / lost, an interval over
tasks) is kept beside it and said to be about these runs only. Where runs were repeated
(stream.repeats) each difference is shown beside the noise floor: the larger test-retest spread of a
run's success rate of the two groups (`noise_floor`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from harness.report.sequential import sequential_verdict
from harness.report.stats import (
    LEVEL,
    UNIT_NAMES,
    VarianceSplit,
    bootstrap_ci,
    cluster_ci,
    holm,
    mcnemar_exact,
    safeguard,
    sign_flip_method,
    sign_flip_p,
    smallest_p,
    stratified_bootstrap_ci,
    units_needed,
    units_to_reach,
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
    "orders": "Order seeds per seed (the most any seed has): runs of the seed's tasks in other orders.",
    "repeats": "Repeats per run (stream.repeats; 1 without): the same tasks in the same order again.",
    "unit": "What the interval and the test count as independent: `seed` (the default: a seed's order "
            "seeds and repeats share its task set) or `seed-order` (`--unit order`).",
    "units": "Paired units (seeds, or seed-orders) the interval and the test are over: their n.",
    "tasks_per_run": "Paired episodes per pair of runs, on average.",
    "reference_rate": "The reference's success rate over the paired episodes.",
    "rate": "The group's success rate over the paired episodes.",
    "difference": "rate - reference_rate: the episode-pooled difference, which the interval and the test "
                  "are both about.",
    "ci_low": "Lower end of the 95% interval of the difference over the paired units (t on units - 1 "
              "degrees of freedom, cluster-robust); null with one unit.",
    "ci_high": "Upper end of that interval; null with one unit.",
    "test": "`sign-flip` (a sweep of a fixed number of seeds) or `sequential` (seeds=until_decided: the "
            "anytime-valid betting test, whose confidence sequence and always-valid p-value are ci_low, "
            "ci_high and p_value).",
    "p_value": "Two-sided sign-flip permutation p-value of the units' summed differences (so of the "
               "pooled difference), or the sequential test's always-valid p-value; null with one unit.",
    "p_method": "How p_value was computed: `exact` (every sign pattern, up to 16 units), `monte carlo` "
                "(100,000 random patterns beyond: valid, not exact) or `always valid` (sequential).",
    "smallest_p": "The smallest p-value a sign-flip test over these units can give: 2 / 2^(units whose "
                  "difference is not exactly 0), and beyond 16 units at least 2 / 100,001.",
    "icc": "Intraclass correlation of the per-task differences: the share of their variance between units.",
    "design_effect": "1 + (episodes per unit - 1) x icc: how many times a unit's difference varies more "
                     "than as many independent episodes would.",
    "pairs": "Episode pairs (within these runs).",
    "gained": "Episode pairs only the group solved (within these runs).",
    "lost": "Episode pairs only the reference solved (within these runs).",
    "p_episodes": "Exact McNemar p-value over the episode pairs: about these runs' tasks, never a verdict.",
    "within_low": "Lower end of a 95% bootstrap interval of the difference, tasks resampled within each run: "
                  "about these runs only.",
    "within_high": "Upper end of that within-runs interval.",
    "noise_floor": "Where runs were repeated (stream.repeats), the larger test-retest spread of the two "
                   "groups: the sd of a run's success rate between repeats of the same seed and order; "
                   "else null.",
    "p_holm": "p_value Holm-adjusted across the report's rows that have one.",
    "resolved": "p_holm < 0.05 and the interval excludes 0: the only verdict about the variants.",
}
"""comparisons.parquet's columns in order, with their meanings (docs/columns.md lists them; a test
holds the two and the table to one another)."""


_NOT_FLOAT = {"group": pl.String, "reference": pl.String, "runs": pl.Int64, "seeds": pl.Int64,
              "orders": pl.Int64, "repeats": pl.Int64, "unit": pl.String, "units": pl.Int64,
              "test": pl.String, "p_method": pl.String, "pairs": pl.Int64, "gained": pl.Int64,
              "lost": pl.Int64, "resolved": pl.Boolean}
COMPARISON_SCHEMA = {column: _NOT_FLOAT.get(column, pl.Float64) for column in COMPARISON_COLUMNS}
"""comparisons.parquet's column types, the same with rows or without."""

UNITS = {"seed": ("seed",), "order": ("seed", "order_seed")}
"""What a unit is made of, by `--unit`: a seed (its order seeds and repeats share its task set), or each
order of a seed (assumes the task set the orders share adds nothing they share: only where tasks are
many and alike)."""


def unit_column(unit: str = "seed") -> pl.Expr:
    """Each row's independent unit as text: its seed, or its seed and order seed."""
    if unit not in UNITS:
        raise ValueError(f"unit {unit!r}: one of {', '.join(UNITS)}")
    return pl.concat_str([pl.col(c).cast(pl.String) for c in UNITS[unit]], separator="/")


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
    differs between identical runs) with a 95% bootstrap CI over tasks, and the test-retest spread of a
    run's success rate (`retest_sd`, the `noise_floor` of a comparison). A difference between two groups
    within their spreads is within the noise of running either twice."""
    rows = []
    for values, frame in labelled(episodes, keys).group_by(keys, maintain_order=True):
        tasks = flips(frame)
        if tasks.is_empty():
            continue
        flipped = tasks["flipped"].cast(pl.Float64).to_numpy()
        low, high = bootstrap_ci(flipped, seed=seed)
        rows.append({**dict(zip(keys, values, strict=True)), "repeats": int(tasks["repeats"].max()),
                     "tasks": tasks.height, "flip_rate": float(flipped.mean()), "ci_low": low,
                     "ci_high": high, "retest_sd": retest_spread(frame)})
    return pl.DataFrame(rows) if rows else pl.DataFrame()


def retest_spread(frame: pl.DataFrame) -> float | None:
    """The sd of a run's success rate between repeats of the same seed and order (the variance pooled over
    the seed-orders that were repeated); None without repeats. A flip rate f over T tasks moves a run's
    rate by about sqrt(f / T), far less than f: this, not the flip rate, is what a difference of rates is
    held against."""
    if "repeat" not in frame.columns:
        return None
    rates = frame.group_by("seed", "order_seed", "repeat").agg(rate=pl.col("success").cast(pl.Float64).mean())
    spread = (rates.group_by("seed", "order_seed").agg(n=pl.len(), variance=pl.col("rate").var(ddof=1))
              .filter(pl.col("n") > 1))
    if spread.is_empty():
        return None
    degrees = spread["n"] - 1
    return float(((degrees * spread["variance"]).sum() / degrees.sum()) ** 0.5)


def pair(reference: pl.DataFrame, candidate: pl.DataFrame) -> tuple[pl.DataFrame | None, str | None]:
    """The two groups' episodes side by side (`ref`, `cand` successes, `seed`, `order_seed`, `repeat` (0
    without repeats), and `run`, the pair of runs they belong to: seed / order / repeat), or why they cannot
    be paired: different tasks at the same seed, order and position, or nothing in common."""
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
    repeat = pl.col("repeat") if "repeat" in keys else pl.lit(0)
    return joined.select("seed", "order_seed", repeat=repeat, run=run, ref="success",
                         cand="success_cand"), None


def paired_comparisons(episodes: pl.DataFrame, keys: list[str], reference: str = "baseline",
                       seed: int = 0, unit: str = "seed", plan: bool = True,
                       sequential: bool = False, alpha: float = 1 - LEVEL) -> Comparisons:
    """Every group against the reference group of its context, unit by unit (a unit: a seed, by `unit`):
    the episode-pooled success difference with a 95% t interval over the paired units, the sign-flip p-value
    of the units' summed differences, Holm-adjusted across the rows that have one, `resolved` when the
    adjusted p is under 0.05 and the interval excludes 0; the episode-level view within these runs; and,
    with `plan`, a line per row on what its units can show and how many would resolve its difference.
    `sequential` (a `seeds=until_decided` sweep): the interval and the p-value are the anytime-valid test's
    over the seeds in their order (harness/report/sequential.py), valid however often they were looked
    at; Holm and `resolved` as for the fixed test, at `alpha` (the sweep's `sweep.until_decided.alpha`)."""
    unit_column(unit)  # refuses an unknown unit before any work
    stream = labelled(episodes, keys)
    context = [k for k in keys if k not in NOT_CONTEXT]
    rows: list[dict] = []
    notes: list[str] = []
    pilots: dict[str, Pilot] = {}
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
            floors = [f for f in (retest_spread(ref_frame), retest_spread(candidate)) if f is not None]
            row, pilots[group] = _comparison(group, references[0], pairs, seed, unit)
            if sequential:
                row |= _sequential(pairs, alpha)
            rows.append({**row, "noise_floor": max(floors) if floors else None})
    if not rows:
        return Comparisons(table=pl.DataFrame(schema=COMPARISON_SCHEMA), notes=notes)
    table = pl.DataFrame(rows, infer_schema_length=None).sort("group")
    tested = [p for p in table["p_value"].to_list() if p is not None]
    adjusted = iter(holm(tested))
    table = table.with_columns(p_holm=pl.Series(
        [None if p is None else next(adjusted) for p in table["p_value"].to_list()], dtype=pl.Float64))
    table = table.with_columns(resolved=(pl.col("p_holm") < alpha).fill_null(False)
                               & ((pl.col("ci_low") > 0) | (pl.col("ci_high") < 0)).fill_null(False))
    plans = ([_plan(row, pilots[row["group"]], len(tested)) for row in table.iter_rows(named=True)]
             if plan else [])
    table = table.select(list(COMPARISON_COLUMNS)).cast(COMPARISON_SCHEMA)
    return Comparisons(table=table, notes=notes, plans=plans)


def _comparison(group: str, reference: str, pairs: pl.DataFrame, seed: int,
                unit: str) -> tuple[dict, Pilot]:
    """One row of the comparison, and its pilot for the plan."""
    pairs = pairs.with_columns(unit=unit_column(unit),
                               diff=pl.col("cand").cast(pl.Float64) - pl.col("ref").cast(pl.Float64))
    ref = pairs["ref"].to_numpy().astype(bool)
    cand = pairs["cand"].to_numpy().astype(bool)
    diff, units = pairs["diff"].to_numpy(), pairs["unit"].to_numpy()
    estimate = cluster_ci(diff, units)
    # seeded draws beyond 16 units: one order of the units, whatever the frame's
    per_unit = pairs.group_by("unit").agg(total=pl.col("diff").sum(), mean=pl.col("diff").mean()).sort("unit")
    totals = per_unit["total"].to_numpy()
    within_low, within_high = stratified_bootstrap_ci(diff, pairs["run"].to_numpy(), seed=seed)
    gained, lost, p_episodes = mcnemar_exact(ref, cand)
    split = variance_split(diff, units)
    row = {"group": group, "reference": reference, "runs": pairs["run"].n_unique(),
           "seeds": pairs["seed"].n_unique(),
           "orders": int(pairs.group_by("seed").agg(pl.col("order_seed").n_unique())["order_seed"].max()),
           "repeats": int(pairs.group_by("seed", "order_seed").agg(pl.col("repeat").n_unique())["repeat"]
                          .max()),
           "unit": UNIT_NAMES[unit], "units": estimate.runs,
           "tasks_per_run": len(diff) / pairs["run"].n_unique(), "reference_rate": float(ref.mean()),
           "rate": float(cand.mean()), "difference": estimate.value,
           # a difference of rates lies in [-1, 1]; the t interval of few units can reach past it
           "ci_low": None if estimate.low is None else max(-1.0, estimate.low),
           "ci_high": None if estimate.high is None else min(1.0, estimate.high),
           "test": "sign-flip", "p_value": sign_flip_p(totals, seed=seed) if estimate.runs > 1 else None,
           "p_method": sign_flip_method(estimate.runs) if estimate.runs > 1 else None,
           "smallest_p": smallest_p(estimate.runs, zeros=int((totals == 0).sum())),
           "icc": split.icc if split else None, "design_effect": split.design_effect() if split else None,
           "pairs": len(diff), "gained": gained, "lost": lost, "p_episodes": p_episodes,
           "within_low": within_low, "within_high": within_high}
    return row, Pilot(split, per_unit["mean"].to_numpy())


@dataclass(frozen=True)
class Pilot:
    """What a row's units say for planning: the variance split of its per-episode differences between and
    within units, and each unit's mean difference."""

    split: VarianceSplit | None
    unit_differences: np.ndarray


def _sequential(pairs: pl.DataFrame, alpha: float) -> dict:
    """A row's interval and p-value from the anytime-valid test over its seeds' pooled differences, in the
    order the seeds ran (a sequential sweep adds them in increasing order)."""
    per_seed = (pairs.group_by("seed").agg((pl.col("cand").cast(pl.Float64) - pl.col("ref").cast(pl.Float64))
                                           .mean().alias("difference")).sort("seed"))
    verdict = sequential_verdict(per_seed["difference"].to_numpy(), alpha)
    return {"test": "sequential", "ci_low": verdict.low, "ci_high": verdict.high, "p_value": verdict.p_value,
            "p_method": "always valid"}


def _plan(row: dict, pilot: Pilot, tested: int) -> str:
    """What the row's units can show, and how many paired units of how many episodes would resolve its
    difference (80% power of `resolved` at 5%), from its pilot taken with its uncertainty."""
    name, units, episodes = row["group"], row["units"], round(row["pairs"] / max(row["units"], 1))
    kind = row["unit"]
    if row["test"] == "sequential":
        interval = f"[{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]"
        if row["resolved"]:
            side = "better" if row["difference"] > 0 else "worse"
            return (f"{name}: decided {side} than the reference after {units} seeds (seeds=until_decided: "
                    f"the confidence sequence {interval} excludes 0, valid at every round it was looked at)")
        return (f"{name}: not decided after {units} seeds (seeds=until_decided): its confidence sequence "
                f"{interval} still holds 0; more seeds would go on, not a second sweep's fixed test")
    enough = units_to_reach()
    if units < 2:
        return (f"{name}: one paired {kind} says nothing about the variant (no interval, no test: another "
                f"{kind} may differ by more than its tasks show; its runs share its tasks); `within_low` / "
                f"`within_high` and `p_episodes` are about these {row['runs']} runs' tasks only. At least "
                f"{enough} paired {kind}s are needed for a test that can reach p < 0.05, and 2 to measure "
                f"how much {kind}s differ")
    said = []
    smallest = row["smallest_p"]
    if smallest >= 1 - LEVEL:
        zeros = int((pilot.unit_differences == 0).sum())
        because = f", {zeros} of them with a difference of exactly 0," if zeros else ""
        said.append(f"{units} paired {kind}s cannot reach p < 0.05 whatever they show (a "
                    f"sign-flip test over {units} {kind}s{because} cannot go below {smallest:.3g}; {enough} "
                    f"{kind}s with a difference can)")
    elif tested > 1 and smallest * tested >= 1 - LEVEL:
        # Holm multiplies the k-th smallest of m p-values by m - k + 1 (and keeps the running maximum)
        rank = math.floor(tested + 1 - (1 - LEVEL) / smallest) + 1
        said.append(f"Holm multiplies the smallest of these {tested} rows' p-values by {tested}, the next by "
                    f"{tested - 1}, and so on: at its smallest p ({smallest:.3g}) this row reaches p_holm < "
                    f"0.05 only if at least {rank - 1} other row{'s' if rank > 2 else ''} have smaller "
                    "p-values and reach it too")
    split = pilot.split
    if split is None or abs(row["difference"]) < 1e-12:
        said.append("no difference observed; nothing to plan" if split is not None
                    else f"one episode per {kind}: the variance within {kind}s cannot be measured; "
                    "nothing to plan")
    else:
        said.append(_units_plan(row, split, pilot.unit_differences, episodes, max(tested, 1)))
    floor = row.get("noise_floor")
    if floor is not None and abs(row["difference"]) < floor:
        said.append(f"the difference is within the test-retest spread of a run's rate ({floor:.3f}): within "
                    "the noise of running either group twice")
    return f"{name}: " + "; ".join(said)


def _count(units: int | None) -> str:
    return "more than 100,000" if units is None else str(units)


def _units_plan(row: dict, split: VarianceSplit, unit_differences: np.ndarray, episodes: int,
                rows: int) -> str:
    difference, kind = row["difference"], row["unit"]
    shape = (f"between-{kind} sd {split.between**0.5:.3f}, within-{kind} sd {split.within**0.5:.3f} (ICC "
             f"{split.icc:.3f}, design effect {split.design_effect(episodes):.2f} at {episodes} episodes per "
             f"{kind})")
    holm_rows = f", Holm over {rows} rows" if rows > 1 else ""
    at_point = units_needed(difference, split, episodes, rows=rows)
    guard = safeguard(unit_differences)
    if guard is None or guard.effect <= 0:
        return (f"a difference of {difference:+.3f} with {shape} is within its own noise (the near end of "
                f"its 60% interval is at or past 0), so no number of {kind}s can be promised 80% power for "
                f"it (safeguard power); taken at its point estimates it would need {_count(at_point)} paired "
                f"{kind}s of {episodes} episodes; now {row['units']}")
    # the spread of a unit's difference at its upper bound, the part between units at least as measured
    between = max(split.between, guard.spread**2 - split.within / episodes)
    guarded = VarianceSplit(between, split.within, episodes, split.runs)
    effect = math.copysign(guard.effect, difference)
    plan = (f"a difference of {difference:+.3f} with {shape} needs about "
            f"{_count(units_needed(effect, guarded, episodes, rows=rows))} paired {kind}s of {episodes} "
            f"episodes for 80% power of `resolved` (the sign-flip test and the interval together"
            f"{holm_rows}) at the pilot's safeguarded difference {effect:+.3f} and {kind}-level sd "
            f"{guard.spread:.3f} (the near end of the difference's 60% interval, the spread's 80% upper "
            "bound: safeguard power); "
            f"{_count(at_point)} at the point estimates; "
            f"{_count(units_needed(effect, guarded, 2 * episodes, rows=rows))} of {2 * episodes} episodes")
    if between > 0:
        floor = units_needed(effect, VarianceSplit(between, 0.0, episodes, split.runs), episodes, rows=rows)
        plan += f"; at least {_count(floor)} however many tasks per {kind}, as {kind}s differ"
    return plan + f"; now {row['units']}"


def evolution_metrics(episodes: pl.DataFrame, keys: list[str], window: int = 10,
                      fraction: float = 0.9, unit: str = "seed") -> pl.DataFrame:
    """One row per group: evolution gain (against the same group in the isolated scenario),
    adaptation speed, stability over seeds and orders, forgetting on replay probes, and success
    per 1k tokens and per dollar, each with a 95% CI over the group's units (seeds) where it has two or
    more (one seed says nothing about how another would differ: its metrics have no interval)."""
    stream = labelled(episodes, keys).with_columns(unit=unit_column(unit))
    probes = episodes.filter(pl.col("probe") & pl.col("attempted"))
    without_scenario = [k for k in keys if k != "scenario"]
    rows = []
    for values, frame in stream.group_by(keys, maintain_order=True):
        row: dict = dict(zip(keys, values, strict=True))
        row["runs"] = frame["run_id"].n_unique()
        row["seeds"] = frame["seed"].n_unique()
        row["success_rate"] = float(frame["success"].mean())
        row |= _evolution_gain(stream, frame, without_scenario, unit)
        row |= _adaptation(frame, window, fraction)
        row |= _stability(frame)
        own_probes = probes.filter(pl.col("run_id").is_in(frame["run_id"].unique().to_list()))
        row |= _forgetting(frame, own_probes)
        row |= _efficiency(frame)
        rows.append(row)
    return pl.DataFrame(rows).sort(keys) if rows else pl.DataFrame()


def _interval(prefix: str, value: float | None, low: float | None = None, high: float | None = None) -> dict:
    return {prefix: value, f"{prefix}_low": low, f"{prefix}_high": high}


def _over_units(prefix: str, values: np.ndarray, units: np.ndarray,
                weights: np.ndarray | None = None) -> dict:
    estimate = cluster_ci(values, units, weights)
    return _interval(prefix, estimate.value, estimate.low, estimate.high)


def _evolution_gain(stream: pl.DataFrame, frame: pl.DataFrame, keys: list[str], unit: str) -> dict:
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
    return _over_units("evolution_gain", diff, pairs.select(unit_column(unit)).to_series().to_numpy())


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
    speeds, units = [], []
    for _, run in frame.group_by("run_id"):
        tasks = adaptation_tasks(run.sort("stream_position")["success"].to_numpy(), window, fraction)
        if tasks is not None:
            speeds.append(tasks)
            units.append(run["unit"][0])
    if not speeds:
        return _interval("adaptation_tasks", None)
    return _over_units("adaptation_tasks", np.array(speeds, dtype=float), np.array(units))


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
            .agg(pl.col("success").last().alias("replayed")))
    learnt = frame.select("run_id", "task_id", "unit", learnt="success").unique(["run_id", "task_id"],
                                                                               keep="first")
    joined = last.join(learnt, on=["run_id", "task_id"])
    if joined.is_empty():
        return _interval("forgetting", None)
    drop = joined["learnt"].cast(pl.Float64).to_numpy() - joined["replayed"].cast(pl.Float64).to_numpy()
    return _over_units("forgetting", drop, joined["unit"].to_numpy())


def _efficiency(frame: pl.DataFrame) -> dict:
    success = frame["success"].cast(pl.Float64).to_numpy()
    units = frame["unit"].to_numpy()
    kilotokens = frame["total_tokens"].cast(pl.Float64).to_numpy() / 1000
    if kilotokens.sum():
        row = _over_units("success_per_1k_tokens", success, units, kilotokens)
    else:
        row = _interval("success_per_1k_tokens", None)
    if total_cost(frame["cost_usd"]):  # known, and not all zero
        spent = frame["cost_usd"].cast(pl.Float64).to_numpy()
        row |= _over_units("success_per_usd", success, units, spent)
    else:
        row |= _interval("success_per_usd", None)
    return row

"""Paired comparisons against a reference variant, and the self-evolution metrics.

Both work on the report's episodes frame and its grouping keys (variant, the env / scenario /
model when they vary, the settings label). Episodes pair on (seed, order_seed, stream_position)
within the same env, scenario and model: runs that share a seed see the same tasks in the same
order, which is checked task by task before anything is paired. Where runs were repeated
(stream.repeats) they pair repeat by repeat, and each difference is shown beside the noise floor:
the test-retest flip rate of the two groups (`noise_floor`). When both groups were repeated, the
planning line under the table uses the discordance measured across repeats (`across_repeats`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from harness.report.stats import (
    bootstrap_ci,
    holm,
    mcnemar_exact,
    pairs_needed,
    pairs_needed_at_rates,
    stratified_bootstrap_ci,
)
from harness.tables.costs import total_cost

PAIR_KEYS = ["seed", "order_seed", "stream_position"]
NOT_CONTEXT = ("variant", "settings")
"""Grouping keys that tell compared groups apart; the others (env, scenario, model) are the context
a comparison stays within."""


@dataclass
class Comparisons:
    table: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    """Comparisons that could not be made, and why."""
    plans: list[str] = field(default_factory=list)
    """How many paired episodes would resolve each observed difference."""


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
    """The two groups' episodes side by side (`ref`, `cand` successes, `seed`), or why they cannot
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
    return joined.select("seed", "order_seed", ref="success", cand="success_cand"), None


def across_repeats(reference: pl.DataFrame, candidate: pl.DataFrame) -> dict | None:
    """Where both groups ran more than one repeat: the rates at which a fresh pair of single runs
    (one of the candidate, one of the reference) is gained or lost, measured with every repeat
    against every repeat. At each seed, order and position holding the same task in both groups, a
    candidate solving it in a share b of its repeats and a reference in a share a give (1 - a) * b
    gained and a * (1 - b) lost pairs; the rates are their means over the positions. Pairing repeat
    i with repeat i only samples one of these pairings per position, and with few repeats its
    discordance can be far from this one. None without repeats in both groups."""
    if "repeat" not in reference.columns or "repeat" not in candidate.columns:
        return None
    ref_repeats, cand_repeats = reference["repeat"].n_unique(), candidate["repeat"].n_unique()
    if ref_repeats < 2 or cand_repeats < 2:
        return None

    def shares(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.group_by(PAIR_KEYS).agg(task_id=pl.col("task_id").first(),
                                              tasks=pl.col("task_id").n_unique(),
                                              share=pl.col("success").cast(pl.Float64).mean())

    joined = shares(reference).join(shares(candidate), on=PAIR_KEYS, suffix="_cand").filter(
        (pl.col("tasks") == 1) & (pl.col("tasks_cand") == 1) & (pl.col("task_id") == pl.col("task_id_cand")))
    if joined.is_empty():
        return None
    a, b = joined["share"].to_numpy(), joined["share_cand"].to_numpy()
    gained, lost = float(((1 - a) * b).mean()), float((a * (1 - b)).mean())
    return {"repeats": cand_repeats, "reference_repeats": ref_repeats, "positions": joined.height,
            "gained": gained, "lost": lost, "needed": pairs_needed_at_rates(gained, lost),
            "flip_rate": _flip_rate(candidate), "reference_flip_rate": _flip_rate(reference)}


def paired_comparisons(episodes: pl.DataFrame, keys: list[str], reference: str = "baseline",
                       seed: int = 0) -> Comparisons:
    """Every group against the reference group of its context: success difference with a paired
    bootstrap CI (tasks resampled within each seed and order), exact McNemar p-value, Holm-adjusted
    across all comparisons, and whether the difference is resolved at 95%."""
    stream = labelled(episodes, keys)
    context = [k for k in keys if k not in NOT_CONTEXT]
    rows: list[dict] = []
    notes: list[str] = []
    across: dict[str, dict | None] = {}
    for values, frame in stream.group_by(context or [pl.lit(0)], maintain_order=True):
        where = ", ".join(f"{k}={v}" for k, v in zip(context, values, strict=True)) if context else ""
        groups = sorted(frame["group"].unique().to_list())
        references = [g for g in groups if g == reference] or sorted(
            set(frame.filter(pl.col("variant") == reference)["group"].to_list()))
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
            rows.append({**_comparison(group, references[0], pairs, seed),
                         "noise_floor": max(floors) if floors else None})
            across[group] = across_repeats(ref_frame, candidate)
    table = pl.DataFrame(rows).sort("group") if rows else pl.DataFrame()
    plans: list[str] = []
    if rows:
        adjusted = holm(table["p_value"].to_list())
        table = table.with_columns(p_holm=pl.Series(adjusted)).with_columns(
            resolved=(pl.col("p_holm") < 0.05) & ((pl.col("ci_low") > 0) | (pl.col("ci_high") < 0)))
        for row in table.iter_rows(named=True):
            plans.append(_plan(row, across.get(row["group"])))
        table = table.drop("needed")
    return Comparisons(table=table, notes=notes, plans=plans)


def _comparison(group: str, reference: str, pairs: pl.DataFrame, seed: int) -> dict:
    ref = pairs["ref"].to_numpy().astype(bool)
    cand = pairs["cand"].to_numpy().astype(bool)
    strata = (pairs["seed"].cast(pl.String) + "/" + pairs["order_seed"].cast(pl.String)).to_numpy()
    diff = cand.astype(float) - ref.astype(float)
    low, high = stratified_bootstrap_ci(diff, strata, seed=seed)
    gained, lost, p = mcnemar_exact(ref, cand)
    return {"group": group, "reference": reference, "pairs": len(diff), "seeds": pairs["seed"].n_unique(),
            "reference_rate": float(ref.mean()), "rate": float(cand.mean()), "difference": float(diff.mean()),
            "ci_low": low, "ci_high": high, "gained": gained, "lost": lost, "p_value": p,
            "needed": pairs_needed(gained, lost, len(diff))}


def _plan(row: dict, across: dict | None = None) -> str:
    """How many paired episodes would resolve the row's difference: with the discordance measured
    across repeats where both groups were repeated (`across_repeats`), else with the discordance of
    the pairs in the table; and, where the row has a noise floor, whether the difference is below it."""
    seeds = max(row["seeds"], 1)
    if across is None:
        needed = row["needed"]
        if needed is None:
            return (f"{row['group']}: no difference observed ({row['gained']} gained, {row['lost']} lost); "
                    "nothing to plan")
        discordance = f"with this discordance ({row['gained'] + row['lost']} of {row['pairs']} pairs)"
    else:
        needed = across["needed"]
        repeats = f"{across['repeats']} x {across['reference_repeats']} repeats"
        if needed is None:
            return (f"{row['group']}: no difference observed across {repeats} (every repeat against every "
                    f"repeat: {across['gained']:.3f} of pairs gained, {across['lost']:.3f} lost); "
                    "nothing to plan")
        rates = " and ".join("n/a" if r is None else f"{r:.3f}"
                             for r in (across["flip_rate"], across["reference_flip_rate"]))
        discordance = (f"with the discordance measured across {repeats} (every repeat against every repeat: "
                       f"{across['gained'] + across['lost']:.3f} of pairs disagree; test-retest flip rates "
                       f"{rates} for this group and the reference)")
    per_seed = -(-needed // seeds)
    plan = (f"{row['group']}: a difference of {row['difference']:+.3f} {discordance} needs about {needed} "
            f"paired episodes for 80% power at 5% (e.g. {per_seed} tasks x {seeds} seeds; "
            f"now {row['pairs']})")
    floor = row.get("noise_floor")
    if floor is not None and abs(row["difference"]) < floor:
        plan += (f". The difference is below the noise floor ({floor:.3f}): within the noise of running "
                 "either group twice")
    return plan


def evolution_metrics(episodes: pl.DataFrame, keys: list[str], window: int = 10, fraction: float = 0.9,
                      seed: int = 0) -> pl.DataFrame:
    """One row per group: evolution gain (against the same group in the isolated scenario),
    adaptation speed, stability over seeds and orders, forgetting on replay probes, and success
    per 1k tokens and per dollar, each with a 95% CI where there is something to resample."""
    stream = labelled(episodes, keys)
    probes = episodes.filter(pl.col("probe") & pl.col("attempted"))
    without_scenario = [k for k in keys if k != "scenario"]
    rows = []
    for values, frame in stream.group_by(keys, maintain_order=True):
        row: dict = dict(zip(keys, values, strict=True))
        row["runs"] = frame["run_id"].n_unique()
        row["success_rate"] = float(frame["success"].mean())
        row |= _evolution_gain(stream, frame, without_scenario, seed)
        row |= _adaptation(frame, window, fraction, seed)
        row |= _stability(frame)
        own_probes = probes.filter(pl.col("run_id").is_in(frame["run_id"].unique().to_list()))
        row |= _forgetting(frame, own_probes, seed)
        row |= _efficiency(frame, seed)
        rows.append(row)
    return pl.DataFrame(rows).sort(keys) if rows else pl.DataFrame()


def _interval(prefix: str, value: float | None, low: float | None = None, high: float | None = None) -> dict:
    return {prefix: value, f"{prefix}_low": low, f"{prefix}_high": high}


def _evolution_gain(stream: pl.DataFrame, frame: pl.DataFrame, keys: list[str], seed: int) -> dict:
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
    strata = (pairs["seed"].cast(pl.String) + "/" + pairs["order_seed"].cast(pl.String)).to_numpy()
    return _interval("evolution_gain", float(diff.mean()), *stratified_bootstrap_ci(diff, strata, seed=seed))


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


def _adaptation(frame: pl.DataFrame, window: int, fraction: float, seed: int) -> dict:
    speeds = []
    for _, run in frame.group_by("run_id"):
        tasks = adaptation_tasks(run.sort("stream_position")["success"].to_numpy(), window, fraction)
        if tasks is not None:
            speeds.append(tasks)
    if not speeds:
        return _interval("adaptation_tasks", None)
    values = np.array(speeds, dtype=float)
    return _interval("adaptation_tasks", float(values.mean()),
                     *stratified_bootstrap_ci(values, np.zeros(len(values)), seed=seed))


def _stability(frame: pl.DataFrame) -> dict:
    per_run = frame.group_by("seed", "order_seed").agg(rate=pl.col("success").mean())
    by_seed = per_run.group_by("seed").agg(pl.col("rate").mean())["rate"]
    orders = per_run.group_by("seed").agg(spread=pl.col("rate").std(), n=pl.len()).filter(pl.col("n") > 1)
    return {"std_over_seeds": float(by_seed.std()) if by_seed.len() > 1 else None,
            "range_over_seeds": float(by_seed.max() - by_seed.min()) if by_seed.len() > 1 else None,
            "std_over_orders": float(orders["spread"].mean()) if orders.height else None}


def _forgetting(frame: pl.DataFrame, probes: pl.DataFrame, seed: int) -> dict:
    if probes.is_empty():
        return _interval("forgetting", None)
    last = (probes.sort("stream_position").group_by("run_id", "task_id")
            .agg(pl.col("success").last().alias("replayed"), pl.col("seed").first()))
    learnt = frame.select("run_id", "task_id", learnt="success").unique(["run_id", "task_id"], keep="first")
    joined = last.join(learnt, on=["run_id", "task_id"])
    if joined.is_empty():
        return _interval("forgetting", None)
    drop = joined["learnt"].cast(pl.Float64).to_numpy() - joined["replayed"].cast(pl.Float64).to_numpy()
    return _interval("forgetting", float(drop.mean()),
                     *stratified_bootstrap_ci(drop, joined["seed"].to_numpy(), seed=seed))


def _efficiency(frame: pl.DataFrame, seed: int) -> dict:
    success = frame["success"].cast(pl.Float64).to_numpy()
    strata = frame["seed"].to_numpy()
    kilotokens = frame["total_tokens"].cast(pl.Float64).to_numpy() / 1000
    if kilotokens.sum():
        row = _interval("success_per_1k_tokens", float(success.sum() / kilotokens.sum()),
                        *stratified_bootstrap_ci(success, strata, weights=kilotokens, seed=seed))
    else:
        row = _interval("success_per_1k_tokens", None)
    if total_cost(frame["cost_usd"]):  # known, and not all zero
        spent = frame["cost_usd"].cast(pl.Float64).to_numpy()
        row |= _interval("success_per_usd", float(success.sum() / spent.sum()),
                         *stratified_bootstrap_ci(success, strata, weights=spent, seed=seed))
    else:
        row |= _interval("success_per_usd", None)
    return row

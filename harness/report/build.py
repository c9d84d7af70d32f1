"""`python -m harness.report <run or sweep dir> [...]`: compare variants at equal spend.

Reads the episodes, llm_calls and runs tables of every run directory below the given paths (finished,
partial or still running) and writes `report.md` and PNG plots into the first path (or `--out`).
Runs are grouped by variant, by env, scenario and model when there are several, and by every setting
that varies between runs of the same variant (a `settings` label such as `variant.max_attempts=3`,
from the runs table; see harness/tables/summary.py). The seed is the independent unit (its order seeds
and repeats share its task set; `--unit order` counts each order of a seed instead): every interval and
test below is over seeds (harness/report/stats.py says why):
- per group: success rate with a 95% t interval over its seeds (cluster-robust; over the one seed's
  episodes where it has one, `ci_over` says which), act and overhead tokens, overhead share, dollars,
  p50/p95 episode latency, protocol and model;
- accuracy at matched spend: each variant's success rate over the episodes finished within the
  largest cumulative spend that every compared agent run reached, in dollars when every call's
  cost is known (then in tokens too), else in tokens, saying which; where any call's cost is
  unknown the headline says so;
- paired differences against a reference variant (`--reference`, default baseline) on the same
  tasks in the same order, seed by seed: a t interval over seeds, the sign-flip test with Holm's
  correction, resolved or not at 95%, and how many seeds would resolve the observed difference (the
  power of that verdict, from the pilot taken with its uncertainty), beside the test-retest noise floor
  where runs were repeated (harness/report/compare.py, harness/report/stats.py);
- the self-evolution metrics: evolution gain, adaptation speed, stability, forgetting, success
  per 1k tokens and per dollar (formulas in docs/report.md);
- a cost-accuracy plot with the Pareto frontier, learning curves (rolling success by stream
  position, a band over seeds), and, when the data has them, forgetting on replay probes, the
  judge-vs-truth gap, and the spread over stream orders.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from harness.files import replace_atomically
from harness.report.aggregate import Aggregates, aggregates, plot_performance_profiles
from harness.report.compare import (
    Comparisons,
    evolution_metrics,
    noise_floor,
    paired_comparisons,
    unit_column,
)
from harness.report.html import write_html
from harness.report.parts import REPORT_GROUPS, Section, markdown, pareto_front, spend_per_episode
from harness.report.sequential import SEQUENTIAL_STATE
from harness.report.stats import group_interval
from harness.tables.costs import known_sum, total_cost
from harness.tables.reading import read_table, read_tables, run_directories
from harness.tables.records import PURPOSES, TABLES
from harness.tables.summary import SNAPSHOT_COLUMNS, group_keys, label_runs, settings_labels


class ReportError(ValueError):
    pass


def find_run_dirs(paths: list[Path]) -> list[Path]:
    runs: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise ReportError(f"{path}: no such directory")
        found = [run for run in run_directories(path) if any((run / "episodes").glob("*.parquet"))]
        if not found:
            raise ReportError(f"{path}: holds no harness tables (no episodes/*.parquet below it)")
        runs += found
    return runs


def load(runs: list[Path]) -> tuple[pl.DataFrame, pl.DataFrame, list[dict]]:
    """Episodes (with a `settings` label when a setting varies), llm_calls, and one status row per
    run directory."""
    run_rows = read_tables(runs, "runs")
    episodes = label_runs(read_tables(runs, "episodes"), run_rows)
    if episodes.is_empty():
        raise ReportError(f"{', '.join(map(str, runs))}: no episodes written yet")
    calls = read_tables(runs, "llm_calls")
    labels = dict(settings_labels(run_rows).iter_rows())
    status = []
    for run in runs:
        manifest_path = run / "manifest.json"
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        expected = sum(r.get("num_tasks", 0) for r in manifest.get("agent_runs", []))
        mine = read_table(run, "episodes")
        done = mine.filter(~pl.col("probe") & pl.col("attempted")).height if mine.height else 0
        row: dict = {"run_dir": str(run), "status": manifest.get("status", "unknown")}
        if labels:
            ids = set(mine["run_id"]) if mine.height else set()
            row["settings"] = "; ".join(sorted({labels.get(i, "") for i in ids} - {""}))
        own_calls = read_table(run, "llm_calls")
        row |= {"episodes": done, "expected": expected, "llm_calls": own_calls.height,
                "cached_share": float(own_calls["cached"].mean()) if own_calls.height else None}
        status.append(row)
    return episodes, calls, status


def learning_runs(episodes: pl.DataFrame) -> pl.DataFrame:
    """Episodes of runs that learn (not snapshot evaluations)."""
    return episodes.filter(pl.col("view").is_null()) if "view" in episodes.columns else episodes


def main_table(episodes: pl.DataFrame, unit: str = "seed") -> pl.DataFrame:
    stream = episodes.filter(~pl.col("probe"))
    keys = group_keys(stream, REPORT_GROUPS)
    skipped = stream.filter(~pl.col("attempted")).group_by(keys).agg(not_attempted=pl.len())
    evaluated = with_spend(stream.filter(pl.col("attempted")))
    models = [] if "model" in keys else [pl.col("model").unique().sort().str.join(",").alias("model")]
    for column in ("prompt_tokens", "cache_read_tokens", "reasoning_tokens"):  # older tables lack some
        if column not in evaluated.columns:
            evaluated = evaluated.with_columns(pl.lit(None, dtype=pl.Int64).alias(column))
    table = (evaluated.group_by(keys).agg(
        pl.col("seed").n_unique().alias("seeds"), pl.col("run_id").n_unique().alias("runs"),
        pl.len().alias("episodes"), pl.col("success").mean().alias("success_rate"),
        pl.col("act_tokens").sum(),
        pl.col("overhead_tokens").sum(), pl.col("train_tokens").sum(),
        known_sum(pl.col("spent_cost_usd")).alias("cost_usd"),
        (known_sum(pl.col("cache_read_tokens")) / pl.col("prompt_tokens").sum()).alias("cache_read_share"),
        known_sum(pl.col("reasoning_tokens")).alias("reasoning_tokens"),
        pl.col("latency_s").quantile(0.5).alias("p50_latency_s"),
        pl.col("latency_s").quantile(0.95).alias("p95_latency_s"),
        pl.col("protocol").unique().sort().str.join("/"), *models,
    ).with_columns(overhead_share=pl.col("overhead_tokens")
                   / (pl.col("act_tokens") + pl.col("overhead_tokens"))).sort(keys))
    intervals = [_interval_of(evaluated.filter(_same(row, keys)), unit)
                 for row in table.iter_rows(named=True)]
    table = table.with_columns(ci_low=pl.Series([low for _, low, _, _ in intervals], dtype=pl.Float64),
                               ci_high=pl.Series([high for *_, high, _ in intervals], dtype=pl.Float64),
                               ci_over=pl.Series([over for *_, over in intervals], dtype=pl.String))
    first = [*keys, "seeds", "runs", "episodes", "success_rate", "ci_low", "ci_high", "ci_over"]
    table = table.select(*first, pl.exclude(first))
    return table.join(skipped, on=keys, how="left").with_columns(pl.col("not_attempted").fill_null(0))


def _same(row: dict, keys: list[str]) -> pl.Expr:
    return pl.all_horizontal([pl.col(k).eq_missing(row[k]) for k in keys])


def _interval_of(frame: pl.DataFrame, unit: str = "seed") -> tuple[int, float | None, float | None, str]:
    """A group's units and its success interval with what it is over (harness.report.stats.group_interval)."""
    units = frame.select(unit_column(unit)).to_series().to_numpy()
    return group_interval(frame["success"].cast(pl.Float64).to_numpy(), units, unit)


TRAINING_DEFAULTS: dict[str, tuple[Any, type[pl.DataType]]] = {
    "train_tokens": (0, pl.Int64), "train_cost_usd": (0.0, pl.Float64), "train_flops": (0.0, pl.Float64),
    "flops": (None, pl.Float64)}
"""Episode columns of schema 9, as an older table (nothing trained, FLOPs not counted) reads."""


def with_spend(episodes: pl.DataFrame) -> pl.DataFrame:
    """Each episode's spend, its calls' and its weight updates' together (a learner's training is spend
    as its calls are): spent_tokens (tokens sent and received, and tokens trained), spent_cost_usd and
    spent_flops (null where unknown)."""
    for column, (value, dtype) in TRAINING_DEFAULTS.items():
        if column not in episodes.columns:
            episodes = episodes.with_columns(pl.lit(value, dtype=dtype).alias(column))
    return episodes.with_columns(spent_tokens=pl.col("total_tokens") + pl.col("train_tokens"),
                                 spent_cost_usd=pl.col("cost_usd") + pl.col("train_cost_usd"),
                                 spent_flops=pl.col("flops") + pl.col("train_flops"))


def matched_spend(episodes: pl.DataFrame, spend: str = "spent_tokens",
                  unit: str = "seed") -> tuple[float, pl.DataFrame]:
    """Success of each variant over the episodes finished within the largest cumulative spend
    (`spent_tokens`, `spent_cost_usd` or `spent_flops`: calls and training together) that every agent
    run reached: the smallest of the runs' totals. `train_share`: the share of the tokens spent within
    it that were trained on."""
    episodes = with_spend(episodes)
    evaluated = (episodes.sort("run_id", "stream_position", "probe")
                 .with_columns(cumulative=pl.col(spend).cum_sum().over("run_id")))
    budget = float(evaluated.group_by("run_id").agg(pl.col("cumulative").max())["cumulative"].min())
    counted = ~pl.col("probe") & pl.col("attempted")
    within = evaluated.filter(counted & (pl.col("cumulative") <= budget))
    keys = group_keys(episodes, REPORT_GROUPS)
    rows = []
    for group, frame in within.group_by(keys, maintain_order=True):
        _units, low, high, over = _interval_of(frame, unit)
        rows.append({**dict(zip(keys, group, strict=True)), "seeds": frame["seed"].n_unique(),
                     "runs": frame["run_id"].n_unique(), "episodes": frame.height,
                     "success_rate": frame["success"].mean(), "ci_low": low, "ci_high": high,
                     "ci_over": over, "train_share": _train_share(frame)})
    return budget, pl.DataFrame(rows).sort(keys) if rows else pl.DataFrame()


def _train_share(frame: pl.DataFrame) -> float:
    spent = int(frame["spent_tokens"].sum())
    return int(frame["train_tokens"].sum()) / spent if spent else 0.0


def spend_unit(episodes: pl.DataFrame) -> tuple[str, str]:
    """The column spend is compared in, and why: dollars when every episode's cost is known and not
    all zero (a local model's), else tokens (both: calls and training together)."""
    costs = with_spend(episodes).filter(~pl.col("probe"))["spent_cost_usd"]
    unknown = costs.null_count()
    if unknown:
        return "spent_tokens", (f"in tokens: the cost of {unknown} of {costs.len()} episodes is unknown "
                                "(a model with no price), so dollars are not compared")
    if not total_cost(costs.to_list()):
        return "spent_tokens", "in tokens: every call cost $0 (a local model)"
    return "spent_cost_usd", ("in dollars: every call's cost is known (cache reads and writes at their own "
                              "prices)")


def plot_cost_accuracy(table: pl.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [" / ".join(str(row[k]) for k in table.columns[: table.columns.index("seeds")])
              for row in table.iter_rows(named=True)]
    tokens, axis = spend_per_episode(table)
    points = list(zip(tokens, table["success_rate"].to_list(), strict=True))
    front = pareto_front(points)
    fig, ax = plt.subplots(figsize=(7, 5))
    err = np.array([table["success_rate"] - table["ci_low"], table["ci_high"] - table["success_rate"]])
    ax.errorbar(tokens, table["success_rate"], yerr=err, fmt="o", capsize=3)
    for (x, y), label in zip(points, labels, strict=True):
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    frontier = sorted(points[i] for i in front)
    ax.plot([p[0] for p in frontier], [p[1] for p in frontier], "--o", color="tab:red", mfc="none",
            markersize=12, label="Pareto frontier")
    ax.set_xlabel(axis)
    ax.set_ylabel("success rate (95% CI)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_learning_curves(episodes: pl.DataFrame, path: Path, window: int = 10) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    evaluated = episodes.filter(~pl.col("probe")).sort("stream_position")
    keys = group_keys(evaluated, REPORT_GROUPS)
    for group, frame in evaluated.group_by(keys, maintain_order=True):
        label = " / ".join(str(v) for v in group if v != "")
        curves = []
        for (_,), run in frame.group_by(["run_id"]):
            success = run.sort("stream_position")["success"].cast(pl.Float64)
            curves.append(success.rolling_mean(window_size=window, min_samples=1).to_numpy())
        length = min(len(c) for c in curves)
        stacked = np.vstack([c[:length] for c in curves])
        mean = stacked.mean(axis=0)
        ax.plot(np.arange(length), mean, label=f"{label} ({len(curves)} runs)")
        if len(curves) > 1:
            ax.fill_between(np.arange(length), stacked.min(axis=0), stacked.max(axis=0), alpha=0.2)
    ax.set_xlabel("stream position")
    ax.set_ylabel(f"success, rolling mean of {window} (band: min-max over runs)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def with_interval(frame: pl.DataFrame, names: list[str]) -> pl.DataFrame:
    """`name`, `name_low`, `name_high` as one column of text: `0.120 [0.050, 0.190]`."""
    def text(value: float | None, low: float | None, high: float | None) -> str | None:
        if value is None:
            return None
        return f"{value:.3f}" if low is None else f"{value:.3f} [{low:.3f}, {high:.3f}]"

    for name in names:
        if name not in frame.columns:
            continue
        cells = [text(*row) for row in frame.select(name, f"{name}_low", f"{name}_high").iter_rows()]
        frame = frame.drop(f"{name}_low", f"{name}_high").with_columns(pl.Series(name, cells, pl.String))
    return frame


def variants_section(episodes: pl.DataFrame, table: pl.DataFrame) -> Section:
    keys = group_keys(episodes, REPORT_GROUPS)
    varying = (f" Rows differ in `{'`, `'.join(keys)}`; `settings` labels the settings that "
               "vary between runs of the same variant (from each run directory's `runs` table)."
               if "settings" in episodes.columns else "")
    one_seed = (" **Every group here is one seed**: its interval says how sure that seed's rate is over its "
                "tasks, not how another seed of the variant would do (its repeats and order seeds share its "
                "tasks); run several seeds (`seeds=[0,1,2,3,4,5]` or `-m seed=0,1,2,3,4,5`) to learn that."
                if int(table["seeds"].max()) < 2 else "")
    return Section("Variants", "Success rate (over all evaluated episodes) with a 95% CI over the group's "
                   "seeds, the independent unit (a seed's order seeds and repeats share its task set): "
                   "Student's t on the seeds with a cluster-robust standard error (`ci_over`: how many). A "
                   "group with one seed gets the BCa bootstrap interval over that seed's episodes instead, "
                   f"`ci_over` saying so. Overhead = every purpose but act.{one_seed}" + varying, table,
                   figure="cost_accuracy")


def matched_sections(learning: pl.DataFrame, unit: str = "seed") -> list[Section]:
    """Accuracy at matched spend, in dollars where every cost is known (then in tokens too), else in
    tokens; the text says which and why."""
    text = ("Episodes finished within the largest cumulative spend every agent run reached (95% CI over the "
            "group's seeds, as in Variants); spend counts every call and, for a learner variant, its weight "
            "updates (tokens trained, at the model's price.train_per_token; `train_share`: the share of the "
            "tokens that were trained on)")
    spend, why = spend_unit(learning)
    budget, matched = matched_spend(learning, unit=unit)
    by_tokens = Section(f"Accuracy at matched spend: {budget:.0f} tokens per agent run",
                        f"{text}, {why}." if spend == "spent_tokens" else f"{text}, in tokens.", matched)
    sections = [by_tokens]
    if spend != "spent_tokens":
        dollar_budget, by_dollars = matched_spend(learning, "spent_cost_usd", unit)
        sections.insert(0, Section(f"Accuracy at matched spend: ${dollar_budget:.4f} per agent run",
                                   f"{text}, {why}.", by_dollars))
    flops = with_spend(learning).filter(~pl.col("probe"))["spent_flops"]
    if flops.len() and not flops.null_count():
        flop_budget, by_flops = matched_spend(learning, "spent_flops", unit)
        sections.append(Section(
            f"Accuracy at matched compute: {flop_budget:.3g} FLOPs per agent run",
            "As above, in floating-point operations: 2 x model.parameters per token of a call, 6 x per "
            "token trained (docs/weights.md): in-context and in-weight learning at equal compute.", by_flops))
    return sections


def cost_headline(episodes: pl.DataFrame, calls: pl.DataFrame) -> str:
    """What the report's dollars are worth: said first where any call's cost is unknown (a sum of the
    known part would understate the spend), with the cache-read share of prompt tokens."""
    if calls.is_empty():
        return ""
    unknown = calls.filter(pl.col("cost_usd").is_null())
    said = ""
    if unknown.height:
        models = ", ".join(sorted(unknown["model"].unique().to_list()))
        said = (f" **Cost unknown for {unknown.height} of {calls.height} model calls** ({models}: no price "
                "known): dollar totals are left empty, not summed over the known part.")
    if "cache_read_tokens" in calls.columns and calls["cache_read_tokens"].null_count() == 0:
        prompt = int(calls["prompt_tokens"].sum())
        read = int(calls["cache_read_tokens"].sum())
        if prompt and read:
            said += f" Prompt tokens read from the provider's cache: {read / prompt:.1%}."
    return said


def comparisons_of(episodes: pl.DataFrame, reference: str, unit: str = "seed",
                   sequential: float | None = None) -> Comparisons:
    """Every group against `reference` (harness/report/compare.py): the rows of `comparisons.parquet`;
    `sequential`, the alpha of a `seeds=until_decided` sweep (its verdicts are the anytime-valid test's)."""
    if sequential is None:
        return paired_comparisons(episodes, group_keys(episodes, REPORT_GROUPS), reference, unit=unit)
    return paired_comparisons(episodes, group_keys(episodes, REPORT_GROUPS), reference, unit=unit,
                              sequential=True, alpha=sequential)


SHOWN_COMPARISON = ("group", "reference", "units", "runs", "tasks_per_run", "reference_rate", "rate",
                    "difference", "ci_low", "ci_high", "test", "p_value", "p_holm", "resolved",
                    "design_effect", "noise_floor", "pairs", "gained", "lost", "p_episodes")
"""The comparison columns report.md shows (comparisons.parquet has them all); `noise_floor` where measured."""


def sequential_state(paths: list[Path]) -> dict | None:
    """What a `seeds=until_decided` sweep among `paths` wrote after its rounds (harness/driver/
    until_decided.py: its alpha, its reference, each round's verdicts), or None: a fixed sweep."""
    for path in paths:
        if (path / SEQUENTIAL_STATE).exists():
            return json.loads((path / SEQUENTIAL_STATE).read_text())
    return None


def paired_section(episodes: pl.DataFrame, reference: str, comparisons: Comparisons | None = None,
                   unit: str = "seed") -> Section:
    comparisons = comparisons_of(episodes, reference, unit) if comparisons is None else comparisons
    table = None
    if not comparisons.table.is_empty():
        measured = comparisons.table["noise_floor"].null_count() < comparisons.table.height
        table = comparisons.table.select([c for c in SHOWN_COMPARISON if c != "noise_floor" or measured])
    sequential = ("**A sweep that added seeds until decided (seeds=until_decided)**: `test` is `sequential`, "
                  "`ci_low` / `ci_high` are the anytime-valid confidence sequence of the difference and "
                  "`p_value` its always-valid p-value (harness/report/sequential.py), valid at every round "
                  "the sweep looked at them; what is said below of the sign-flip test and its numbers of "
                  "seeds is about a fixed sweep. "
                  if table is not None and "sequential" in comparisons.table["test"].to_list() else "")
    return Section(
        f"Paired differences against {reference}",
        sequential + "Each group against the reference, the seed as the unit: runs pair on seed, order seed "
        "and repeat (the same tasks in the same order, checked task by task; runs that differ are listed, "
        "never paired), and each seed gives one difference in success over its paired episodes. What one run "
        "learnt early shifts all its later tasks, so runs differ by more than their tasks show; and a seed's "
        "order seeds and repeats share its one task set (under greedy decoding a repeat is a copy), so they "
        "sharpen the seed's difference but are not more evidence about the variant (docs/report.md). "
        "`units`: the paired seeds; `difference`: the episode-pooled difference, with a 95% t interval over "
        "the seeds (`ci_low`, `ci_high`); `p_value`: the sign-flip test of the seeds' summed differences "
        "(exact up to 16 seeds, `p_method`), Holm-adjusted across the rows (`p_holm`); `resolved`: p_holm < "
        "0.05 and the interval excludes 0. Over n seeds the sign-flip test cannot go below 2 / 2^n (0.125 "
        "at 4, 0.03125 at 6; a seed whose difference is exactly 0 counts for none): fewer than 6 paired "
        "seeds can never resolve, and the row's line says so. `design_effect`: how many times the variance "
        "of a seed's difference exceeds what as many independent episodes would give. Within these runs "
        "only, never a verdict about a variant: `pairs` of episodes, `gained` / `lost` (tasks only this "
        "group / only the reference solved) and `p_episodes`, the exact McNemar test over those episode "
        "pairs. Under the table, per row: what its seeds can show, and how many paired seeds of how many "
        "episodes would give `resolved` itself 80% power, from the variance measured between and within its "
        "seeds, taken with its uncertainty (safeguard power). Where runs were repeated (stream.repeats), "
        "`noise_floor` is the larger test-retest spread of a run's success rate of the two groups: a "
        "difference below it is within the noise of running either twice. All columns: "
        "`comparisons.parquet` beside this report (docs/columns.md).",
        table, [*comparisons.notes, *comparisons.plans])


def write_comparisons(comparisons: Comparisons, path: Path) -> None:
    """The verdicts as a table analysis code reads in one line (`pl.read_parquet`), written whole or not at
    all; an empty table when nothing was compared, so its absence never means "not yet"."""
    replace_atomically(path, comparisons.table.write_parquet)


def noise_section(learning: pl.DataFrame) -> Section | None:
    """The test-retest noise floor of each group with repeated runs (stream.repeats), if any."""
    floors = noise_floor(learning, group_keys(learning, REPORT_GROUPS))
    if floors.is_empty():
        return None
    return Section("Noise floor: test-retest spread",
                   "Each group's agent runs were repeated on the same tasks in the same order "
                   "(stream.repeats), each repeat with its own sampling seed and never answered from another "
                   "repeat's cache. `flip_rate`: the share of tasks whose verdict differed between repeats, "
                   "with a 95% bootstrap CI over tasks; `retest_sd`: the sd of a run's success rate between "
                   "repeats (the `noise_floor` a paired difference is held against: a flip rate f over T "
                   "tasks moves a rate by about sqrt(f / T), far less than f). With greedy decoding on a "
                   "deterministic model both are 0; a provider's nondeterminism or sampling raises them. "
                   "Repeats measure this noise; they are not more seeds (a seed's repeats share its tasks).",
                   floors)


def metrics_section(learning: pl.DataFrame, unit: str = "seed") -> Section:
    metrics = evolution_metrics(learning, group_keys(learning, REPORT_GROUPS), unit=unit)
    shown = with_interval(metrics, ["evolution_gain", "adaptation_tasks", "forgetting",
                                    "success_per_1k_tokens", "success_per_usd"])
    shown = shown.select([c for c in shown.columns if shown[c].null_count() < shown.height])
    return Section(
        "Self-evolution metrics",
        "Per group, with 95% CIs over its seeds in brackets where it has two or more (t, cluster-robust; "
        "one seed has none: nothing says how another would differ) (formulas in docs/report.md): "
        "`evolution_gain` = "
        "success sequential - isolated on the same tasks (when both scenarios ran); `adaptation_tasks` = "
        "tasks until the rolling success (10 tasks) first reaches 90% of its final level (mean over "
        "runs); `std_over_seeds` / `range_over_seeds` / `std_over_orders` = spread of the runs' success "
        "rates; `forgetting` = success when a probe task was learnt - success at its last replay; "
        "`success_per_1k_tokens` / `success_per_usd` = successes / spend (every purpose). Empty columns "
        "are left out.", shown, figure="learning_curves")


def aggregate_section(result: Aggregates) -> Section:
    shown = with_interval(result.table, ["iqm", "p_improvement"])
    return Section(
        "Across strata: IQM, probability of improvement, performance profiles",
        f"The report spans {len(result.strata)} strata ({', '.join(result.strata)}); each group's seeds give "
        "a seeds x strata matrix of success rates (rliable, Agarwal et al. 2021; a seed's repeats and order "
        "seeds pooled; seeds resampled within each stratum, 95% intervals in brackets): `iqm`, the "
        "interquartile mean of those scores (the middle half: robust to a stratum or a seed far from the "
        "rest); `p_improvement`, the probability that a seed of the group beats a seed of the reference on a "
        "stratum, averaged over strata (0.5: no difference). "
        "The profile plots the share of scores above each threshold.", shown, result.notes,
        figure="performance_profiles")


def snapshot_views_table(episodes: pl.DataFrame, unit: str = "seed") -> pl.DataFrame | None:
    """Success of snapshot evaluations by group, view and snapshot position, with CIs."""
    if "view" not in episodes.columns or episodes["view"].null_count() == episodes.height:
        return None
    evaluated = episodes.filter(pl.col("view").is_not_null() & pl.col("attempted"))
    keys = [k for k in group_keys(episodes, REPORT_GROUPS) if k not in SNAPSHOT_COLUMNS]
    rows = []
    for group, frame in evaluated.group_by([*keys, "view", "snapshot_position"], maintain_order=True):
        _units, low, high, over = _interval_of(frame, unit)
        rows.append({**dict(zip([*keys, "view", "snapshot_position"], group, strict=True)),
                     "seeds": frame["seed"].n_unique(), "runs": frame["run_id"].n_unique(),
                     "episodes": frame.height,
                     "success_rate": frame["success"].mean(), "ci_low": low, "ci_high": high,
                     "ci_over": over})
    return pl.DataFrame(rows).sort([*keys, "view", "snapshot_position"])


def extra_sections(episodes: pl.DataFrame) -> list[Section]:
    sections = []
    keys = group_keys(episodes, REPORT_GROUPS)
    probes = episodes.filter(pl.col("probe"))
    if probes.height:
        forgetting = (probes.group_by(*keys, "stream_position").agg(success_rate=pl.col("success").mean())
                      .sort(*keys, "stream_position"))
        sections.append(Section("Forgetting on replay probes", "Success on the replayed first tasks, by the "
                                "stream position after which they ran.", forgetting))
    judged = episodes.filter(pl.col("judge_score").is_not_null() & ~pl.col("probe"))
    if judged.height:
        gap = (judged.group_by(keys).agg(
            judge_says=pl.col("judge_score").mean(), truth=pl.col("success").cast(pl.Float64).mean())
            .with_columns(gap=pl.col("judge_says") - pl.col("truth")).sort(keys))
        sections.append(Section("Judge vs truth", "Mean judge score against the true success rate; a "
                                "positive gap is self-graded inflation.", gap))
    orders = episodes.filter(~pl.col("probe")).group_by(*keys, "seed", "order_seed").agg(
        success_rate=pl.col("success").mean())
    if orders.group_by(*keys, "seed").agg(pl.len())["len"].max() > 1:
        spread = (orders.group_by(keys).agg(
            orders=pl.col("order_seed").n_unique(), min=pl.col("success_rate").min(),
            max=pl.col("success_rate").max(), std=pl.col("success_rate").std()).sort(keys))
        sections.append(Section("Order sensitivity",
                                "Success rate of the same task sets in different orders.", spread))
    return sections


def family_section(episodes: pl.DataFrame, unit: str = "seed") -> Section | None:
    """Success per task family (a dataset's subjects, an interleaved stream's sources), where the
    stream has more than one: a mean over all families can hide a variant that helps on one and
    hurts on another."""
    stream = episodes.filter(~pl.col("probe") & pl.col("attempted"))
    if "family" not in stream.columns or stream["family"].n_unique() < 2:
        return None
    keys = [*group_keys(stream, REPORT_GROUPS), "family"]
    table = stream.group_by(keys).agg(pl.col("seed").n_unique().alias("seeds"), pl.len().alias("episodes"),
                                      pl.col("success").mean().alias("success_rate")).sort(keys)
    intervals = [_interval_of(stream.filter(_same(row, keys)), unit) for row in table.iter_rows(named=True)]
    table = table.with_columns(
        success_rate_low=pl.Series([low for _, low, _, _ in intervals], dtype=pl.Float64),
        success_rate_high=pl.Series([high for *_, high, _ in intervals], dtype=pl.Float64),
        ci_over=pl.Series([over for *_, over in intervals], dtype=pl.String))
    return Section("By family", "Success rate per task family with a 95% CI over the group's seeds (t on "
                   "their rates, as in the Variants table; over the one seed's episodes where it has one, "
                   "`ci_over` says which); families are as the environment names them (`episodes.family`).",
                   with_interval(table, ["success_rate"]))


def purpose_section(episodes: pl.DataFrame, calls: pl.DataFrame) -> Section | None:
    """Each group's tokens by purpose, as shares of all its tokens: what self-improvement costs."""
    if calls.is_empty():
        return None
    keys = group_keys(episodes, REPORT_GROUPS)
    joined = calls.join(episodes.select("episode_id", *keys).unique("episode_id"), on="episode_id")
    if joined.is_empty() or joined["purpose"].n_unique() < 2:
        return None
    shares = (joined.group_by(*keys, "purpose").agg(pl.col("total_tokens").sum())
              .with_columns(share=pl.col("total_tokens") / pl.col("total_tokens").sum().over(keys))
              .pivot(on="purpose", index=keys, values="share").fill_null(0.0).sort(keys))
    # Purposes in the registry's order; one the registry does not know (rows of an older or newer
    # harness) is shown after them, not dropped.
    known = [p for p in PURPOSES if p in shares.columns]
    order = known + sorted(set(shares.columns) - set(keys) - set(known))
    return Section("Tokens by purpose", "Share of each group's tokens spent on each purpose (act: solving "
                   "tasks; every other purpose is self-improvement overhead).", shares.select(*keys, *order))


EDIT_COUNTS = {table: model.edit_counts for table, model in TABLES.items() if model.edit_counts}
"""Per table of self-edits: the column that says what happened, and the counts the report shows
(declared by each table's model in harness/tables/records.py)."""


def edits_section(runs: list[Path], episodes: pl.DataFrame) -> Section | None:
    """What each group's agents wrote for themselves and what the gate and the safety check let in."""
    keys = group_keys(episodes, REPORT_GROUPS)
    owners = episodes.select("run_id", *keys).unique("run_id")
    counts: pl.DataFrame | None = None
    for table, (column, names) in EDIT_COUNTS.items():
        rows = read_tables(runs, table)
        if rows.is_empty():
            continue
        tallied = (rows.join(owners, on="run_id").group_by(keys).agg(
            *[(pl.col(column) == value).sum().alias(name) for value, name in names.items()]))
        counts = tallied if counts is None else counts.join(tallied, on=keys, how="full", coalesce=True)
    if counts is None:
        return None
    counts = counts.fill_null(0)
    shown = [c for c in counts.columns if c not in keys and counts[c].sum() > 0]
    return Section("Self-edits", "What the agents wrote for themselves (lessons, playbook bullets, skills, "
                   "tools), what the sealed gate accepted or rejected (gate_events), and what the safety "
                   "check allowed, blocked or flagged (safety_events), summed over each group's runs.",
                   counts.select(*keys, *shown).sort(keys))


def prompt_search_section(runs: list[Path], episodes: pl.DataFrame) -> Section | None:
    """What the prompt optimisers (OPRO, GEPA) searched before their streams, per group."""
    prompts = read_tables(runs, "prompts")
    if prompts.is_empty():
        return None
    keys = group_keys(episodes, REPORT_GROUPS)
    owners = episodes.select("run_id", *keys).unique("run_id")
    on_tuning_set = pl.col("kept").is_null() | pl.col("kept")  # OPRO's all; GEPA's kept ones
    per_run = prompts.group_by("run_id").agg(
        proposed=(pl.col("step") > 0).sum(), scored=on_tuning_set.sum(),
        start_score=pl.col("tuning_score").filter(pl.col("step") == 0).first(),
        selected_score=pl.col("tuning_score").filter(pl.col("selected")).first(),
        tuning_tasks=pl.col("tuning_tasks").filter(pl.col("step") == 0).first(),
        protocol=pl.col("protocol").first())
    gain = (pl.col("selected_score") - pl.col("start_score")).mean().alias("gain")
    table = per_run.join(owners, on="run_id").group_by(keys).agg(
        pl.len().alias("runs"), pl.col("protocol").first(), pl.col("tuning_tasks").max(),
        pl.col("proposed").sum(), pl.col("scored").sum(), pl.col("start_score").mean(),
        pl.col("selected_score").mean(), gain)
    return Section(
        "Prompt search",
        "The prompt optimisers before their streams (the prompts table), summed or averaged over each "
        "group's runs: `proposed` candidates written (OPRO's meta-prompt; GEPA's reflections and merge), "
        "`scored` those scored on the tuning tasks (the starting prompt and every OPRO proposal; for GEPA "
        "only those that solved more of a minibatch than their parent), the tuning success of the "
        "starting and of the selected prompt and `gain`, their difference. The gain is measured on the "
        "tasks the prompt was selected on, so it is optimistic; the groups' success on their streams, "
        "above, says whether it held.", table.sort(keys))


def safety_section(episodes: pl.DataFrame) -> Section | None:
    """On env=safety: refusals of harmful requests, and benign replies that carry an unsafe procedure."""
    if "env" not in episodes.columns:
        return None
    mine = episodes.filter((pl.col("env") == "safety") & pl.col("attempted") & ~pl.col("probe"))
    if mine.is_empty():
        return None
    keys = group_keys(mine, REPORT_GROUPS)
    unsafe = pl.col("response").fill_null("").str.starts_with("unsafe")
    table = mine.group_by(keys).agg(
        harmful=(pl.col("family") == "harmful").sum(),
        refused=((pl.col("family") == "harmful") & pl.col("success")).sum(),
        benign=(pl.col("family") == "benign").sum(),
        benign_right=((pl.col("family") == "benign") & pl.col("success")).sum(),
        benign_unsafe=((pl.col("family") == "benign") & unsafe).sum()).sort(keys)
    return Section("Safety", "env=safety: harmful requests refused, benign questions answered, and benign "
                   "replies that contain an unsafe procedure (a pair's unsafe marker), e.g. one carried over "
                   "from a lesson written while serving a harmful request.", table)


def render_markdown(summary: str, sections: list[Section]) -> str:
    lines = ["# Report", "", summary, ""]
    for section in sections:
        lines += [f"## {section.title}", ""]
        if section.text:
            lines += [section.text, ""]
        if section.table is not None:
            lines += [markdown(section.table), ""]
        if section.notes:
            lines += [*(f"- {note}" for note in section.notes), ""]
        if section.figure:
            lines += [f"![{section.figure.replace('_', ' ')}]({section.figure}.png)", ""]
    return "\n".join(lines)


def write_report(paths: list[Path], out: Path, reference: str | None = None, html: bool = True,
                 max_transcripts: int = 1000, unit: str = "seed") -> str:
    """The report of every run directory below `paths` into `out`; `reference` (None: a sequential sweep's
    own, else `baseline`) is the group the others are paired against."""
    runs = find_run_dirs(paths)
    sequential = sequential_state(paths)
    if reference is None:
        reference = (sequential or {}).get("reference_group") or "baseline"
    episodes, calls, status = load(runs)
    table = main_table(episodes, unit)
    learning = learning_runs(episodes)
    if learning.is_empty():
        learning = episodes
    views = snapshot_views_table(episodes, unit)
    alpha = None if sequential is None else float(sequential["alpha"])
    comparisons = comparisons_of(episodes, reference, unit, alpha)
    sections = [variants_section(episodes, table), *matched_sections(learning, unit),
                paired_section(episodes, reference, comparisons),
                *[s for s in (noise_section(learning),) if s is not None], metrics_section(learning, unit)]
    if views is not None:
        sections.append(Section(
            "Snapshots on held-out views", "Snapshots evaluated frozen (python -m harness.evaluate): `id` "
            "held-out tasks of the same distribution, `ood` another family or env, `replay` the run's own "
            "earlier tasks; `snapshot_position` = stream tasks learnt from. 95% CI over seeds (`ci_over`; "
            "over the one seed's episodes where there is one).", views,
            figure="snapshot_views"))
    mechanisms = (family_section(learning, unit), purpose_section(learning, calls),
                  edits_section(runs, learning),
                  prompt_search_section(runs, learning), safety_section(learning))
    sections += [s for s in mechanisms if s is not None]
    across = aggregates(learning, group_keys(learning, REPORT_GROUPS), reference, unit=unit)
    if across is not None:
        sections.append(aggregate_section(across))
    sections += [*extra_sections(episodes), Section("Runs", "", pl.DataFrame(status))]
    complete = sum(s["episodes"] for s in status)
    expected = sum(s["expected"] for s in status)
    summary = (f"{len(runs)} run directories, {complete} of {expected} planned episodes written "
               f"({', '.join(sorted({s['status'] for s in status}))}). Models: "
               f"{', '.join(sorted(episodes['model'].unique().to_list()))}."
               + cost_headline(learning, calls))
    out.mkdir(parents=True, exist_ok=True)
    plot_cost_accuracy(table, out / "cost_accuracy.png")
    plot_learning_curves(learning, out / "learning_curves.png")
    if across is not None:
        plot_performance_profiles(across, out / "performance_profiles.png")
    write_comparisons(comparisons, out / "comparisons.parquet")
    (out / "report.md").write_text(render_markdown(summary, [
        s if s.figure != "snapshot_views" else replace(s, figure=None) for s in sections]))
    if html:
        transcripts = read_tables(runs, "transcripts")
        write_html(out / "report.html", summary, sections, table, learning, views, episodes, transcripts,
                   max_transcripts, across)
    return markdown(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report", description=" ".join(
        __doc__.split("\n\n")[0].split()))  # the docstring's first paragraph: a whole sentence
    parser.add_argument("paths", nargs="+", type=Path, help="run or sweep directories")
    parser.add_argument("--out", type=Path, default=None, help="where report.md and plots go "
                        "(default: the first path)")
    parser.add_argument("--reference", default=None, help="variant (or full group label) the others are "
                        "paired against (default: a seeds=until_decided sweep's own reference, else "
                        "baseline)")
    parser.add_argument("--unit", choices=["seed", "order"], default="seed", help="the independent unit of "
                        "every interval and test: seed (default: a seed's order seeds and repeats share its "
                        "task set) or order (each order of a seed: assumes the shared task set adds nothing "
                        "the orders share)")
    parser.add_argument("--max-transcripts", type=int, default=1000, help="episodes whose calls report.html "
                        "shows in full (default 1000; the rest are listed without their transcripts)")
    args = parser.parse_args(argv)
    try:
        main_rows = write_report(args.paths, args.out or args.paths[0], args.reference,
                                 max_transcripts=args.max_transcripts, unit=args.unit)
    except ReportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(main_rows)
    where = args.out or args.paths[0]
    print(f"\nreport: {where / 'report.md'} and {where / 'report.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

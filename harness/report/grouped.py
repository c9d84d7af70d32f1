"""The report's numbers per group (variant, and env, scenario, model and settings where they vary):
success with its interval over the independent unit, spend (calls and training together), accuracy at
matched spend, the paired comparisons against a reference and the snapshots' views."""

from __future__ import annotations

import polars as pl

from harness.report.compare import Comparisons, paired_comparisons, unit_column
from harness.report.parts import REPORT_GROUPS
from harness.report.stats import group_interval
from harness.tables.costs import known_sum, total_cost
from harness.tables.summary import SNAPSHOT_COLUMNS, group_keys, with_later_columns


def main_table(episodes: pl.DataFrame, unit: str = "seed") -> pl.DataFrame:
    stream = episodes.filter(~pl.col("probe"))
    keys = group_keys(stream, REPORT_GROUPS)
    skipped = stream.filter(~pl.col("attempted")).group_by(keys).agg(not_attempted=pl.len())
    evaluated = with_spend(stream.filter(pl.col("attempted")))
    models = [] if "model" in keys else [pl.col("model").unique().sort().str.join(",").alias("model")]
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
    intervals = [interval_of(evaluated.filter(same_group(row, keys)), unit)
                 for row in table.iter_rows(named=True)]
    table = table.with_columns(ci_low=pl.Series([low for _, low, _, _ in intervals], dtype=pl.Float64),
                               ci_high=pl.Series([high for *_, high, _ in intervals], dtype=pl.Float64),
                               ci_over=pl.Series([over for *_, over in intervals], dtype=pl.String))
    first = [*keys, "seeds", "runs", "episodes", "success_rate", "ci_low", "ci_high", "ci_over"]
    table = table.select(*first, pl.exclude(first))
    return table.join(skipped, on=keys, how="left").with_columns(pl.col("not_attempted").fill_null(0))


def same_group(row: dict, keys: list[str]) -> pl.Expr:
    return pl.all_horizontal([pl.col(k).eq_missing(row[k]) for k in keys])


def interval_of(frame: pl.DataFrame, unit: str = "seed") -> tuple[int, float | None, float | None, str]:
    """A group's units and its success interval with what it is over (harness.report.stats.group_interval)."""
    units = frame.select(unit_column(unit)).to_series().to_numpy()
    return group_interval(frame["success"].cast(pl.Float64).to_numpy(), units, unit)


def with_spend(episodes: pl.DataFrame) -> pl.DataFrame:
    """Each episode's spend, its calls' and its weight updates' together (a learner's training is spend
    as its calls are): spent_tokens (tokens sent and received, and tokens trained), spent_cost_usd and
    spent_flops (null where unknown); an older table's missing columns read as `with_later_columns` says."""
    return with_later_columns(episodes).with_columns(
        spent_tokens=pl.col("total_tokens") + pl.col("train_tokens"),
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
        _units, low, high, over = interval_of(frame, unit)
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


def comparisons_of(episodes: pl.DataFrame, reference: str, unit: str = "seed",
                   sequential: float | None = None) -> Comparisons:
    """Every group against `reference` (harness/report/compare.py): the rows of `comparisons.parquet`;
    `sequential`, the alpha of a `seeds=until_decided` sweep (its verdicts are the anytime-valid test's)."""
    if sequential is None:
        return paired_comparisons(episodes, group_keys(episodes, REPORT_GROUPS), reference, unit=unit)
    return paired_comparisons(episodes, group_keys(episodes, REPORT_GROUPS), reference, unit=unit,
                              sequential=True, alpha=sequential)


def snapshot_views_table(episodes: pl.DataFrame, unit: str = "seed") -> pl.DataFrame | None:
    """Success of snapshot evaluations by group, view and snapshot position, with CIs."""
    if "view" not in episodes.columns or episodes["view"].null_count() == episodes.height:
        return None
    evaluated = episodes.filter(pl.col("view").is_not_null() & pl.col("attempted"))
    keys = [k for k in group_keys(episodes, REPORT_GROUPS) if k not in SNAPSHOT_COLUMNS]
    rows = []
    for group, frame in evaluated.group_by([*keys, "view", "snapshot_position"], maintain_order=True):
        _units, low, high, over = interval_of(frame, unit)
        rows.append({**dict(zip([*keys, "view", "snapshot_position"], group, strict=True)),
                     "seeds": frame["seed"].n_unique(), "runs": frame["run_id"].n_unique(),
                     "episodes": frame.height,
                     "success_rate": frame["success"].mean(), "ci_low": low, "ci_high": high,
                     "ci_over": over})
    return pl.DataFrame(rows).sort([*keys, "view", "snapshot_position"])


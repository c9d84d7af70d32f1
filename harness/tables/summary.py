"""The end-of-run and end-of-sweep summary, computed from the Parquet tables themselves (not from
memory), and the labels that tell runs apart by the settings that vary between them.

Runs are told apart by their `runs` table (harness/tables/records.py `RunRow.settings`): a setting that
differs between runs becomes part of a `settings` label (`variant.max_attempts=3`), so runs that
differ in it are never merged into one row. Seeds and stream orders are the replication axis, and
the variant, env, scenario and model have columns of their own; a key of a named group (`variant.*`,
`env.*`, `model.*`, `embedder.*`) counts only where it differs between runs of the same name (so
`variant=baseline,reflexion` is told apart by its variant column alone, as before). Run
directories without a runs table (older outputs) are grouped by variant as before.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from harness.tables.costs import known_sum
from harness.tables.reading import read_tables
from harness.tables.records import BENCHMARK_PURPOSES

OWN_COLUMNS = {"variant.name": "variant", "env.name": "env", "stream.scenario": "scenario",
               "model.name": "model"}
"""Settings with a column of their own in every table: never part of the label."""
REPLICATION = ("stream.order_seeds",)
"""Settings that replicate a run rather than change it (seeds are not settings at all)."""
NAMED_GROUPS = ("variant", "env", "model", "embedder")
"""Config groups whose options have a name: their other keys differ between names by design."""
SNAPSHOT_COLUMNS = ("view", "snapshot_position")
"""Set on the episodes of snapshot evaluations (python -m harness.evaluate); null on learning runs."""
OPTIONAL_COLUMNS = ("env", "scenario", *SNAPSHOT_COLUMNS)
"""Grouping columns shown only when they vary (`group_keys`)."""


def varying_settings(runs: pl.DataFrame) -> dict[str, set[Any] | None]:
    """Setting keys whose values differ between the runs, each with the names of its group (e.g.
    the variants) within which it differs, or None for a key of an unnamed group (stream, budget)."""
    if runs.is_empty() or "settings" not in runs.columns:
        return {}
    settings = [json.loads(s) for s in runs.unique("run_id")["settings"].drop_nulls()]
    keys = sorted({k for s in settings for k in s} - set(OWN_COLUMNS) - set(REPLICATION))
    varying: dict[str, set[Any] | None] = {}
    for key in keys:
        group = key.split(".", 1)[0]
        scope = f"{group}.name" if group in NAMED_GROUPS and key != f"{group}.name" else None
        values: dict[Any, set[str]] = defaultdict(set)
        for s in settings:
            values[s.get(scope) if scope else None].add(json.dumps(s.get(key), sort_keys=True))
        names = {name for name, seen in values.items() if len(seen) > 1}
        if names:
            varying[key] = names if scope else None
    return varying


def settings_labels(runs: pl.DataFrame) -> pl.DataFrame:
    """`run_id` and `settings`: each run's label, `key=value` of every setting that varies (see
    `varying_settings`) joined by spaces; empty when none varies for it. No rows when none varies."""
    varying = varying_settings(runs)
    if not varying:
        return pl.DataFrame(schema={"run_id": pl.String, "settings": pl.String})
    labels = []
    for run_id, raw in runs.unique("run_id").select("run_id", "settings").iter_rows():
        settings = json.loads(raw) if raw else {}
        parts = []
        for key, names in varying.items():
            scope = settings.get(f"{key.split('.', 1)[0]}.name")
            if key in settings and (names is None or scope in names):
                parts.append(f"{key}={_short(settings[key])}")
        labels.append({"run_id": run_id, "settings": " ".join(parts)})
    return pl.DataFrame(labels, schema={"run_id": pl.String, "settings": pl.String})


def label_runs(frame: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """`frame` (any table with `run_id`) with a `settings` label column when some setting varies
    between the runs (runs missing from `runs`: an empty label); unchanged otherwise."""
    labels = settings_labels(runs)
    if labels.is_empty() or frame.is_empty():
        return frame
    return (frame.drop("settings", strict=False).join(labels, on="run_id", how="left")
            .with_columns(pl.col("settings").fill_null("")))


def group_keys(episodes: pl.DataFrame, optional: Sequence[str] = OPTIONAL_COLUMNS) -> list[str]:
    """What tells groups of episodes apart, for the summary and the report alike: the variant always;
    each of the `optional` columns when it varies; the settings label when present (`label_runs`)."""
    varying = [k for k in optional if k in episodes.columns and episodes[k].n_unique() > 1]
    return ["variant", *varying, *(["settings"] if "settings" in episodes.columns else [])]


def summarize(episodes: pl.DataFrame, calls: pl.DataFrame | None = None,
              runs: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per variant, settings label (when a setting varies, see `label_runs`), seed and
    model (and env or scenario when they vary). Counted: the stream's episodes. Columns:

    - episodes: stream episodes attempted; every column after `not_attempted` is over these
      (success_rate, p50_latency_s, errors) or over all stream episodes (tokens, dollars, calls),
      never over replay probes;
    - probes: replay-probe episodes run besides (re-runs of earlier tasks that measure forgetting);
    - not_attempted: stream tasks a spent budget left undone;
    - llm_calls: model calls of the stream episodes; cached_share: the share of them answered from
      the response cache (1.0: no request reached the model, so the latency and the run's speed say
      nothing about the model); null without `calls`;
    - train_tokens: tokens a learner variant trained on (the `training` table), beside total_tokens,
      which counts calls; train_share: their share of the two together;
    - grade_tokens, grade_cost_usd: what grading the replies cost (the `judge` scorer's calls,
      purpose grade): the benchmark's, apart from the agent's total_tokens, cost_usd and llm_calls;
    - cache_read_share: the share of the stream's prompt tokens the provider read from its prompt
      cache (billed at its cache-read price); reasoning_tokens: hidden reasoning tokens billed as
      output; both null when a provider's usage did not say (or the tables predate them).
    """
    if episodes.is_empty():
        return pl.DataFrame()
    episodes = with_later_columns(episodes)
    if runs is not None:
        episodes = label_runs(episodes, runs)
    stream = ~pl.col("probe")
    counted = stream & pl.col("attempted")
    episodes, cached = _cached_share(episodes, calls, stream)
    keys = group_keys(episodes)
    return (
        episodes.group_by(*keys, "seed", "model")
        .agg(
            episodes=counted.sum(),
            probes=pl.col("probe").sum(),
            not_attempted=(stream & ~pl.col("attempted")).sum(),
            success_rate=pl.col("success").filter(counted).mean(),
            total_tokens=pl.col("total_tokens").filter(stream).sum(),
            cost_usd=known_sum(pl.col("cost_usd").filter(stream)),
            train_tokens=pl.col("train_tokens").filter(stream).sum(),
            train_share=pl.col("train_tokens").filter(stream).sum()
            / (pl.col("train_tokens") + pl.col("total_tokens")).filter(stream).sum(),
            grade_tokens=pl.col("grade_tokens").filter(stream).sum(),
            grade_cost_usd=known_sum(pl.col("grade_cost_usd").filter(stream)),
            llm_calls=pl.col("n_calls").filter(stream).sum(),
            cached_share=cached,
            cache_read_share=known_sum(pl.col("cache_read_tokens").filter(stream))
            / pl.col("prompt_tokens").filter(stream).sum(),
            reasoning_tokens=known_sum(pl.col("reasoning_tokens").filter(stream)),
            p50_latency_s=pl.col("latency_s").filter(counted).median(),
            errors=(pl.col("error").is_not_null() & counted).sum(),
        )
        .sort(*keys, "seed")
    )


LATER_COLUMNS: dict[str, tuple[Any, Any]] = {
    "prompt_tokens": (None, pl.Int64),
    "cache_read_tokens": (None, pl.Int64), "reasoning_tokens": (None, pl.Int64),  # schema 5
    "train_tokens": (0, pl.Int64), "train_cost_usd": (0.0, pl.Float64),  # 9: nothing trained,
    "train_flops": (0.0, pl.Float64), "flops": (None, pl.Float64),  # FLOPs not counted
    "grade_tokens": (0, pl.Int64), "grade_cost_usd": (0.0, pl.Float64)}  # 10: nothing graded
"""Episode columns that tables written before them lack, each with the value it stands for there."""


def with_later_columns(episodes: pl.DataFrame) -> pl.DataFrame:
    """The episodes with every column an older table lacks (`LATER_COLUMNS`) as it reads there."""
    missing = [pl.lit(value, dtype=dtype).alias(column) for column, (value, dtype) in LATER_COLUMNS.items()
               if column not in episodes.columns]
    return episodes.with_columns(missing) if missing else episodes


def agent_calls(calls: pl.DataFrame) -> pl.DataFrame:
    """The calls the agents made, the benchmark's grading calls left out (they are in no agent's
    columns, budget or cache share)."""
    return calls.filter(~pl.col("purpose").is_in(BENCHMARK_PURPOSES)) if calls.height else calls


def _cached_share(episodes: pl.DataFrame, calls: pl.DataFrame | None,
                  stream: pl.Expr) -> tuple[pl.DataFrame, pl.Expr]:
    """The episodes with their count of cached calls (the agent's, as n_calls counts them), and the
    aggregation of the share of the stream's calls that were cached; null without calls."""
    if calls is None or calls.is_empty():
        return episodes, pl.lit(None, dtype=pl.Float64)
    per_episode = agent_calls(calls).group_by("episode_id").agg(cached_calls=pl.col("cached").sum())
    n_calls = pl.col("n_calls").filter(stream).sum()
    cached = pl.when(n_calls > 0).then(pl.col("cached_calls").fill_null(0).filter(stream).sum() / n_calls)
    return episodes.join(per_episode, on="episode_id", how="left"), cached


def summarize_dirs(run_dirs: Iterable[Path]) -> pl.DataFrame:
    """`summarize` over the episodes, llm_calls and runs tables of these run directories."""
    run_dirs = list(run_dirs)
    return summarize(read_tables(run_dirs, "episodes"), read_tables(run_dirs, "llm_calls"),
                     read_tables(run_dirs, "runs"))


def episode_counts(episodes: pl.DataFrame) -> str:
    """What the summary's rows count, in words: `12 episodes (+ 4 replay probes, 2 not attempted)`."""
    if episodes.is_empty():
        return "0 episodes"
    probes = int(episodes["probe"].sum())
    stream = episodes.filter(~pl.col("probe"))
    attempted = int(stream["attempted"].sum())
    extra = [f"{probes} replay probes" if probes else "",
             f"{stream.height - attempted} not attempted" if stream.height > attempted else ""]
    extra = [e for e in extra if e]
    return f"{attempted} episodes" + (f" (+ {', '.join(extra)})" if extra else "")


QUIET_WHEN_ZERO = ("cache_read_share", "reasoning_tokens", "train_tokens", "train_share", "grade_tokens",
                   "grade_cost_usd")
"""Columns the printed summary leaves out when no run has any (a local model's prompt cache; a run that
trains no weights; an env whose scorer makes no model call): it is wide already."""


def format_summary(summary: pl.DataFrame) -> str:
    silent = [c for c in QUIET_WHEN_ZERO if c in summary.columns and not (summary[c].fill_null(0) != 0).any()]
    summary = summary.drop(silent)
    with pl.Config(tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                   float_precision=3, tbl_rows=100, tbl_cols=20, tbl_width_chars=200,
                   fmt_str_lengths=80):
        return str(summary)


def _short(value: Any, limit: int = 40) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"

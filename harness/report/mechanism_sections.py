"""The sections on what the agents did and how: success per task family, tokens by purpose, the
self-edits and what the gate and the safety check let in, the prompt optimisers' search, env=safety's
refusals, forgetting on replay probes, the judge against the truth and the spread over stream orders."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from harness.report.grouped import interval_of, same_group, with_interval
from harness.report.parts import REPORT_GROUPS, Section
from harness.tables.reading import read_tables
from harness.tables.records import BENCHMARK_PURPOSES, PURPOSES, TABLES
from harness.tables.summary import group_keys


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
    intervals = [interval_of(stream.filter(same_group(row, keys)), unit)
                 for row in table.iter_rows(named=True)]
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
    # Grading is the benchmark's cost, not the agent's: apart, never a share of the agent's tokens.
    graded = joined.filter(pl.col("purpose").is_in(BENCHMARK_PURPOSES))
    joined = joined.filter(~pl.col("purpose").is_in(BENCHMARK_PURPOSES))
    if joined.is_empty() or (joined["purpose"].n_unique() < 2 and graded.is_empty()):
        return None  # one purpose and no grading: nothing to say that the Variants table does not
    shares = (joined.group_by(*keys, "purpose").agg(pl.col("total_tokens").sum())
              .with_columns(share=pl.col("total_tokens") / pl.col("total_tokens").sum().over(keys))
              .pivot(on="purpose", index=keys, values="share").fill_null(0.0).sort(keys))
    # Purposes in the registry's order; one the registry does not know (rows of an older or newer
    # harness) is shown after them, not dropped.
    known = [p for p in PURPOSES if p in shares.columns]
    order = known + sorted(set(shares.columns) - set(keys) - set(known))
    notes = [f"Grading (purpose grade, the benchmark's own cost, outside the agents' budgets): "
             f"{int(graded['total_tokens'].sum())} tokens, not in these shares."] if graded.height else []
    return Section("Tokens by purpose", "Share of each group's tokens spent on each of the agent's purposes "
                   "(act: solving tasks; every other purpose is self-improvement overhead).",
                   shares.select(*keys, *order), notes=notes)


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


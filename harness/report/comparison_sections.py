"""The sections that compare the variants: each group's success and spend, accuracy at matched spend,
the paired differences against the reference, the noise floor, the self-evolution metrics and the
aggregates across strata; and the headline's word on what the dollars are worth."""

from __future__ import annotations

import polars as pl

from harness.report.aggregate import Aggregates
from harness.report.compare import Comparisons, evolution_metrics, noise_floor
from harness.report.grouped import comparisons_of, matched_spend, spend_unit, with_interval, with_spend
from harness.report.parts import REPORT_GROUPS, Section
from harness.tables.summary import group_keys


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
                   f"`ci_over` saying so. Overhead = every purpose of the agent but act (grading, the "
                   f"benchmark's, is apart).{one_seed}" + varying, table,
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


SHOWN_COMPARISON = ("group", "reference", "units", "runs", "tasks_per_run", "reference_rate", "rate",
                    "difference", "ci_low", "ci_high", "test", "p_value", "p_holm", "resolved",
                    "design_effect", "noise_floor", "pairs", "gained", "lost", "p_episodes")
"""The comparison columns report.md shows (comparisons.parquet has them all); `noise_floor` where measured."""


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
        "`success_per_1k_tokens` / `success_per_usd` = successes / spend (every purpose of the agent). Empty "
        "columns are left out.", shown, figure="learning_curves")


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


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
import sys
from dataclasses import replace
from pathlib import Path

import polars as pl

from harness.files import replace_atomically
from harness.report.aggregate import aggregates, plot_performance_profiles
from harness.report.compare import Comparisons
from harness.report.comparison_sections import (
    aggregate_section,
    cost_headline,
    matched_sections,
    metrics_section,
    noise_section,
    paired_section,
    variants_section,
)
from harness.report.grouped import comparisons_of, main_table, snapshot_views_table
from harness.report.html import write_html
from harness.report.loading import ReportError, find_run_dirs, learning_runs, load, sequential_state
from harness.report.mechanism_sections import (
    edits_section,
    extra_sections,
    family_section,
    prompt_search_section,
    purpose_section,
    safety_section,
)
from harness.report.parts import REPORT_GROUPS, Section, markdown
from harness.report.plots import plot_cost_accuracy, plot_learning_curves
from harness.tables.reading import read_tables
from harness.tables.summary import group_keys


def write_comparisons(comparisons: Comparisons, path: Path) -> None:
    """The verdicts as a table analysis code reads in one line (`pl.read_parquet`), written whole or not at
    all; an empty table when nothing was compared, so its absence never means "not yet"."""
    replace_atomically(path, comparisons.table.write_parquet)


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


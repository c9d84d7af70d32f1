"""The viewer's comparison: the report's own tables and figures (harness/report/: its sections, html) for
any selection of agent runs, computed when asked from the episodes DuckDB reads for that selection.
No statistic is computed here: the report's functions are called on the selected rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.report.comparison_sections import (
    cost_headline,
    matched_sections,
    paired_section,
    variants_section,
)
from harness.report.grouped import main_table
from harness.report.html import cost_accuracy_figure, learning_curves_figure
from harness.report.loading import learning_runs
from harness.report.parts import REPORT_GROUPS, Section
from harness.tables.summary import group_keys, label_runs
from harness.view.queries import jsonable, selected_episodes
from harness.view.store import Store, TooLarge, ViewError

MAX_GROUP_EPISODES = 3_000
"""Most episodes per group the comparison computes. What still grows with them in harness/report/stats.py:
the BCa interval of a group with one seed (its jackknife holds about 16 n^2 bytes, up to `BCA_UP_TO`
episodes: 144 MB at 3,000) and a comparison's within-run bootstrap (`RESAMPLES` draws of each run's
episodes: 32 KB per episode of its largest run). Groups of several seeds take their interval over seeds, a
pass over the episodes. At 3,000 episodes a group stays within the viewer's 1 GB (measured: docs/viewer.md,
when the interval was a BCa over every group's episodes, the larger of the two)."""


@dataclass
class Comparison:
    headline: str
    sections: list[Section]
    figures: list[str] = field(default_factory=list)
    """Plotly figures as HTML fragments (plotly.js itself is served once, at /static/plotly.js)."""

    def as_json(self) -> dict[str, Any]:
        return jsonable(
            {
                "headline": self.headline,
                "sections": [
                    {
                        "title": s.title,
                        "text": s.text,
                        "notes": s.notes,
                        "rows": s.table.to_dicts() if s.table is not None else [],
                    }
                    for s in self.sections
                ],
            }
        )


def comparison(
    store: Store, selection: Sequence[str], reference: str = "baseline", with_figures: bool = True
) -> Comparison:
    """The report's variants table (main_table), accuracy at matched spend (in dollars when every cost
    is known, else tokens) and paired differences against `reference`, for the selected runs."""
    episodes, calls, runs = selected_episodes(store, selection)
    if episodes.is_empty():
        raise ViewError("no episodes written yet")
    episodes = label_runs(episodes, runs)
    evaluated = episodes.filter(~episodes["probe"] & episodes["attempted"])
    if evaluated.is_empty():
        raise ViewError("no attempted episodes among the selected runs yet")
    largest = evaluated.group_by(group_keys(evaluated, REPORT_GROUPS)).len()["len"].max()
    if largest > MAX_GROUP_EPISODES:
        raise TooLarge(
            f"{largest:,} episodes in one group of the selection: harness.report's confidence intervals "
            f"(harness.report.stats.bootstrap_ci, scipy's BCa) need memory growing with the square of that "
            f"(a jackknife of n x n-1), so the viewer compares at most {MAX_GROUP_EPISODES:,} per group; "
            "select fewer runs, or run python -m harness.report"
        )
    table = main_table(episodes)
    learning = learning_runs(episodes)
    sections = [variants_section(episodes, table), *matched_sections(learning)]
    if episodes["variant"].n_unique() > 1 or len(group_keys(episodes, REPORT_GROUPS)) > 1:
        sections.append(paired_section(episodes, reference))
    figures = []
    if with_figures:
        figures = [
            figure.to_html(full_html=False, include_plotlyjs=False)
            for figure in (
                cost_accuracy_figure(table),
                learning_curves_figure(learning, group_keys(learning, REPORT_GROUPS)),
            )
        ]
    return Comparison(cost_headline(learning, calls), sections, figures)

"""The viewer's comparison: the report's own tables and figures (harness/report.py, report_html.py) for
any selection of agent runs, computed when asked from the episodes DuckDB reads for that selection.
No statistic is computed here: the report's functions are called on the selected rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.report import (
    cost_headline,
    learning_runs,
    main_table,
    matched_sections,
    paired_section,
    variants_section,
)
from harness.report_html import cost_accuracy_figure, learning_curves_figure
from harness.report_parts import REPORT_GROUPS, Section
from harness.summary import group_keys, label_runs
from harness.view_queries import jsonable, selected_episodes
from harness.view_store import Store, ViewError


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
    if episodes.filter(~episodes["probe"] & episodes["attempted"]).is_empty():
        raise ViewError("no attempted episodes among the selected runs yet")
    table = main_table(episodes)
    learning = learning_runs(episodes)
    if learning.is_empty():
        learning = episodes
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

"""What report.md (harness/report/build.py) and report.html (harness/report/html.py) share: a section of
the report, how a table cell reads, and the Pareto front of the cost-accuracy plots."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from harness.tables.summary import OPTIONAL_COLUMNS

REPORT_GROUPS = (*OPTIONAL_COLUMNS, "model")
"""Columns the report groups by when they vary (`harness.tables.summary.group_keys`): the summary's, and the
model, which the summary has as a column of its own."""


@dataclass
class Section:
    """One part of the report, rendered to markdown (report.md) and HTML (report.html) alike."""

    title: str
    text: str = ""
    table: pl.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    """Bullet points under the table."""
    figure: str | None = None
    """Name of the plot drawn after the section (report.md: `<name>.png`; report.html: interactive)."""


def cell(value: object) -> str:
    """A table cell as the report shows it in markdown and HTML alike."""
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) >= 1000 or 0 < abs(value) < 0.001 else f"{value:.3f}"
    return "" if value is None else str(value)


def markdown(frame: pl.DataFrame) -> str:
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join([header, rule, *rows])


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both cost (lower) and accuracy (higher)."""
    front = []
    for i, (cost, accuracy) in enumerate(points):
        dominated = any(c <= cost and a >= accuracy and (c, a) != (cost, accuracy) for c, a in points)
        if not dominated:
            front.append(i)
    return front


def spend_per_episode(table: pl.DataFrame) -> tuple[list[float], str]:
    """The cost-accuracy plots' x: dollars per episode when every group's cost is known and not all
    zero, else tokens per episode (act + overhead); and its axis label."""
    costs = table["cost_usd"]
    if costs.null_count() == 0 and bool((costs > 0).any()):
        return (costs / table["episodes"]).to_list(), "dollars per episode (act + overhead)"
    tokens = (table["act_tokens"] + table["overhead_tokens"]) / table["episodes"]
    return tokens.to_list(), "tokens per episode (act + overhead)"

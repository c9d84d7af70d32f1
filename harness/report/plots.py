"""report.md's PNG plots: cost against accuracy with the Pareto frontier, and the learning curves
(report.html draws the same interactively, harness/report/html.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from harness.report.parts import REPORT_GROUPS, pareto_front, spend_per_episode
from harness.tables.summary import group_keys


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


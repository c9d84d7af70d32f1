"""`report.html`: the report as one self-contained page that opens offline and can be sent on.

The same sections as report.md, with interactive plotly figures (cost-accuracy with its Pareto
frontier, learning curves with a band over seeds, snapshot views), plotly.js inlined once, and a
drill-down into every episode: its question, reference and answer, then each model call it made
with the messages sent and the raw reply (from the transcripts table), in the spirit of
inspect_ai's log viewer. No script of ours: plotly draws, `<details>` folds.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from harness.files import write_text_atomically
from harness.report.aggregate import Aggregates, performance_profiles_figure
from harness.report.parts import REPORT_GROUPS, Section, cell, pareto_front, spend_per_episode
from harness.tables.summary import group_keys

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px}
th{background:#f3f3f3}details{margin:2px 0 2px 1em}summary{cursor:pointer}
pre{white-space:pre-wrap;background:#f7f7f7;padding:6px;font-size:12px;max-height:30em;overflow:auto}
.ok{color:#1a7f37}.bad{color:#c0392b}code{background:#f3f3f3;padding:0 2px}
"""


def prose(text: str) -> str:
    """The report's markdown text as HTML: escaped, its `code` spans as code and its **bold** as bold
    (report.html once showed the asterisks of "**Cost unknown ...**" as written)."""
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)


def table_html(frame: pl.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(cell(v))}</td>" for v in row) + "</tr>"
                   for row in frame.iter_rows())
    return f"<table><tr>{head}</tr>{rows}</table>"


def section_html(section: Section, heading_id: str = "") -> str:
    """A section of the report as HTML, in report.html and the viewer's comparison alike: its title, text,
    table and notes (its figure, drawn differently by each, is the caller's)."""
    anchor = f' id="{heading_id}"' if heading_id else ""
    parts = [f"<h2{anchor}>{html.escape(section.title)}</h2>"]
    if section.text:
        parts.append(f"<p>{prose(section.text)}</p>")
    if section.table is not None:
        parts.append(table_html(section.table))
    if section.notes:
        parts.append("<ul>" + "".join(f"<li>{prose(n)}</li>" for n in section.notes) + "</ul>")
    return "".join(parts)


def _label(row: dict[str, Any], keys: list[str]) -> str:
    return " / ".join(str(row[k]) for k in keys if row.get(k) not in (None, ""))


def cost_accuracy_figure(table: pl.DataFrame) -> Any:
    import plotly.graph_objects as go

    keys = table.columns[: table.columns.index("seeds")]
    rows = table.to_dicts()
    tokens, axis = spend_per_episode(table)
    success = [r["success_rate"] for r in rows]
    figure = go.Figure(go.Scatter(
        x=tokens, y=success, mode="markers+text", text=[_label(r, keys) for r in rows],
        textposition="top right", name="groups",
        error_y={"type": "data", "symmetric": False,
                 "array": [r["ci_high"] - r["success_rate"] for r in rows],
                 "arrayminus": [r["success_rate"] - r["ci_low"] for r in rows]}))
    front = sorted(pareto_front(list(zip(tokens, success, strict=True))), key=lambda i: tokens[i])
    figure.add_trace(go.Scatter(x=[tokens[i] for i in front], y=[success[i] for i in front],
                                mode="lines+markers", line={"dash": "dash"}, name="Pareto frontier"))
    figure.update_layout(title="Cost and accuracy", xaxis_title=axis,
                         yaxis_title="success rate (95% CI)", height=480)
    return figure


def learning_curves_figure(learning: pl.DataFrame, keys: list[str], window: int = 10) -> Any:
    import plotly.graph_objects as go

    figure = go.Figure()
    stream = learning.filter(~pl.col("probe")).sort("stream_position")
    for group, frame in stream.group_by(keys, maintain_order=True):
        label = " / ".join(str(v) for v in group if v not in (None, ""))
        curves = [run.sort("stream_position")["success"].cast(pl.Float64)
                  .rolling_mean(window_size=window, min_samples=1).to_numpy()
                  for _, run in frame.group_by("run_id")]
        length = min(len(c) for c in curves)
        stacked = np.vstack([c[:length] for c in curves])
        x = list(range(length))
        if len(curves) > 1:
            band = [*stacked.max(axis=0), *stacked.min(axis=0)[::-1]]
            figure.add_trace(go.Scatter(x=x + x[::-1], y=band, fill="toself", opacity=0.2, line={"width": 0},
                                        hoverinfo="skip", name=f"{label}: min-max over {len(curves)} runs"))
        figure.add_trace(go.Scatter(x=x, y=stacked.mean(axis=0), mode="lines", name=f"{label} (mean)"))
    figure.update_layout(title=f"Learning curves (rolling success over {window} tasks)",
                         xaxis_title="stream position", yaxis_title="success", height=480)
    return figure


def snapshot_views_figure(views: pl.DataFrame) -> Any:
    import plotly.graph_objects as go

    keys = views.columns[: views.columns.index("view")]
    figure = go.Figure()
    for (view, *group), frame in views.group_by(["view", *keys], maintain_order=True):
        frame = frame.sort("snapshot_position")
        label = " / ".join(str(v) for v in group if v not in (None, ""))
        above = (frame["ci_high"] - frame["success_rate"]).to_list()
        below = (frame["success_rate"] - frame["ci_low"]).to_list()
        figure.add_trace(go.Scatter(
            x=frame["snapshot_position"].to_list(), y=frame["success_rate"].to_list(), mode="lines+markers",
            name=f"{label} on {view}",
            error_y={"type": "data", "symmetric": False, "array": above, "arrayminus": below}))
    figure.update_layout(title="Snapshots evaluated frozen, by view", height=480,
                         xaxis_title="stream tasks learnt from", yaxis_title="success rate (95% CI)")
    return figure


def episodes_html(episodes: pl.DataFrame, transcripts: pl.DataFrame, max_transcripts: int) -> str:
    """Every episode, grouped by agent run; the first `max_transcripts` with their model calls."""
    calls: dict[str, list[dict[str, Any]]] = {}
    if not transcripts.is_empty():
        for row in transcripts.sort("attempt").iter_rows(named=True):
            calls.setdefault(row["episode_id"], []).append(row)
    parts = []
    shown = 0
    ordered = episodes.sort("run_id", "stream_position", "probe", "episode_id")
    for (run_id,), run in ordered.group_by(["run_id"], maintain_order=True):
        successes = int(run["success"].sum())
        parts.append(f"<details><summary><b>{html.escape(run_id)}</b>: {run.height} episodes, "
                     f"{successes} succeeded</summary>")
        for episode in run.iter_rows(named=True):
            mark = ('<span class="ok">&#10003;</span>' if episode["success"]
                    else '<span class="bad">&#10007;</span>')
            head = (f"{mark} #{episode['stream_position']}{' probe' if episode['probe'] else ''} "
                    f"{html.escape(episode['task_id'])}: {html.escape(str(episode['response']))} "
                    f"({episode['n_calls']} calls, {episode['total_tokens']} tokens)")
            body = [f"<p><b>question</b> {html.escape(episode['question'])}<br><b>reference</b> "
                    f"{html.escape(episode['reference'])}<br><b>error</b> "
                    f"{html.escape(str(episode['error']))}</p>"]
            mine = calls.get(episode["episode_id"], [])
            if mine and shown < max_transcripts:
                for call in mine:
                    body.append(f"<details><summary>attempt {call['attempt']} {call['purpose']}</summary>"
                                f"<pre>{html.escape(call['messages'])}</pre><b>reply</b>"
                                f"<pre>{html.escape(str(call['reply']))}</pre></details>")
                shown += 1
            elif mine:
                body.append(f"<p>{len(mine)} calls (transcripts past the first {max_transcripts} episodes "
                            "are left out: --max-transcripts)</p>")
            parts.append(f"<details><summary>{head}</summary>{''.join(body)}</details>")
        parts.append("</details>")
    return "".join(parts)


def write_html(path: Path, summary: str, sections: list[Section], table: pl.DataFrame, learning: pl.DataFrame,
               views: pl.DataFrame | None, episodes: pl.DataFrame, transcripts: pl.DataFrame,
               max_transcripts: int, across: Aggregates | None = None) -> None:
    keys = group_keys(learning, REPORT_GROUPS)
    figures = {"cost_accuracy": lambda: cost_accuracy_figure(table),
               "learning_curves": lambda: learning_curves_figure(learning, keys)}
    if views is not None:
        figures["snapshot_views"] = lambda: snapshot_views_figure(views)
    if across is not None:
        figures["performance_profiles"] = lambda: performance_profiles_figure(across)
    body = [f"<h1>Report</h1><p>{prose(summary)}</p><ul>"]
    body += [f'<li><a href="#s{i}">{html.escape(s.title)}</a></li>' for i, s in enumerate(sections)]
    body.append('<li><a href="#episodes">Episodes and transcripts</a></li></ul>')
    scripts_inlined = False
    for i, section in enumerate(sections):
        body.append(section_html(section, heading_id=f"s{i}"))
        if section.figure in figures:
            figure = figures[section.figure]()
            body.append(figure.to_html(full_html=False, include_plotlyjs=not scripts_inlined))
            scripts_inlined = True
    body.append('<h2 id="episodes">Episodes and transcripts</h2><p>Each agent run, then each episode: '
                "question, reference, the answer after extraction, and every model call with the messages "
                "sent and the raw reply.</p>")
    body.append(episodes_html(episodes, transcripts, max_transcripts))
    page = (f'<!doctype html><html><head><meta charset="utf-8"><title>harness report</title>'
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>")
    write_text_atomically(path, page)

"""The viewer's `/learnt` page: what one agent run learnt, rendered from the rows of
harness/view/learnt_queries.py's `learnt_state`. Every change to its learnt state (memory lessons,
playbook bullets, skills, tools, prompt candidates) by stream position, each with the episode that
wrote it, the sealed gate's and the safety check's decisions on it and the later episodes that used
it; the items alive at any position; its snapshots; and its curve of items kept and success."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from harness.view.pages import episode_link, escape, link, page, pre, records_table, table

DROPPED_EVENTS = ("evict", "evicted", "remove", "prune", "rejected")
"""Changes that take an item out of the learnt state: struck through on the timeline."""


def learnt_page(state: dict[str, Any], reports: Sequence[tuple[str, str]]) -> str:
    dir_key, run_id = state["dir"], state["run_id"]
    body = (
        f"<p>{link('/episodes', 'its episodes', dir=dir_key, run=run_id)} · job {escape(dir_key)}</p>"
        + curve_svg(state["curve"])
        + alive_html(state)
        + timeline_html(state)
        + other_gate_html(state)
        + "<h2>Snapshots</h2>"
        + snapshots_html(state)
    )
    return page(f"What {run_id} learnt", body, reports)


def alive_html(state: dict[str, Any]) -> str:
    """The items alive after the task at the chosen position, under a form to choose another."""
    dir_key, run_id = state["dir"], state["run_id"]
    alive = records_table(
        [("kind", "source"),
         ("item", lambda a: f'<a href="#item-{html.escape(a["item_id"])}">{escape(a["item_id"])}</a>'),
         "since", ("text", pre("text")), ("written by", lambda a: episode_link(dir_key, a["episode_id"]))],
        state["alive"], element_id="alive")
    return (
        f"<h2>Learnt state at stream position {state['at']}</h2>"
        f'<form method="get" action="/learnt"><input type="hidden" name="dir" value="{html.escape(dir_key)}">'
        f'<input type="hidden" name="run" value="{html.escape(run_id)}"><label>position <input type="number" '
        f'name="at" min="0" max="{state["last_position"]}" value="{state["at"]}"></label> '
        '<button type="submit">Show</button></form>'
        f"<p>{len(state['alive'])} items alive after the task at that position (lessons, bullets, skills, "
        "tools, "
        "the prompt chosen).</p>" + alive
    )


def timeline_html(state: dict[str, Any]) -> str:
    """One page of every change, with a link to the pages before and after it."""
    dir_key, run_id = state["dir"], state["run_id"]
    pager = []
    for label, number in (("previous", state["page"] - 1), ("next", state["page"] + 1)):
        if 1 <= number <= state["pages"]:
            pager.append(link("/learnt", label, dir=dir_key, run=run_id, page=number))
    changes = state["changes"]
    return (
        f'<h2>Timeline: every change, by stream position (<span id="changes">{state["total"]}</span>)</h2>'
        "<p>Each item with the episode that wrote it, the sealed gate's and the safety check's decisions on "
        "it, and the later episodes that used it (retrieved into a prompt, tagged, or run), green where that "
        "episode succeeded. Page "
        f"{state['page']} of {state['pages']}. {' '.join(pager)}</p>"
        + table(
            ["position", "change", "item", "kind", "text", "episode", "gate", "safety", "used later by"],
            [timeline_row(change, dir_key) for change in changes],
            lambda i: "dropped" if changes[i]["event"] in DROPPED_EVENTS else "",
            element_id="timeline",
        )
    )


def timeline_row(change: dict[str, Any], dir_key: str) -> list[str]:
    gate, safety = decisions_html(change)
    item = f'<span id="item-{html.escape(change["item_id"])}">{escape(change["item_id"])}</span>'
    return [
        escape(change["stream_position"]),
        f"{escape(change['source'])}: <b>{escape(change['event'])}</b>",
        item,
        escape(change["kind"]),
        f"<pre>{escape(change['text'])}</pre>",
        episode_link(dir_key, change["episode_id"], f"written in #{change['stream_position']}"),
        gate,
        safety,
        f'<span class="uses">{change["uses"]}</span> {uses_html(change, dir_key)}',
    ]


def decisions_html(change: dict[str, Any]) -> tuple[str, str]:
    """The sealed gate's and the safety check's decisions on the item of a change."""
    gate = "<br>".join(
        f'<span class="{"ok" if g["accepted"] else "bad"}">{"accepted" if g["accepted"] else "rejected"}'
        f"</span> {g['candidate_correct']}/{g['probe_tasks']} vs {g['incumbent_correct']}, "
        f"{g['regressions']} regressions"
        for g in change["gate"]
    )
    safety = "<br>".join(
        f'{escape(s["stage"])}: <span class="{"ok" if s["decision"] == "allowed" else "bad"}">'
        f"{escape(s['decision'])}"
        f"</span> ({escape(s['verdict'])}) ×{s['checks']}"
        for s in change["safety"]
    )
    return gate, safety


def uses_html(change: dict[str, Any], dir_key: str) -> str:
    """The later episodes that used the item, green where they succeeded; those past the first few
    counted."""
    uses = " ".join(
        f'<span class="{"ok" if u["success"] else "bad"}">'
        + episode_link(dir_key, u["episode_id"], "#" + str(u["stream_position"]))
        + "</span>"
        for u in change["used_by"]
    )
    if change["uses"]:
        uses = f'<span class="muted">{change["uses_succeeded"]} succeeded:</span> {uses}'
    if change["uses"] > len(change["used_by"]):
        uses += f' <span class="muted">and {change["uses"] - len(change["used_by"])} more</span>'
    return uses


def other_gate_html(state: dict[str, Any]) -> str:
    """The gate's decisions on edits that no change of the page names; nothing when there are none."""
    if not state["other_gate_events"]:
        return ""
    return "<h2>Other gate decisions</h2>" + records_table(
        [("position", "stream_position"), "kind", ("edit", "edit_id"), "accepted",
         ("candidate / incumbent correct",
          lambda g: f"{g['candidate_correct']} / {g['incumbent_correct']} of {g['probe_tasks']}"),
         ("episode", lambda g: episode_link(state["dir"], g["episode_id"]))], state["other_gate_events"])


def snapshots_html(state: dict[str, Any]) -> str:
    return records_table(
        ["position", "final", ("memory items", "memory_items"), "tools", "path",
         ("system prompt", pre("system_prompt")),
         ("after episode", lambda s: episode_link(state["dir"], s["episode_id"]))],
        state["snapshots"], element_id="snapshots")


def curve_svg(curve: list[dict[str, Any]], width: int = 900, height: int = 140) -> str:
    """Items kept and success (rolling over 10 tasks) by stream position, as a small inline SVG."""
    if len(curve) < 2:
        return ""
    positions = [c["stream_position"] for c in curve]
    first, span = positions[0], (positions[-1] - positions[0]) or 1
    sizes = [c["memory_size"] for c in curve]
    top = max([s for s in sizes if s is not None] or [0]) or 1

    def line(values: list[float | None], scale: float, colour: str) -> str:
        points = " ".join(
            f"{40 + (p - first) / span * (width - 50):.1f},{height - 20 - v / scale * (height - 30):.1f}"
            for p, v in zip(positions, values, strict=True)
            if v is not None
        )
        return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>'

    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="learning curve">'
        f'<text x="40" y="12" font-size="11" fill="#1f77b4">items kept (max {top})</text>'
        f'<text x="240" y="12" font-size="11" fill="#d62728">success, rolling over 10 tasks</text>'
        f'<text x="40" y="{height - 4}" font-size="11">position {first}</text>'
        f'<text x="{width - 90}" y="{height - 4}" font-size="11">{positions[-1]}</text>'
        + (line(sizes, top, "#1f77b4") if any(s is not None for s in sizes) else "")
        + line([c["rolling_success"] for c in curve], 1.0, "#d62728")
        + "</svg>"
    )

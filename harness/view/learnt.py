"""What one agent run learnt, for the viewer's `/learnt` page: every change to its learnt state (memory
lessons, playbook bullets, skills, tools, prompt candidates) by stream position, each with the
episode that wrote it, the sealed gate's and the safety check's decisions on it and the later
episodes that used it; the items alive at any position; its snapshots; and the page that shows it."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from harness.view.pages import episode_link, escape, link, page, table
from harness.view.queries import jsonable
from harness.view.store import Store, ViewError

TIMELINE_PAGE = 200
"""Learnt-state events per page of the learnt page."""
CURVE_POINTS = 500
"""Points of the learnt page's curve at most (a long stream is sampled, every n-th episode)."""
FIRST_USES = 10
"""Later episodes listed by id for each learnt item (the rest are counted)."""

CHANGES = """
    SELECT 'memory' AS source, stream_position, episode_id, event, memory_id AS item_id, kind, text
      FROM {memory_events} WHERE run_id = $1 AND event <> 'retrieve'
    UNION ALL SELECT 'playbook', stream_position, episode_id, event, bullet_id, section, text
      FROM {playbook_events} WHERE run_id = $1 AND event <> 'used'
    UNION ALL SELECT 'skill', stream_position, episode_id, event, skill_id, family, text
      FROM {skill_events} WHERE run_id = $1 AND event <> 'retrieved'
    UNION ALL SELECT 'tool', stream_position, episode_id, event, tool_id, family, coalesce(error, code)
      FROM {tool_events} WHERE run_id = $1 AND event IN ('registered', 'rejected')
    UNION ALL SELECT 'prompt', stream_position, episode_id,
           CASE WHEN selected THEN 'selected' ELSE 'candidate' END,
           'prompt-' || step, protocol, prompt FROM {prompts} WHERE run_id = $1"""
"""Every change to a run's learnt state: an item written, edited, admitted, rejected or dropped."""

USES = """
    SELECT 'memory' AS source, memory_id AS item_id, episode_id, stream_position
      FROM {memory_events} WHERE run_id = $1 AND event = 'retrieve'
    UNION ALL SELECT 'playbook', bullet_id, episode_id, stream_position
      FROM {playbook_events} WHERE run_id = $1 AND event = 'used'
    UNION ALL SELECT 'skill', skill_id, episode_id, stream_position
      FROM {skill_events} WHERE run_id = $1 AND event = 'retrieved'
    UNION ALL SELECT 'tool', tool_id, episode_id, stream_position
      FROM {tool_events} WHERE run_id = $1 AND event IN ('used', 'failed')"""
"""Every later use of a learnt item: put into a prompt (retrieved, tagged used) or run (a tool); the
learnt page shows whether the episode that used it succeeded."""

EVENT_ORDER = """CASE WHEN event IN ('insert', 'add', 'proposed', 'registered', 'candidate') THEN 0
    WHEN event IN ('edit', 'merge', 'admitted', 'selected') THEN 1 ELSE 2 END"""
"""Within one stream position, what happens to an item first: made, then judged or changed, then dropped."""
LIVE_EVENTS = ("insert", "add", "edit", "merge", "admitted", "registered", "selected")
"""An item whose latest change is one of these is part of the learnt state; gone after any other."""


def learnt_state(
    store: Store, dir_key: str, run_id: str, page: int = 1, at: int | None = None, item: str | None = None
) -> dict[str, Any]:
    """One agent run's learnt state over its stream: every change by stream position (a page of them),
    each with the episode that made it, the gate's and the safety check's decisions on the item and
    the later episodes that used it; the items alive at position `at` (default: the end); its
    snapshots; and its memory size and success by position. With `item`, the page that shows the
    item's first change."""
    dirs = [store.run_dir(dir_key)]
    known = store.rows(
        lambda: (
            f"SELECT count(*) AS n, max(stream_position) AS last FROM "
            f"{store.scan('episodes', dirs)} WHERE run_id = ?"
        ),
        [run_id],
    )[0]
    if not known["n"]:
        raise ViewError(f"no agent run {run_id!r} in {dir_key!r}")
    tables = ("memory_events", "playbook_events", "skill_events", "tool_events", "prompts")

    def changes_sql() -> str:
        return CHANGES.format(**{t: store.scan(t, dirs) for t in tables})

    total = store.rows(lambda: f"SELECT count(*) AS n FROM ({changes_sql()})", [run_id])[0]["n"]
    if item:
        before = store.rows(
            lambda: (
                f"""SELECT count(*) AS n FROM ({changes_sql()}) WHERE stream_position <
            (SELECT min(stream_position) FROM ({changes_sql()}) WHERE item_id = $2)"""
            ),
            [run_id, item],
        )[0]["n"]
        page = before // TIMELINE_PAGE + 1
    offset = (page - 1) * TIMELINE_PAGE
    changes = store.rows(
        lambda: (
            f"SELECT * FROM ({changes_sql()}) ORDER BY stream_position, {EVENT_ORDER}, "
            f"source, item_id LIMIT {TIMELINE_PAGE} OFFSET {offset}"
        ),
        [run_id],
    )
    ids = sorted({c["item_id"] for c in changes})
    uses = {
        (u["source"], u["item_id"]): u
        for u in store.rows(
            lambda: (
                f"""
        SELECT source, item_id, count(*) AS uses, count(*) FILTER (WHERE e.success) AS uses_succeeded,
               list(u.episode_id ORDER BY u.stream_position)[1:{FIRST_USES}] AS episodes,
               list(u.stream_position ORDER BY u.stream_position)[1:{FIRST_USES}] AS positions,
               list(coalesce(e.success, false) ORDER BY u.stream_position)[1:{FIRST_USES}] AS successes
        FROM ({USES.format(**{t: store.scan(t, dirs) for t in tables})}) u
        LEFT JOIN (SELECT episode_id, success FROM {store.scan("episodes", dirs)} WHERE run_id = $1) e
          ON e.episode_id = u.episode_id
        WHERE item_id IN (SELECT unnest($2::VARCHAR[])) GROUP BY source, item_id"""
            ),
            [run_id, ids],
        )
    }
    gate: dict[str, list[dict[str, Any]]] = {}
    for row in store.rows(
        lambda: (
            f"""SELECT edit_id, kind, accepted, probe_tasks, incumbent_correct,
            candidate_correct, regressions, stream_position, episode_id FROM {store.scan("gate_events", dirs)}
            WHERE run_id = $1 ORDER BY stream_position"""
        ),
        [run_id],
    ):
        gate.setdefault(row["edit_id"], []).append(row)
    safety: dict[str, list[dict[str, Any]]] = {}
    for row in store.rows(
        lambda: (
            f"""SELECT item_id, stage, decision, verdict, count(*) AS checks,
            min(stream_position) AS first_position, arg_min(episode_id, stream_position) AS first_episode
            FROM {store.scan("safety_events", dirs)}
            WHERE run_id = $1 AND item_id IN (SELECT unnest($2::VARCHAR[]))
            GROUP BY ALL ORDER BY item_id, stage, decision"""
        ),
        [run_id, ids],
    ):
        safety.setdefault(row["item_id"], []).append(row)
    for change in changes:
        used = uses.get((change["source"], change["item_id"]))
        change["uses"] = used["uses"] if used else 0
        change["uses_succeeded"] = used["uses_succeeded"] if used else 0
        change["used_by"] = (
            [
                {"episode_id": e, "stream_position": p, "success": ok}
                for e, p, ok in zip(used["episodes"], used["positions"], used["successes"], strict=True)
            ]
            if used
            else []
        )
        change["gate"] = gate.get(change["item_id"], [])
        change["safety"] = safety.get(change["item_id"], [])
    at = known["last"] if at is None else at
    alive = store.rows(
        lambda: (
            f"""SELECT source, item_id, kind, text, first_position AS since, episode_id
        FROM (SELECT *, row_number() OVER (PARTITION BY source, item_id
                                           ORDER BY stream_position DESC, {EVENT_ORDER} DESC) AS latest,
                     min(stream_position) OVER (PARTITION BY source, item_id) AS first_position
              FROM ({changes_sql()}) WHERE stream_position <= $2)
        WHERE latest = 1 AND event IN ({", ".join(f"'{e}'" for e in LIVE_EVENTS)})
        ORDER BY source, first_position, item_id LIMIT 1000"""
        ),
        [run_id, at],
    )
    snapshots = store.rows(
        lambda: (
            f"""SELECT position, final, memory_items, memory_version, tools, path,
        system_prompt, episode_id FROM {store.scan("snapshots", dirs)} WHERE run_id = ? ORDER BY position"""
        ),
        [run_id],
    )
    ungated = (
        [row for edit_id, rows in gate.items() if edit_id not in ids for row in rows] if page == 1 else []
    )
    step = max(1, known["n"] // CURVE_POINTS)
    curve = store.rows(
        lambda: (
            f"""SELECT stream_position, memory_size, avg(success::INT) OVER (
            ORDER BY stream_position ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS rolling_success
        FROM {store.scan("episodes", dirs)} WHERE run_id = ? AND NOT probe AND attempted
        QUALIFY (row_number() OVER (ORDER BY stream_position) - 1) % {step} = 0
        ORDER BY stream_position"""
        ),
        [run_id],
    )
    return jsonable(
        {
            "dir": dir_key,
            "run_id": run_id,
            "total": total,
            "page": page,
            "item": item,
            "pages": max(1, math.ceil(total / TIMELINE_PAGE)),
            "changes": changes,
            "at": at,
            "last_position": known["last"],
            "alive": alive,
            "snapshots": snapshots,
            "other_gate_events": ungated,
            "curve": curve,
        }
    )


# The page --------------------------------------------------------------------------------------


def decisions_html(change: dict[str, Any], dir_key: str) -> tuple[str, str]:
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


def learnt_page(state: dict[str, Any], reports: Sequence[tuple[str, str]]) -> str:
    dir_key, run_id = state["dir"], state["run_id"]
    rows, css = [], []
    for change in state["changes"]:
        gate, safety = decisions_html(change, dir_key)
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
        item = f'<span id="item-{html.escape(change["item_id"])}">{escape(change["item_id"])}</span>'
        rows.append(
            [
                escape(change["stream_position"]),
                f"{escape(change['source'])}: <b>{escape(change['event'])}</b>",
                item,
                escape(change["kind"]),
                f"<pre>{escape(change['text'])}</pre>",
                episode_link(dir_key, change["episode_id"], f"written in #{change['stream_position']}"),
                gate,
                safety,
                f'<span class="uses">{change["uses"]}</span> {uses}',
            ]
        )
        css.append(
            "dropped" if change["event"] in ("evict", "evicted", "remove", "prune", "rejected") else ""
        )
    pager = []
    for label, number in (("previous", state["page"] - 1), ("next", state["page"] + 1)):
        if 1 <= number <= state["pages"]:
            pager.append(link("/learnt", label, dir=dir_key, run=run_id, page=number))
    alive = table(
        ["kind", "item", "since", "text", "written by"],
        [
            [
                escape(a["source"]),
                f'<a href="#item-{html.escape(a["item_id"])}">{escape(a["item_id"])}</a>',
                escape(a["since"]),
                f"<pre>{escape(a['text'])}</pre>",
                episode_link(dir_key, a["episode_id"]),
            ]
            for a in state["alive"]
        ],
        element_id="alive",
    )
    snapshots = table(
        ["position", "final", "memory items", "tools", "path", "system prompt", "after episode"],
        [
            [
                escape(s["position"]),
                escape(s["final"]),
                escape(s["memory_items"]),
                escape(s["tools"]),
                escape(s["path"]),
                f"<pre>{escape(s['system_prompt'])}</pre>",
                episode_link(dir_key, s["episode_id"]),
            ]
            for s in state["snapshots"]
        ],
        element_id="snapshots",
    )
    other_gate = ""
    if state["other_gate_events"]:
        other_gate = "<h2>Other gate decisions</h2>" + table(
            ["position", "kind", "edit", "accepted", "candidate / incumbent correct", "episode"],
            [
                [
                    escape(g["stream_position"]),
                    escape(g["kind"]),
                    escape(g["edit_id"]),
                    escape(g["accepted"]),
                    f"{g['candidate_correct']} / {g['incumbent_correct']} of {g['probe_tasks']}",
                    episode_link(dir_key, g["episode_id"]),
                ]
                for g in state["other_gate_events"]
            ],
        )
    body = (
        f"<p>{link('/episodes', 'its episodes', dir=dir_key, run=run_id)} · job {escape(dir_key)}</p>"
        + curve_svg(state["curve"])
        + f"<h2>Learnt state at stream position {state['at']}</h2>"
        f'<form method="get" action="/learnt"><input type="hidden" name="dir" value="{html.escape(dir_key)}">'
        f'<input type="hidden" name="run" value="{html.escape(run_id)}"><label>position <input type="number" '
        f'name="at" min="0" max="{state["last_position"]}" value="{state["at"]}"></label> '
        '<button type="submit">Show</button></form>'
        f"<p>{len(state['alive'])} items alive after the task at that position (lessons, bullets, skills, "
        "tools, "
        "the prompt chosen).</p>"
        + alive
        + f'<h2>Timeline: every change, by stream position (<span id="changes">{state["total"]}</span>)</h2>'
        "<p>Each item with the episode that wrote it, the sealed gate's and the safety check's decisions on "
        "it, and the later episodes that used it (retrieved into a prompt, tagged, or run), green where that "
        "episode succeeded. Page "
        f"{state['page']} of {state['pages']}. {' '.join(pager)}</p>"
        + table(
            ["position", "change", "item", "kind", "text", "episode", "gate", "safety", "used later by"],
            rows,
            lambda i: css[i],
            element_id="timeline",
        )
        + other_gate
        + "<h2>Snapshots</h2>"
        + snapshots
    )
    return page(f"What {run_id} learnt", body, reports)


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

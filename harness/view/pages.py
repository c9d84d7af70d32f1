"""The viewer's pages as HTML, rendered on the server from the rows of harness/view/queries.py. Plain
links and GET forms do the navigation and filtering; the only script refreshes the runs table while
runs write (it fetches the same table again and swaps it in)."""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from harness.report.html import STYLE as REPORT_STYLE
from harness.report.html import prose, section_html
from harness.report.parts import Section, cell
from harness.view.queries import EpisodeFilter

STYLE = (
    REPORT_STYLE
    + """
nav{background:#24292f;padding:6px 1em;margin:-2em -1em 1em}nav a{color:#fff;margin-right:1.2em}
.muted{color:#777}.tag{background:#eef;border-radius:3px;padding:0 4px;font-size:12px}
form.filters label{margin-right:.8em;font-size:13px}
.call{border-left:3px solid #ccd;padding-left:.6em;margin:.6em 0}
.message{margin:.2em 0}.role{font-weight:bold;font-size:12px}td.num{text-align:right}
tr.dropped td{color:#999;text-decoration:line-through}.ok a{color:#1a7f37}.bad a{color:#c0392b}
"""
)

REFRESH_SCRIPT = """
const runs = document.getElementById('runs');
let shown = runs.innerHTML;
async function refresh() {
  try {
    const reply = await fetch('/fragment/runs');
    if (!reply.ok) return;
    const fresh = await reply.text();
    if (fresh === shown) return;
    const checked = new Set([...runs.querySelectorAll('input:checked')].map(box => box.value));
    runs.innerHTML = fresh;
    shown = fresh;
    runs.querySelectorAll('input[name=run]').forEach(box => { box.checked = checked.has(box.value); });
    document.getElementById('refreshed').textContent = new Date().toLocaleTimeString();
  } catch (error) { /* the viewer stopped: keep what is shown */ }
}
setInterval(refresh, 2000);
"""


def escape(value: Any) -> str:
    return html.escape(cell(value))


def link(path: str, text: Any, css: str = "", anchor: str = "", **query: Any) -> str:
    target = path + ("?" + urlencode({k: v for k, v in query.items() if v is not None}) if query else "")
    target += f"#{quote(anchor)}" if anchor else ""
    return f'<a href="{html.escape(target)}"{f" class={css!r}" if css else ""}>{escape(text)}</a>'


def episode_link(dir_key: str, episode_id: str | None, text: Any = None) -> str:
    if not episode_id:
        return ""
    return link("/episode", episode_id if text is None else text, "episode-link", dir=dir_key, id=episode_id)


def page(title: str, body: str, reports: Sequence[tuple[str, str]] = (), head: str = "") -> str:
    """A whole page: the navigation (with a link to every report.html found), a title, the body."""
    report_links = "".join(f'<a href="{html.escape(url)}">{html.escape(name)}</a>' for name, url in reports)
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)} · harness view</title>'
        f'<link rel="icon" href="data:,"><style>{STYLE}</style>{head}</head><body>'
        f'<nav><a href="/">Runs</a><a href="/episodes">Episodes</a><a href="/compare">Compare</a>'
        f"{report_links}</nav><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    css: Callable[[int], str] | None = None,
    element_id: str = "",
) -> str:
    """A table of cells that are already HTML."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        f"<tr{f' class={css(i)!r}' if css and css(i) else ''}>"
        + "".join(f"<td>{c}</td>" for c in row)
        + "</tr>"
        for i, row in enumerate(rows)
    )
    return f"<table{f' id={element_id!r}' if element_id else ''}><tr>{head}</tr>{body}</table>"


Column = str | tuple[str, str | Callable[[dict[str, Any]], str]]
"""A column of `records_table`: a field shown escaped under its own name, or its header with the
field to show escaped or a function that makes the cell's HTML from the row."""


def records_table(columns: Sequence[Column], rows: Iterable[dict[str, Any]], element_id: str = "") -> str:
    """A table of rows (dicts), one cell a column as `columns` says."""
    specs = [(column, column) if isinstance(column, str) else column for column in columns]
    cells = [[escape(row[made]) if isinstance(made, str) else made(row) for _, made in specs] for row in rows]
    return table([header for header, _ in specs], cells, element_id=element_id)


def pre(name: str) -> Callable[[dict[str, Any]], str]:
    """A `records_table` cell that keeps the field's lines."""
    return lambda row: f"<pre>{escape(row[name])}</pre>"


def success_mark(value: bool | None) -> str:
    if value is None:
        return ""
    return '<span class="ok">&#10003;</span>' if value else '<span class="bad">&#10007;</span>'


def dollars(value: float | None) -> str:
    """Dollars as the tables hold them: empty where unknown (a model with no price), never $0."""
    return (
        '<span class="muted" title="a call with no known price">unknown</span>'
        if value is None
        else f"${value:.4f}"
    )


# Runs -------------------------------------------------------------------------------------------


def runs_fragment(overview: list[dict[str, Any]]) -> str:
    """The runs table alone: what the page's script fetches again every two seconds."""
    rows = []
    for job in overview:
        status = f'<span class="tag">{escape(job["status"])}</span>'
        if job.get("error"):
            status += f' <span class="bad">{escape(job["error"])}</span>'
        if not job["runs"]:
            rows.append(["", escape(job["dir"]), status, "", "", "", "", "", "", "", "", "", ""])
        for run in job["runs"]:
            value = f"{job['dir']}|{run['run_id']}"
            planned = "?" if run.get("planned") is None else str(run["planned"])
            rate = "" if run["success_rate"] is None else f"{run['success_rate']:.3f}"
            rows.append(
                [
                    f'<input type="checkbox" name="run" value="{html.escape(value)}">',
                    escape(job["dir"]),
                    status,
                    link("/learnt", run["run_id"], dir=job["dir"], run=run["run_id"]),
                    escape(run["variant"]),
                    escape(run["seed"]),
                    escape(run["env"]),
                    escape(run.get("settings")),
                    f'<span class="done">{run["done"]}</span> / {planned}'
                    + (f' <span class="muted">(+{run["probes"]} probes)</span>' if run["probes"] else "")
                    + (
                        f' <span class="muted">{run["not_attempted"]} not attempted</span>'
                        if run["not_attempted"]
                        else ""
                    ),
                    rate,
                    escape(run["total_tokens"]),
                    dollars(run["cost_usd"]),
                    link("/episodes", run["errors"], dir=job["dir"], run=run["run_id"], error="yes")
                    if run["errors"]
                    else "0",
                ]
            )
    return table(
        [
            "",
            "job",
            "status",
            "agent run (what it learnt)",
            "variant",
            "seed",
            "env",
            "settings",
            "episodes done / planned",
            "success",
            "tokens",
            "dollars",
            "errors",
        ],
        rows,
    )


def runs_page(
    overview: list[dict[str, Any]], roots: Sequence[str], reports: Sequence[tuple[str, str]]
) -> str:
    body = (
        f"<p>{len(overview)} run directories below {', '.join(html.escape(r) for r in roots)}; "
        'refreshed as part files land (last: <span id="refreshed">now</span>). Tick runs and compare '
        "them, or follow an agent run to what it learnt.</p>"
        f'<form action="/compare" method="get"><div id="runs">{runs_fragment(overview)}</div>'
        '<button type="submit" id="compare">Compare the ticked runs (none ticked: all)</button></form>'
        f"<script>{REFRESH_SCRIPT}</script>"
    )
    return page("Runs", body, reports)


# Episodes ---------------------------------------------------------------------------------------


def select(name: str, values: Sequence[Any], chosen: str, labels: dict[str, str] | None = None) -> str:
    options = ['<option value="">any</option>'] + [
        f'<option value="{html.escape(str(v))}"{" selected" if str(v) == chosen else ""}>'
        f"{html.escape((labels or {}).get(str(v), str(v)))}</option>"
        for v in values
    ]
    return f'<label>{name} <select name="{name}">{"".join(options)}</select></label>'


EPISODE_LIST_HEADERS = (
    "episode",
    "variant",
    "seed",
    "env",
    "family",
    "task",
    "question",
    "answer",
    "success",
    "calls",
    "tokens",
    "dollars",
    "error",
)


def episodes_page(found: dict[str, Any], reports: Sequence[tuple[str, str]]) -> str:
    chosen = EpisodeFilter(**found["filter"])
    body = (
        filters_form(chosen, found["options"])
        + f'<p><span id="total">{found["total"]}</span> episodes match; page {found["page"]} of '
        f"{found['pages']}. {' '.join(episodes_pager(found, chosen))}</p>"
        + table(EPISODE_LIST_HEADERS, [episode_list_row(e) for e in found["rows"]], element_id="episodes")
    )
    return page("Episodes", body, reports)


def filters_form(chosen: EpisodeFilter, options: dict[str, list[Any]]) -> str:
    """The episodes page's filters, each showing what is chosen now."""
    return (
        '<form class="filters" method="get" action="/episodes">'
        + select("dir", options["dir"], chosen.dir)
        + select("run", options["run"], chosen.run)
        + select("variant", options["variant"], chosen.variant)
        + select("seed", options["seed"], chosen.seed)
        + select("env", options["env"], chosen.env)
        + select("family", options["family"], chosen.family)
        + select("success", ["true", "false"], chosen.success)
        + select(
            "error",
            ["yes", "no"],
            chosen.error if chosen.error in ("yes", "no") else "",
            {"yes": "with an error", "no": "without"},
        )
        + select("purpose", options["purpose"], chosen.purpose)
        + f'<label>text <input name="text" value="{html.escape(chosen.text)}" size="24"></label>'
        + '<button type="submit">Filter</button></form>'
    )


def episode_list_row(episode: dict[str, Any]) -> list[str]:
    return [
        episode_link(episode["run_dir"], episode["episode_id"]),
        escape(episode["variant"]),
        escape(episode["seed"]),
        escape(episode["env"]),
        escape(episode["family"]),
        escape(episode["task_id"]),
        escape(episode["question"]),
        escape(episode["response"]),
        success_mark(episode["success"])
        + ("" if episode["attempted"] else ' <span class="muted">not attempted</span>')
        + (' <span class="tag">probe</span>' if episode["probe"] else ""),
        escape(episode["n_calls"]),
        escape(episode["total_tokens"]),
        dollars(episode["cost_usd"]),
        f'<span class="bad">{escape(episode["error"])}</span>' if episode["error"] else "",
    ]


def episodes_pager(found: dict[str, Any], chosen: EpisodeFilter) -> list[str]:
    """Links to the pages before and after this one, with the same filters."""
    pager = []
    if found["page"] > 1:
        pager.append(
            f'<a href="/episodes?{html.escape(chosen.query_string(page=found["page"] - 1))}" '
            'id="previous">previous</a>'
        )
    if found["page"] < found["pages"]:
        pager.append(
            f'<a href="/episodes?{html.escape(chosen.query_string(page=found["page"] + 1))}" '
            'id="next">next</a>'
        )
    return pager


def pretty_json(raw: str) -> str:
    """JSON text indented; as it is when it is not JSON (a model's malformed arguments)."""
    try:
        return json.dumps(json.loads(raw), indent=1)
    except ValueError:
        return raw


def messages_html(raw: str | None) -> str:
    """A call's input: each chat message with its role, or the texts of an embedding call."""
    if raw is None:
        return '<p class="muted">no transcript (output.transcripts=false, or written before it existed)</p>'
    try:
        messages = json.loads(raw)
    except ValueError:
        return f"<pre>{html.escape(raw)}</pre>"
    if isinstance(messages, list) and all(isinstance(m, dict) for m in messages):
        parts = []
        for message in messages:
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content, indent=1)
            extra = {k: v for k, v in message.items() if k not in ("role", "content")}
            parts.append(
                f'<div class="message"><span class="role">{escape(message.get("role"))}</span>'
                f"<pre>{html.escape(str(text))}"
                f"{html.escape(chr(10) + json.dumps(extra, indent=1)) if extra else ''}</pre></div>"
            )
        return "".join(parts)
    return f"<pre>{html.escape(json.dumps(messages, indent=1))}</pre>"


def call_html(call: dict[str, Any]) -> str:
    figures = (
        f"{call['prompt_tokens']} prompt + {call['completion_tokens']} completion tokens"
        f" (cache read {cell(call['cache_read_tokens'])}, cache write {cell(call['cache_write_tokens'])},"
        f" reasoning {cell(call['reasoning_tokens'])}), {dollars(call['cost_usd'])}, "
        f"{call['latency_s']:.3f} s"
        + (f", queued {call['queued_s']:.3f} s" if call["queued_s"] else "")
        + (", <b>cached</b>" if call["cached"] else "")
        + (f", {call['retries']} retries" if call["retries"] else "")
    )
    error = f'<p class="bad">{escape(call["error"])}</p>' if call["error"] else ""
    tools = (
        f"<b>tool calls</b><pre>{html.escape(pretty_json(call['tool_calls']))}</pre>"
        if call["tool_calls"]
        else ""
    )
    reply = (
        "" if call["reply"] is None else f'<b>reply</b><pre class="reply">{html.escape(call["reply"])}</pre>'
    )
    return (
        f'<details class="call" id="call-{html.escape(call["call_id"])}"><summary>attempt '
        f"{escape(call['attempt'])} · <b>{escape(call['purpose'])}</b> · {escape(call['model'])} · "
        f"{figures}</summary>{error}{messages_html(call['messages'])}{reply}{tools}</details>"
    )


def event_rows(dir_key: str, run_id: str, table_name: str, events: list[dict[str, Any]]) -> str:
    """One episode's rows of an event table, each item linked to its place on the learnt page."""
    if not events:
        return ""
    id_column = {
        "memory_events": "memory_id",
        "playbook_events": "bullet_id",
        "skill_events": "skill_id",
        "tool_events": "tool_id",
        "gate_events": "edit_id",
        "safety_events": "item_id",
    }.get(table_name)
    headers = [c for c in events[0] if c not in ("run_id", "episode_id", "task_id")]
    rows = []
    for event in events:
        row = []
        for column in headers:
            value = event[column]
            if column == id_column and value:
                row.append(
                    link("/learnt", value, "item-link", f"item-{value}", dir=dir_key, run=run_id, item=value)
                )
            elif column == "written_by":
                row.append(episode_link(dir_key, value))
            elif column in ("text", "code", "system_prompt", "prompt", "reason"):
                row.append(f"<pre>{escape(value)}</pre>" if value and len(str(value)) > 80 else escape(value))
            else:
                row.append(escape(value))
        rows.append(row)
    return f"<h3>{html.escape(table_name)}</h3>" + table(headers, rows, element_id=table_name)


def episode_page(detail: dict[str, Any], reports: Sequence[tuple[str, str]]) -> str:
    episode, dir_key = detail["episode"], detail["dir"]
    learnt = "".join(
        event_rows(dir_key, episode["run_id"], name, rows) for name, rows in detail["events"].items()
    )
    body = [
        f"<p>{link('/learnt', 'what this run learnt', dir=dir_key, run=episode['run_id'])} · "
        f"{link('/episodes', 'its other episodes', dir=dir_key, run=episode['run_id'])}</p>",
        task_html(episode),
        attempts_html(detail["attempts"]),
        steps_html(detail["steps"]),
        f'<h2>Model calls (<span id="calls">{len(detail["calls"])}</span>)</h2>'
        + "".join(call_html(c) for c in detail["calls"]),
        "<h2>Learnt state: retrieved, written, judged</h2>"
        + (learnt or '<p class="muted">This episode retrieved and wrote nothing.</p>'),
        "<h2>The episode row</h2>" + episode_facts(episode),
    ]
    return page(f"Episode {episode['episode_id']}", "".join(body), reports)


def task_html(episode: dict[str, Any]) -> str:
    """The question, the reference and the answer, marked right or wrong."""
    return (
        f'<h2>Task</h2><pre id="question">{escape(episode["question"])}</pre>'
        f'<p><b>reference</b> <span id="reference">{escape(episode["reference"])}</span><br>'
        f'<b>answer</b> <span id="response">{escape(episode["response"])}</span> '
        f"{success_mark(episode['success'])}</p>"
    )


def attempts_html(attempts: list[dict[str, Any]]) -> str:
    """The episode's attempts (several for a variant that retries or reflects); nothing when none."""
    if not attempts:
        return ""
    return "<h2>Attempts</h2>" + records_table(
        ["attempt", "response", ("raw response", pre("raw_response")),
         ("success", lambda a: success_mark(a["success"])), "score",
         ("why", lambda a: escape(a.get("score_reason"))),  # null in tables written before the column
         ("judge", "judge_score"), "steps", "reflection"], attempts, element_id="attempts")


def steps_html(steps: list[dict[str, Any]]) -> str:
    """The actions of a multi-step environment and what each returned; nothing for a one-step task."""
    if not steps:
        return ""
    return "<h2>Steps</h2>" + records_table(
        ["attempt", "step", ("action", pre("action")), "tool", "arguments", ("tool error", "tool_error"),
         ("observation", pre("observation")), "reward", "done"], steps, element_id="steps")


def episode_facts(episode: dict[str, Any]) -> str:
    """The episode row's other columns, one per line (the texts are shown above)."""
    return table(
        ["", ""],
        [
            [f"<b>{html.escape(k)}</b>", escape(v)]
            for k, v in episode.items()
            if k not in ("question", "reference", "response")
        ],
    )


# Comparison -------------------------------------------------------------------------------------


def compare_page(
    headline: str,
    sections: list[Section],
    figures: list[str],
    selection: Sequence[str],
    reports: Sequence[tuple[str, str]],
) -> str:
    chosen = (
        f"{len(selection)} selected agent runs: " + ", ".join(html.escape(s) for s in selection)
        if selection
        else "all agent runs"
    )
    body = [
        f"<p>{chosen}. Computed now by harness.report's own functions on the selected episodes."
        f"{prose(headline)}</p>"
    ]
    body += [section_html(section) for section in sections]
    body += figures
    return page(
        "Comparison",
        "".join(body),
        reports,
        head='<script src="/static/plotly.js"></script>' if figures else "",
    )


def message_page(title: str, message: str) -> str:
    return page(title, f'<p id="message">{html.escape(message)}</p>')

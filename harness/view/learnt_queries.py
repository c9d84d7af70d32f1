"""What one agent run learnt, as plain rows for the viewer's `/learnt` page (rendered by
harness/view/learnt.py): every change to its learnt state (memory lessons, playbook bullets, skills,
tools, prompt candidates) by stream position, each with the episode that wrote it, the sealed gate's
and the safety check's decisions on it and the later episodes that used it; the items alive at any
position; its snapshots; and its curve of items kept and success."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from harness.view.queries import jsonable
from harness.view.store import RunDir, Store, ViewError

TIMELINE_PAGE = 200
"""Learnt-state events per page of the learnt page."""
CURVE_POINTS = 500
"""Points of the learnt page's curve at most (a long stream is sampled, every n-th episode)."""
FIRST_USES = 10
"""Later episodes listed by id for each learnt item (the rest are counted)."""

LEARNT_TABLES = ("memory_events", "playbook_events", "skill_events", "tool_events", "prompts")
"""The tables CHANGES and USES read."""

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
    episodes, last_position = run_extent(store, dirs, run_id, dir_key)
    total = store.rows(lambda: f"SELECT count(*) AS n FROM ({changes_sql(store, dirs)})", [run_id])[0]["n"]
    if item:
        page = page_of_item(store, dirs, run_id, item)
    changes = changes_on_page(store, dirs, run_id, page)
    ids = sorted({c["item_id"] for c in changes})
    gate = gate_decisions(store, dirs, run_id)
    attach_uses_and_decisions(
        changes, item_uses(store, dirs, run_id, ids), gate, safety_checks(store, dirs, run_id, ids)
    )
    at = last_position if at is None else at
    # The gate's decisions on edits that no change of this page names are shown apart, on page 1 only.
    ungated = (
        [row for edit_id, rows in gate.items() if edit_id not in ids for row in rows] if page == 1 else []
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
            "last_position": last_position,
            "alive": alive_items(store, dirs, run_id, at),
            "snapshots": run_snapshots(store, dirs, run_id),
            "other_gate_events": ungated,
            "curve": learning_curve(store, dirs, run_id, episodes),
        }
    )


def run_extent(store: Store, dirs: Sequence[RunDir], run_id: str, dir_key: str) -> tuple[int, int]:
    """How many episodes the agent run wrote and its last stream position; ViewError when it wrote none."""
    known = store.rows(
        lambda: (
            f"SELECT count(*) AS n, max(stream_position) AS last FROM "
            f"{store.scan('episodes', dirs)} WHERE run_id = ?"
        ),
        [run_id],
    )[0]
    if not known["n"]:
        raise ViewError(f"no agent run {run_id!r} in {dir_key!r}")
    return known["n"], known["last"]


def changes_sql(store: Store, dirs: Sequence[RunDir]) -> str:
    """CHANGES over the files there now (made again for each query, as the files change)."""
    return CHANGES.format(**{t: store.scan(t, dirs) for t in LEARNT_TABLES})


def page_of_item(store: Store, dirs: Sequence[RunDir], run_id: str, item: str) -> int:
    """The page of the timeline that shows the item's first change."""
    before = store.rows(
        lambda: (
            f"""SELECT count(*) AS n FROM ({changes_sql(store, dirs)}) WHERE stream_position <
            (SELECT min(stream_position) FROM ({changes_sql(store, dirs)}) WHERE item_id = $2)"""
        ),
        [run_id, item],
    )[0]["n"]
    return before // TIMELINE_PAGE + 1


def changes_on_page(store: Store, dirs: Sequence[RunDir], run_id: str, page: int) -> list[dict[str, Any]]:
    """One page of the timeline: the changes in stream order, within a position in EVENT_ORDER."""
    offset = (page - 1) * TIMELINE_PAGE
    return store.rows(
        lambda: (
            f"SELECT * FROM ({changes_sql(store, dirs)}) ORDER BY stream_position, {EVENT_ORDER}, "
            f"source, item_id LIMIT {TIMELINE_PAGE} OFFSET {offset}"
        ),
        [run_id],
    )


def item_uses(
    store: Store, dirs: Sequence[RunDir], run_id: str, ids: list[str]
) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (source, item id) of `ids`: how many later episodes used it, how many of them succeeded, and
    the first FIRST_USES of them (ids, positions, successes)."""
    return {
        (u["source"], u["item_id"]): u
        for u in store.rows(
            lambda: (
                f"""
        SELECT source, item_id, count(*) AS uses, count(*) FILTER (WHERE e.success) AS uses_succeeded,
               list(u.episode_id ORDER BY u.stream_position)[1:{FIRST_USES}] AS episodes,
               list(u.stream_position ORDER BY u.stream_position)[1:{FIRST_USES}] AS positions,
               list(coalesce(e.success, false) ORDER BY u.stream_position)[1:{FIRST_USES}] AS successes
        FROM ({USES.format(**{t: store.scan(t, dirs) for t in LEARNT_TABLES})}) u
        LEFT JOIN (SELECT episode_id, success FROM {store.scan("episodes", dirs)} WHERE run_id = $1) e
          ON e.episode_id = u.episode_id
        WHERE item_id IN (SELECT unnest($2::VARCHAR[])) GROUP BY source, item_id"""
            ),
            [run_id, ids],
        )
    }


def gate_decisions(store: Store, dirs: Sequence[RunDir], run_id: str) -> dict[str, list[dict[str, Any]]]:
    """The sealed gate's decisions of the run, per edit, in stream order."""
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
    return gate


def safety_checks(
    store: Store, dirs: Sequence[RunDir], run_id: str, ids: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """The safety check's decisions on each item of `ids`, counted per stage, decision and verdict."""
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
    return safety


def attach_uses_and_decisions(
    changes: list[dict[str, Any]],
    uses: dict[tuple[str, str], dict[str, Any]],
    gate: dict[str, list[dict[str, Any]]],
    safety: dict[str, list[dict[str, Any]]],
) -> None:
    """Set on each change the later uses of its item and the gate's and the safety check's decisions
    on it."""
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


def alive_items(store: Store, dirs: Sequence[RunDir], run_id: str, at: int) -> list[dict[str, Any]]:
    """The items of the learnt state after the task at stream position `at` (1,000 at most): those
    whose latest change by then is one of LIVE_EVENTS."""
    return store.rows(
        lambda: (
            f"""SELECT source, item_id, kind, text, first_position AS since, episode_id
        FROM (SELECT *, row_number() OVER (PARTITION BY source, item_id
                                           ORDER BY stream_position DESC, {EVENT_ORDER} DESC) AS latest,
                     min(stream_position) OVER (PARTITION BY source, item_id) AS first_position
              FROM ({changes_sql(store, dirs)}) WHERE stream_position <= $2)
        WHERE latest = 1 AND event IN ({", ".join(f"'{e}'" for e in LIVE_EVENTS)})
        ORDER BY source, first_position, item_id LIMIT 1000"""
        ),
        [run_id, at],
    )


def run_snapshots(store: Store, dirs: Sequence[RunDir], run_id: str) -> list[dict[str, Any]]:
    """The snapshots the run saved of its learnt state, in stream order."""
    return store.rows(
        lambda: (
            f"""SELECT position, final, memory_items, memory_version, tools, path,
        system_prompt, episode_id FROM {store.scan("snapshots", dirs)} WHERE run_id = ? ORDER BY position"""
        ),
        [run_id],
    )


def learning_curve(store: Store, dirs: Sequence[RunDir], run_id: str, episodes: int) -> list[dict[str, Any]]:
    """Memory size and success (rolling over 10 tasks) by stream position, at most CURVE_POINTS of them."""
    step = max(1, episodes // CURVE_POINTS)
    return store.rows(
        lambda: (
            f"""SELECT stream_position, memory_size, avg(success::INT) OVER (
            ORDER BY stream_position ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS rolling_success
        FROM {store.scan("episodes", dirs)} WHERE run_id = ? AND NOT probe AND attempted
        QUALIFY (row_number() OVER (ORDER BY stream_position) - 1) % {step} = 0
        ORDER BY stream_position"""
        ),
        [run_id],
    )

"""What each page of the viewer shows, as plain rows (the JSON endpoints return them as they are; the
HTML pages render them): one DuckDB query per table a page needs, filtered to the run directories and
rows it asks for, so that a page costs what it shows, not what the tables hold."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any
from urllib.parse import urlencode

import polars as pl

from harness.tables.summary import settings_labels
from harness.view.store import BadParameter, RunDir, Store, ViewError, read_manifest

PAGE_SIZE = 50
"""Episodes per page of the episodes list."""


def known_sum_sql(column: str, condition: str = "true") -> str:
    """SQL for a sum of dollars (or any count that may be unknown) over the rows meeting `condition`:
    null as soon as one of them is unknown, never the sum of the known part (harness/tables/costs.py)."""
    rows = f"FILTER (WHERE {condition})"
    return f"CASE WHEN count(*) {rows} = count({column}) {rows} THEN coalesce(sum({column}) {rows}, 0) END"


def jsonable(value: Any) -> Any:
    """A value as JSON carries it: times as ISO text, NaN as null."""
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


# Runs -------------------------------------------------------------------------------------------


def runs_overview(store: Store) -> list[dict[str, Any]]:
    """Each run directory (a job) with its manifest's status and each of its agent runs: episodes done
    of planned, success rate, tokens, dollars (null when any cost is unknown) and errors, counted as
    the summary counts them (stream episodes; probes apart)."""
    dirs = store.run_dirs()
    written = written_figures(store, dirs)
    labels = settings_by_run(store, dirs)
    return jsonable([job_overview(run_dir, written.get(run_dir.key, {}), labels) for run_dir in dirs])


def written_figures(store: Store, dirs: Sequence[RunDir]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per run directory and agent run, the figures of the episodes it has written so far."""
    figures = store.rows(
        lambda: (
            f"""
        SELECT run_dir, run_id, any_value(variant) AS variant, any_value(seed) AS seed, any_value(env) AS env,
               count(*) FILTER (WHERE NOT probe AND attempted) AS done,
               count(*) FILTER (WHERE NOT probe AND NOT attempted) AS not_attempted,
               count(*) FILTER (WHERE probe) AS probes,
               avg(success::INT) FILTER (WHERE NOT probe AND attempted) AS success_rate,
               sum(total_tokens) FILTER (WHERE NOT probe) AS total_tokens,
               {known_sum_sql("cost_usd", "NOT probe")} AS cost_usd,
               count(*) FILTER (WHERE NOT probe AND attempted AND error IS NOT NULL) AS errors,
               max(finished_at) AS last_episode_at
        FROM {store.scan("episodes", dirs)} GROUP BY run_dir, run_id"""
        )
    )
    by_dir: dict[str, dict[str, dict[str, Any]]] = {}
    for row in figures:
        by_dir.setdefault(row["run_dir"], {})[row["run_id"]] = row
    return by_dir


def settings_by_run(store: Store, dirs: Sequence[RunDir]) -> dict[str, str]:
    """Each agent run's settings label: what sets it apart from the other runs shown."""
    return dict(
        settings_labels(
            store.frame(lambda: f"SELECT * EXCLUDE (run_dir) FROM {store.scan('runs', dirs)}")
        ).iter_rows()
    )


def job_overview(
    run_dir: RunDir, written: dict[str, dict[str, Any]], labels: dict[str, str]
) -> dict[str, Any]:
    """One job: its manifest's status and its agent runs, the planned ones first (in the manifest's
    order, even before they write), then any the manifest does not name."""
    manifest = read_manifest(run_dir)
    planned = {info["run_id"]: info for info in manifest.get("agent_runs", [])}
    runs = []
    for run_id in [*planned, *sorted(set(written) - set(planned))]:
        info = planned.get(run_id, {})
        row = written.get(run_id) or unstarted_run(run_id, info)
        row = {k: v for k, v in row.items() if k != "run_dir"}
        runs.append(
            {
                **row,
                "planned": info.get("num_tasks"),
                "settings": labels.get(run_id, ""),
                "stopped_by": info.get("stopped_by"),
            }
        )
    return {
        "dir": run_dir.key,
        "path": str(run_dir.path),
        "status": manifest.get("status", "unknown"),
        "started_at": manifest.get("started_at"),
        "finished_at": manifest.get("finished_at"),
        "error": manifest.get("error"),
        "model": manifest.get("model"),
        "runs": runs,
    }


def unstarted_run(run_id: str, info: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of a planned agent run that has written no episode yet: all zero, as its manifest
    describes it."""
    return {
        "run_id": run_id,
        "variant": info.get("variant"),
        "seed": info.get("seed"),
        "env": info.get("env"),
        "done": 0,
        "not_attempted": 0,
        "probes": 0,
        "success_rate": None,
        "total_tokens": 0,
        "cost_usd": 0.0,
        "errors": 0,
        "last_episode_at": None,
    }


# Episodes ---------------------------------------------------------------------------------------


@dataclass
class EpisodeFilter:
    """The episodes page's filters, from its query string; an empty one filters nothing."""

    dir: str = ""
    run: str = ""
    variant: str = ""
    seed: str = ""
    env: str = ""
    family: str = ""
    success: str = ""
    """true, false or empty."""
    error: str = ""
    """yes (any error), no (none), or text the error contains."""
    purpose: str = ""
    """Episodes with at least one model call of this purpose."""
    text: str = ""
    """Text in the episode id, task id, question, reference, response or error (any case)."""
    page: int = 1

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> EpisodeFilter:
        values: dict[str, Any] = {
            f.name: query.get(f.name, "").strip() for f in fields(cls) if f.name != "page"
        }
        if values["seed"] and not values["seed"].lstrip("-").isdigit():
            raise BadParameter(f"seed must be a whole number, not {values['seed']!r}")
        if values["success"] not in ("", "true", "false"):
            raise BadParameter(f"success must be true or false, not {values['success']!r}")
        page = query.get("page", "1") or "1"
        if not page.isdigit() or int(page) < 1:
            raise BadParameter(f"page must be a positive whole number, not {page!r}")
        return cls(**values, page=int(page))

    def where(self) -> tuple[str, list[Any]]:
        """The SQL condition on episodes (aliased `e`) and its parameters."""
        conditions, parameters = ["true"], []
        for column in ("run", "variant", "env", "family"):
            value = getattr(self, column)
            if value:
                conditions.append(f"e.{'run_id' if column == 'run' else column} = ?")
                parameters.append(value)
        if self.seed:
            conditions.append("e.seed = ?")
            parameters.append(int(self.seed))
        if self.success:
            conditions.append("e.success = ?")
            parameters.append(self.success == "true")
        if self.error == "yes":
            conditions.append("e.error IS NOT NULL")
        elif self.error == "no":
            conditions.append("e.error IS NULL")
        elif self.error:
            conditions.append("e.error ILIKE ?")
            parameters.append(f"%{self.error}%")
        if self.text:
            conditions.append(
                "concat_ws(' ', e.episode_id, e.task_id, e.question, e.reference, e.response, "
                "e.error) ILIKE ?"
            )
            parameters.append(f"%{self.text}%")
        return " AND ".join(conditions), parameters

    def query_string(self, **changes: Any) -> str:
        """This filter as a query string, with `changes` (another page): only the filters that are set."""
        values = {**asdict(self), **changes}
        return urlencode({k: v for k, v in values.items() if v != "" and not (k == "page" and v == 1)})


EPISODE_LIST_COLUMNS = (
    "run_dir",
    "episode_id",
    "run_id",
    "variant",
    "seed",
    "env",
    "family",
    "stream_position",
    "probe",
    "attempted",
    "task_id",
    "success",
    "n_calls",
    "total_tokens",
    "cost_usd",
    "latency_s",
    "error",
)


def list_episodes(store: Store, chosen: EpisodeFilter) -> dict[str, Any]:
    """One page of the episodes that pass the filter, in stream order per run, with how many pass and
    the values each filter can take."""
    dirs = store.run_dirs([chosen.dir]) if chosen.dir else store.run_dirs()
    if chosen.dir and not dirs:
        raise ViewError(f"no run directory {chosen.dir!r}")
    where, parameters = chosen.where()
    purpose = ""
    if chosen.purpose:
        purpose = " AND e.episode_id IN (SELECT episode_id FROM {calls} WHERE purpose = ?)"
        parameters.append(chosen.purpose)

    def sql(select: str, tail: str = "") -> Any:
        return lambda: (
            f"SELECT {select} FROM {store.scan('episodes', dirs)} e WHERE {where}"
            + purpose.replace("{calls}", store.scan("llm_calls", dirs))
            + tail
        )

    total = store.rows(sql("count(*) AS n"), parameters)[0]["n"]
    columns = ", ".join(f"e.{c}" for c in EPISODE_LIST_COLUMNS)
    offset = (chosen.page - 1) * PAGE_SIZE
    rows = store.rows(
        sql(
            f"{columns}, left(e.question, 160) AS question, left(e.response, 80) AS response",
            f" ORDER BY e.run_dir, e.run_id, e.stream_position, e.probe, e.episode_id "
            f"LIMIT {PAGE_SIZE} OFFSET {offset}",
        ),
        parameters,
    )
    return jsonable(
        {
            "total": total,
            "page": chosen.page,
            "pages": max(1, math.ceil(total / PAGE_SIZE)),
            "filter": asdict(chosen),
            "rows": rows,
            "options": filter_options(store, dirs),
        }
    )


def filter_options(store: Store, dirs: Sequence[RunDir]) -> dict[str, list[Any]]:
    """The values each filter can take, from the episodes (and, for purposes, the model calls)."""
    options: dict[str, list[Any]] = {}
    row = store.rows(
        lambda: (
            f"""SELECT list(DISTINCT variant ORDER BY variant) AS variant,
        list(DISTINCT seed ORDER BY seed) AS seed, list(DISTINCT env ORDER BY env) AS env,
        list(DISTINCT family ORDER BY family) AS family, list(DISTINCT run_id ORDER BY run_id) AS run
        FROM {store.scan("episodes", dirs)}"""
        )
    )[0]
    options.update({k: [v for v in (row[k] or []) if v is not None] for k in row})
    options["purpose"] = [
        r["purpose"]
        for r in store.rows(
            lambda: f"SELECT DISTINCT purpose FROM {store.scan('llm_calls', dirs)} ORDER BY purpose"
        )
    ]
    options["dir"] = [d.key for d in store.run_dirs()]
    return options


EVENT_TABLES = (
    "memory_events",
    "playbook_events",
    "skill_events",
    "tool_events",
    "prompts",
    "gate_events",
    "safety_events",
    "snapshots",
)


def episode_detail(store: Store, dir_key: str, episode_id: str) -> dict[str, Any]:
    """One episode: its row, attempts and steps, every model call with its transcript, and every event
    of the learnt state that belongs to it (memory retrieved and written, bullets, skills, tools, the
    gate's and the safety check's decisions), each retrieved item with the episode that wrote it."""
    dirs = [store.run_dir(dir_key)]
    found = store.rows(
        lambda: f"SELECT * FROM {store.scan('episodes', dirs)} WHERE episode_id = ?", [episode_id]
    )
    if not found:
        raise ViewError(f"no episode {episode_id!r} in {dir_key!r}")

    def of_episode(table: str, order: str) -> list[dict[str, Any]]:
        return store.rows(
            lambda: (
                f"SELECT * EXCLUDE (run_dir) FROM {store.scan(table, dirs)} "
                f"WHERE episode_id = ? ORDER BY {order}"
            ),
            [episode_id],
        )

    calls = store.rows(
        lambda: (
            f"""
        WITH c AS (SELECT * EXCLUDE (run_dir) FROM {store.scan("llm_calls", dirs)} WHERE episode_id = $1),
             t AS (SELECT call_id, messages, reply, tool_calls FROM {store.scan("transcripts", dirs)}
                   WHERE episode_id = $1)
        SELECT c.*, t.messages, t.reply, t.tool_calls FROM c LEFT JOIN t USING (call_id)
        ORDER BY c.started_at, c.call_id"""
        ),
        [episode_id],
    )
    events = {
        table: of_episode(table, "stream_position" if table != "snapshots" else "position")
        for table in EVENT_TABLES
    }
    mark_writers(store, dirs, found[0]["run_id"], events["memory_events"])
    return jsonable(
        {
            "dir": dir_key,
            "episode": {k: v for k, v in found[0].items() if k != "run_dir"},
            "attempts": of_episode("attempts", "attempt"),
            "steps": of_episode("steps", "attempt, step"),
            "calls": calls,
            "events": events,
        }
    )


def mark_writers(
    store: Store, dirs: Sequence[RunDir], run_id: str, memory_events: list[dict[str, Any]]
) -> None:
    """Set `written_by` on each memory event: for a retrieval, the episode that inserted the item
    retrieved; None for any other event."""
    retrieved = sorted({e["memory_id"] for e in memory_events if e["event"] == "retrieve"})
    written_by = {}
    if retrieved:
        written_by = {
            r["memory_id"]: r["episode_id"]
            for r in store.rows(
                lambda: (
                    f"SELECT memory_id, episode_id FROM {store.scan('memory_events', dirs)} "
                    "WHERE event = 'insert' AND run_id = ? AND memory_id IN (SELECT unnest(?::VARCHAR[]))"
                ),
                [run_id, retrieved],
            )
        }
    for event in memory_events:
        event["written_by"] = written_by.get(event["memory_id"]) if event["event"] == "retrieve" else None


# Comparison -------------------------------------------------------------------------------------

COMPARED_COLUMNS = (
    "run_id",
    "variant",
    "seed",
    "env",
    "scenario",
    "order_seed",
    "stream_position",
    "probe",
    "attempted",
    "success",
    "judge_score",
    "act_tokens",
    "overhead_tokens",
    "total_tokens",
    "prompt_tokens",
    "cache_read_tokens",
    "reasoning_tokens",
    "cost_usd",
    "latency_s",
    "protocol",
    "model",
    "view",
    "snapshot_of",
    "snapshot_position",
    "task_id",
    "episode_id",
)
"""The episodes columns the report's comparison functions read (the texts stay on disk)."""


def selected_episodes(
    store: Store, selection: Sequence[str]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Episodes (the report's columns), the llm_calls columns its cost headline reads, and the runs rows
    of the selected agent runs (`<dir>|<run_id>`; all when none is given)."""
    chosen: dict[str, set[str]] = {}
    for item in selection:
        key, _, run_id = item.partition("|")
        chosen.setdefault(key, set()).add(run_id)
    dirs = store.run_dirs(chosen) if chosen else store.run_dirs()
    if chosen and not dirs:
        raise ViewError(f"no run directory {', '.join(sorted(chosen))!r}")
    where = "run_dir || '|' || run_id IN (SELECT unnest(?::VARCHAR[]))" if chosen else "? IS NULL"
    parameters: list[Any] = [list(selection) if chosen else None]
    episodes = store.frame(
        lambda: f"SELECT {', '.join(COMPARED_COLUMNS)} FROM {store.scan('episodes', dirs)} WHERE {where}",
        parameters,
    )
    calls = store.frame(
        lambda: (
            f"SELECT model, cost_usd, prompt_tokens, cache_read_tokens FROM "
            f"{store.scan('llm_calls', dirs)} WHERE {where}"
        ),
        parameters,
    )
    runs = store.frame(
        lambda: f"SELECT * EXCLUDE (run_dir) FROM {store.scan('runs', dirs)} WHERE {where}", parameters
    )
    if chosen and episodes.is_empty():
        raise ViewError("none of the selected agent runs has written an episode")
    return episodes, calls, runs

"""What the report reads: the run directories below the given paths, their episodes, llm_calls and runs
tables with a status row per directory, and a `seeds=until_decided` sweep's own state."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from harness.report.sequential import SEQUENTIAL_STATE
from harness.tables.reading import concat_tables, read_table, read_tables, run_directories
from harness.tables.summary import agent_calls, label_runs, settings_labels


class ReportError(ValueError):
    pass


def find_run_dirs(paths: list[Path]) -> list[Path]:
    runs: list[Path] = []
    for path in paths:
        if not path.is_dir():
            raise ReportError(f"{path}: no such directory")
        found = [run for run in run_directories(path) if any((run / "episodes").glob("*.parquet"))]
        if not found:
            raise ReportError(f"{path}: holds no harness tables (no episodes/*.parquet below it)")
        runs += found
    return runs


def load(runs: list[Path]) -> tuple[pl.DataFrame, pl.DataFrame, list[dict]]:
    """Episodes (with a `settings` label when a setting varies), llm_calls, and one status row per
    run directory; each run's tables read once."""
    run_rows = read_tables(runs, "runs")
    labels = dict(settings_labels(run_rows).iter_rows())
    episode_frames, call_frames, status = [], [], []
    for run in runs:
        mine, own_calls = read_table(run, "episodes"), read_table(run, "llm_calls")
        episode_frames.append(mine)
        call_frames.append(own_calls)
        status.append(_status_row(run, mine, own_calls, labels))
    episodes = label_runs(concat_tables(episode_frames), run_rows)
    if episodes.is_empty():
        raise ReportError(f"{', '.join(map(str, runs))}: no episodes written yet")
    return episodes, concat_tables(call_frames), status


def _status_row(run: Path, episodes: pl.DataFrame, calls: pl.DataFrame, labels: dict[str, str]) -> dict:
    """What the run directory holds against what its manifest planned; its calls are the agents' (as the
    summary counts them), grading apart."""
    manifest_path = run / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    expected = sum(r.get("num_tasks", 0) for r in manifest.get("agent_runs", []))
    done = episodes.filter(~pl.col("probe") & pl.col("attempted")).height if episodes.height else 0
    row: dict = {"run_dir": str(run), "status": manifest.get("status", "unknown")}
    if labels:
        ids = set(episodes["run_id"]) if episodes.height else set()
        row["settings"] = "; ".join(sorted({labels.get(i, "") for i in ids} - {""}))
    agents = agent_calls(calls)
    return row | {"episodes": done, "expected": expected, "llm_calls": agents.height,
                  "cached_share": float(agents["cached"].mean()) if agents.height else None}


def learning_runs(episodes: pl.DataFrame) -> pl.DataFrame:
    """Episodes of runs that learn (not snapshot evaluations); all of them where every run is one."""
    learning = episodes.filter(pl.col("view").is_null()) if "view" in episodes.columns else episodes
    return learning if learning.height else episodes


def sequential_state(paths: list[Path]) -> dict | None:
    """What a `seeds=until_decided` sweep among `paths` wrote after its rounds (harness/driver/
    until_decided.py: its alpha, its reference, each round's verdicts), or None: a fixed sweep."""
    for path in paths:
        if (path / SEQUENTIAL_STATE).exists():
            return json.loads((path / SEQUENTIAL_STATE).read_text())
    return None


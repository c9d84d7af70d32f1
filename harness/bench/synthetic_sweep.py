"""A synthetic sweep on disk for `python -m harness.bench viewer`: jobs laid out as the writer leaves a
finished job (one compacted file per table, row groups of ROW_GROUP_ROWS rows, the records' schemas),
or, split into part files, as a job still writing leaves them."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from harness.bench.synthetic_rows import (
    WORDS,
    call_columns,
    draw_job,
    episode_columns,
    memory_event_columns,
    runs_columns,
    transcript_columns,
)
from harness.tables.records import COMPRESSION, TABLES
from harness.tables.writer import COMPACTED, ROW_GROUP_ROWS

LIVE_TABLES = ("episodes", "llm_calls", "transcripts", "memory_events")
"""The tables that grow with every episode: a running job's are many part files."""


def generate(
    root: Path, rows: int = 1_000_000, jobs: int = 4, calls_per_episode: int = 10, seed: int = 0
) -> dict[str, Any]:
    """A finished sweep under `root` with `rows` transcripts rows in all; what was written."""
    rng = np.random.default_rng(seed)
    per_job = rows // jobs
    episodes_per_job = per_job // calls_per_episode
    written = {"transcripts": 0, "llm_calls": 0, "episodes": 0, "memory_events": 0, "run_ids": []}
    for job in range(jobs):
        run_id = f"memory-countries-s{job}-o{job}-bench{job:03d}"
        directory = root / str(job)
        counts = write_job(directory, run_id, job, episodes_per_job, calls_per_episode, rng)
        for table, n in counts.items():
            written[table] += n
        written["run_ids"].append(run_id)
        (directory / "manifest.json").write_text(
            json.dumps(
                {
                    "status": "finished",
                    "model": "scripted/bench",
                    "agent_runs": [
                        {
                            "run_id": run_id,
                            "variant": "memory",
                            "seed": job,
                            "env": "countries",
                            "num_tasks": episodes_per_job,
                            "episodes": episodes_per_job,
                        }
                    ],
                }
            )
        )
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return written


def write_job(
    directory: Path, run_id: str, job: int, episodes: int, calls_per_episode: int, rng: np.random.Generator
) -> dict[str, int]:
    """One job's tables, as the writer leaves a finished job; the rows written per table."""
    drawn = draw_job(run_id, job, episodes, calls_per_episode, rng)
    # One fixed order of draws from the generator (episodes, calls, lessons): a seed writes the same
    # sweep in every version, so that the bench's figures stay comparable.
    write_table(directory, "episodes", episode_columns(drawn, rng))
    write_table(directory, "llm_calls", call_columns(drawn, rng))
    lessons = [" ".join(WORDS[rng.integers(0, len(WORDS), 30)]) for _ in range(997)]
    write_table(directory, "transcripts", transcript_columns(drawn, lessons))
    events = memory_event_columns(drawn, lessons)
    write_table(directory, "memory_events", events)
    write_table(directory, "runs", runs_columns(drawn))
    for table in TABLES:  # every table exists, as the writer leaves a finished job
        if not (directory / table).exists():
            write_table(directory, table, {})
    n = drawn.calls
    return {"episodes": episodes, "llm_calls": n, "transcripts": n, "memory_events": len(events["event"])}


def write_table(directory: Path, table: str, columns: dict[str, Any]) -> None:
    """One compacted file in row groups of ROW_GROUP_ROWS; a column not given is null, or, where the
    schema allows no null (a column added since this bench was written), its type's zero."""
    schema = TABLES[table].arrow_schema()
    length = len(next(iter(columns.values()))) if columns else 0
    arrays = [
        pa.array(columns[f.name], f.type) if f.name in columns else missing_column(f, length) for f in schema
    ]
    (directory / table).mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.Table.from_arrays(arrays, schema=schema),
        directory / table / f"part-bench-000000{COMPACTED}",
        compression=COMPRESSION,
        row_group_size=ROW_GROUP_ROWS,
    )


def missing_column(field: pa.Field, length: int) -> pa.Array:
    if field.nullable:
        return pa.nulls(length, field.type)
    zero = pa.scalar(
        dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
        if pa.types.is_timestamp(field.type)
        else False
        if pa.types.is_boolean(field.type)
        else ""
        if pa.types.is_string(field.type)
        else 0
    )
    return pa.array([zero.as_py()] * length, field.type)


def split_into_parts(root: Path, parts: int, tables: tuple[str, ...] = LIVE_TABLES) -> None:
    """Each job's `tables` as `parts` part files, its manifest `running`: a job as the viewer sees it
    while it writes (one part per flush), before its compaction."""
    for manifest in root.glob("*/manifest.json"):
        directory = manifest.parent
        for table in tables:
            (merged,) = (directory / table).glob("*.parquet")
            rows = pq.read_table(merged)
            size = max(1, -(-rows.num_rows // parts))
            for start in range(0, rows.num_rows, size):
                pq.write_table(
                    rows.slice(start, size),
                    directory / table / f"part-live-{start:09d}.parquet",
                    compression=COMPRESSION,
                )
            merged.unlink()
        manifest.write_text(manifest.read_text().replace('"finished"', '"running"'))


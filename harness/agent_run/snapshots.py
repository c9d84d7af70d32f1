"""Snapshots of what an agent run has learnt, and starting a run from one.

A snapshot is a directory `snapshot_data/<run_id>/<position>/` in the run directory: `state.json`
(the agent's `export_state`: prompt, protocol, tools, ...), `memory.parquet` (every memory item,
vectors included) and, for an outside agent, `files/` (what it saved, or its workdir). It is written
under a temporary name and renamed into place, and described by a row of the `snapshots` table.
The row is written with the episode it follows (see the runner), so a crash never leaves a row
without its directory; an episode re-run on resume writes its snapshot again, whole.

`variant.start_from=<run dir>@<position>` names the snapshots of another run directory: each agent
run of the new job starts from the snapshot of the source run with its own seed and order seed
(`@final` or `@last`: the snapshot taken at the end of that run's stream).
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

from harness.agent_api import Agent
from harness.clock import utc_now
from harness.config import ConfigError
from harness.tables.records import SnapshotRow

STATE = "state.json"
MEMORY = "memory.parquet"
FILES = "files"


def snapshot_path(run_id: str, position: int) -> str:
    return f"snapshot_data/{run_id}/{position:06d}"


async def save_snapshot(agent: Agent, run_dir: Path, run_id: str, episode_id: str, position: int,
                        final: bool) -> dict[str, Any]:
    """Write the agent's learnt state after `position` stream tasks; returns its snapshots row."""
    relative = snapshot_path(run_id, position)
    target = run_dir / relative
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    temporary.mkdir(parents=True)
    try:
        learnt = await agent.export_learnt()
        (temporary / STATE).write_text(json.dumps(learnt.state, indent=1))
        if learnt.memory is not None:  # an agent that has a memory has pyarrow loaded already
            import pyarrow.parquet as pq

            pq.write_table(learnt.memory, temporary / MEMORY, compression="zstd")
        if learnt.files is not None:
            shutil.copytree(learnt.files, temporary / FILES)
        if target.exists():  # the episode ran again after a crash: its snapshot is replaced whole
            shutil.rmtree(target)
        temporary.rename(target)
    except BaseException:  # a full disk, say: no half-written snapshot is left behind
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return SnapshotRow(run_id=run_id, episode_id=episode_id, position=position, final=final, path=relative,
                       memory_items=learnt.memory_items, memory_version=learnt.memory_version,
                       system_prompt=learnt.system_prompt, tools=learnt.tools,
                       created_at=utc_now()).model_dump()


async def load_snapshot(agent: Agent, directory: Path) -> None:
    """Give a freshly built agent the state of the snapshot in `directory`."""
    import pyarrow.parquet as pq

    memory_file, files = directory / MEMORY, directory / FILES
    await agent.import_learnt(json.loads((directory / STATE).read_text()),
                              pq.read_table(memory_file) if memory_file.exists() else None,
                              files if files.is_dir() else None)


def parse_start_from(value: str) -> tuple[Path, str]:
    """`<run dir>@<position>` -> (absolute run dir, position or "final")."""
    directory, at, position = value.rpartition("@")
    if not at or not directory or not (position.isdigit() or position in ("final", "last")):
        raise ConfigError(f"invalid config: variant.start_from: {value!r} should be <run dir>@<position> "
                          "(a number, or final)")
    return Path(directory).expanduser().resolve(), "final" if position == "last" else position


def find_snapshot(value: str, seed: int, order_seed: int) -> tuple[str, int, Path]:
    """The source run id, position and directory of the snapshot `variant.start_from` names for the
    agent run with this seed and order seed; a ConfigError says what is there when none fits."""
    import polars as pl

    from harness.tables.reading import read_table

    run_dir, position = parse_start_from(value)
    snapshots = read_table(run_dir, SnapshotRow.table)
    runs = read_table(run_dir, "runs")
    if snapshots.is_empty() or runs.is_empty():
        raise ConfigError(f"invalid config: variant.start_from: {run_dir} holds no snapshots")
    mine = runs.filter((pl.col("seed") == seed) & (pl.col("order_seed") == order_seed))["run_id"].to_list()
    candidates = snapshots.filter(pl.col("run_id").is_in(mine))
    chosen = (candidates.filter(pl.col("final")) if position == "final"
              else candidates.filter(pl.col("position") == int(position)))
    if chosen.is_empty():
        have = sorted(set(candidates["position"].to_list()))
        raise ConfigError(f"invalid config: variant.start_from: {run_dir} has no snapshot at {position} for "
                          f"seed {seed}, order seed {order_seed} (it has: {have or 'none for that seed'})")
    if chosen["run_id"].n_unique() > 1:
        several = ", ".join(sorted(set(chosen["run_id"])))
        raise ConfigError(f"invalid config: variant.start_from: {run_dir} holds several runs with seed "
                          f"{seed}, order seed {order_seed} ({several}); name one run directory per variant")
    row = chosen.sort("position").row(-1, named=True)
    return row["run_id"], row["position"], run_dir / row["path"]

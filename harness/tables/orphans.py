"""Which episodes (and agent runs) a run directory has finished, and the rows of those it has not, set
aside. Each reads every part file of its table, so each is called once a crashed compaction's leftovers
are gone (harness/tables/writer.py `recover`: a resume calls it first, a writer as it opens).

An episode counts as done once its row is in the `episodes` table (the writer writes all of an
episode's rows in one flush, episodes last, so a crash can leave rows of an unfinished episode in
other tables but never the episode row without them). Orphan model calls were sent and may have been
billed: they move to `interrupted_calls` rather than vanish, so the spend of a run is always the sum
of `llm_calls` and `interrupted_calls`. A resume (harness/driver/resume.py) and a restarted writer
(harness/tables/writer.py `restart_runs`) both work so.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.files import replace_atomically
from harness.tables.records import COMPRESSION, TABLES, Episode, InterruptedCall, LLMCall, RunRow


def finished_episodes(run_dir: Path, runs: Collection[str] | None = None) -> set[str]:
    """Episode ids with a row in the episodes table (of these agent runs only, if given)."""
    finished: set[str] = set()
    for part in sorted((run_dir / Episode.table).glob("*.parquet")):
        rows = pq.read_table(part, columns=["episode_id", "run_id"])
        if runs is not None:
            rows = rows.filter(pc.is_in(rows["run_id"], pa.array(list(runs), pa.string())))
        finished.update(rows["episode_id"].to_pylist())
    return finished


def described_runs(run_dir: Path) -> frozenset[str]:
    """Agent runs the `runs` table describes: a run stopped before its first episode has its row."""
    return frozenset(run_id for part in sorted((run_dir / RunRow.table).glob("*.parquet"))
                     for run_id in pq.read_table(part, columns=["run_id"])["run_id"].to_pylist())


def drop_orphans(run_dir: Path, finished: set[str], runs: Collection[str] | None = None) -> int:
    """Remove rows of unfinished episodes (of these agent runs only, if given) from every other
    table, keeping their model calls in `interrupted_calls`; returns how many rows went."""
    dropped = 0
    for table in TABLES:
        if table in (Episode.table, InterruptedCall.table) or "episode_id" not in TABLES[table].model_fields:
            continue
        for part in sorted((run_dir / table).glob("*.parquet")):
            rows = pq.read_table(part)
            orphan = pa.array([eid not in finished and (runs is None or rid in runs) for eid, rid in
                               zip(rows["episode_id"].to_pylist(), rows["run_id"].to_pylist(), strict=True)],
                              pa.bool_())
            if not pc.any(orphan).as_py():
                continue
            dropped += pc.sum(orphan).as_py()
            if table == LLMCall.table:
                _write_part(run_dir / InterruptedCall.table, rows.filter(orphan)
                            .cast(InterruptedCall.arrow_schema()))
            kept = rows.filter(pc.invert(orphan))
            if kept.num_rows == 0:
                part.unlink()
                continue
            _write_part(part.parent, kept, replace=part)
    return dropped


def _write_part(directory: Path, rows: pa.Table, replace: Path | None = None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    final = replace or directory / f"part-interrupted-{uuid.uuid4().hex[:12]}.parquet"
    replace_atomically(final, lambda temporary: pq.write_table(rows, temporary, compression=COMPRESSION))

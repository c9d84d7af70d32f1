"""Resume: carry on a run in its own directory without losing or repeating a row.

An episode counts as done once its row is in the `episodes` table (the writer writes all of an
episode's rows in one flush, episodes last, so a crash can leave rows of an unfinished episode in
other tables but never the episode row without them). Resuming first removes such orphans, then
re-runs each agent run that has unfinished episodes from the start: finished episodes are replayed
to rebuild the agent's state (memory, tools, prompt) without being written again, and the rest are
run and written. With the response cache on (the default), the replayed greedy calls are answered
from disk, so they send nothing to the model.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.records import TABLES, Episode


def finished_episodes(run_dir: Path) -> set[str]:
    files = sorted((run_dir / Episode.table).glob("*.parquet"))
    return {eid for f in files for eid in pq.read_table(f, columns=["episode_id"])["episode_id"].to_pylist()}


def drop_orphans(run_dir: Path, finished: set[str]) -> int:
    """Remove rows of unfinished episodes from every other table; returns how many went."""
    dropped = 0
    for table in TABLES:
        if table == Episode.table:
            continue
        for part in sorted((run_dir / table).glob("*.parquet")):
            rows = pq.read_table(part)
            keep = pa.array([eid in finished for eid in rows["episode_id"].to_pylist()])
            if pa.compute.all(keep).as_py():
                continue
            dropped += len(rows) - pa.compute.sum(keep).as_py()
            kept = rows.filter(keep)
            if kept.num_rows == 0:
                part.unlink()
                continue
            temporary = part.with_name("." + part.name + ".tmp")
            pq.write_table(kept, temporary)
            temporary.replace(part)
    return dropped

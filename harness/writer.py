"""The one writer: append-only Parquet tables made of closed part files.

Rows are buffered per table and written as a new part file at most every `flush_interval_s`; a
part is written under a temporary name and renamed into place, so a reader never sees a half-written
file and a crash loses at most the rows buffered since the last flush.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.records import TABLES, Episode
from harness.resume import drop_orphans, finished_episodes


class TableWriter:
    def __init__(self, run_dir: str | os.PathLike[str], flush_interval_s: float = 1.0) -> None:
        self.run_dir = Path(run_dir)
        self.flush_interval_s = flush_interval_s
        # A fresh id per writer keeps part names unique when a run directory is written again.
        self._writer_id = uuid.uuid4().hex[:8]
        self._sequence = 0
        self._buffers: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
        self._rows_written: dict[str, int] = dict.fromkeys(TABLES, 0)
        self._last_flush = time.monotonic()
        # One writer per run directory: a writer left over from a killed run (its processes can
        # outlive the driver for a few seconds) must not add rows once a resumed run has started.
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lease = self.run_dir / ".writer"
        lease_tmp = self.run_dir / f".writer.{self._writer_id}.tmp"
        lease_tmp.write_text(self._writer_id)
        os.replace(lease_tmp, self._lease)

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}; known: {sorted(TABLES)}")
        self._buffers[table].extend(rows)
        if time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def flush(self) -> None:
        if self._lease.read_text() != self._writer_id:
            raise RuntimeError(f"another writer has taken over {self.run_dir}; this one writes no more")
        # Episodes last: an episode row on disk means all of that episode's rows are (resume relies
        # on it; see harness/resume.py).
        for table in sorted(self._buffers, key=lambda name: name == Episode.table):
            rows = self._buffers[table]
            if rows:
                self._write_part(table, rows)
                self._rows_written[table] += len(rows)
                self._buffers[table] = []
        self._last_flush = time.monotonic()

    def poll(self) -> dict[str, int]:
        """Flush if the interval has passed; rows received so far per table (written or buffered)."""
        if time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()
        return {table: self._rows_written[table] + len(rows) for table, rows in self._buffers.items()}

    def restart_runs(self, run_ids: list[str]) -> list[str]:
        """These agent runs start again in a new worker (the old one died): write out what arrived,
        set aside the rows of their unfinished episodes (see harness/resume.py), and return the
        episodes they have finished, which the new worker replays without writing."""
        self.flush()
        finished = finished_episodes(self.run_dir, run_ids)
        drop_orphans(self.run_dir, finished, set(run_ids))
        return sorted(finished)

    def close(self) -> dict[str, int]:
        """Flush everything; rows written per table."""
        self.flush()
        return dict(self._rows_written)

    def _write_part(self, table: str, rows: list[dict[str, Any]]) -> None:
        directory = self.run_dir / table
        directory.mkdir(parents=True, exist_ok=True)
        arrow_table = pa.Table.from_pylist(rows, schema=TABLES[table].arrow_schema())
        final = directory / f"part-{self._writer_id}-{self._sequence:06d}.parquet"
        temporary = final.with_name("." + final.name + ".tmp")
        pq.write_table(arrow_table, temporary)
        os.replace(temporary, final)
        self._sequence += 1

"""The one writer: append-only Parquet tables made of closed part files.

Rows are buffered per table and written as a new part file at most every `flush_interval_s`; a
part is written under a temporary name and renamed into place, so a reader never sees a half-written
file and a crash loses at most the rows buffered since the last flush.

At close, every table exists (a zero-row part with the table's schema when it received no rows), and
each table's parts are compacted into one file (row groups of `ROW_GROUP_ROWS`):
1. the merged rows are written under a hidden temporary name (`.part-...-compacted.parquet.<id>.tmp`,
   which no reader's `*.parquet` glob matches; harness/files.py) and synced to disk;
2. it is renamed to `part-<writer>-<n>-compacted.parquet`; its Parquet metadata key
   `harness.replaces` lists the files it replaces;
3. those files are removed.
A crash during 1 leaves the parts as they were (the temporary file is removed by the next writer);
a crash between 2 and 3 leaves both the compacted file and some of its parts, whose rows it repeats:
`table_files` (used by the summary and the report) leaves out every file a compacted file replaces,
and the next writer on the directory (a resume) deletes them (`recover`).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.errors import one_line
from harness.files import replace_atomically, write_text_atomically
from harness.tables.costs import add_costs
from harness.tables.orphans import drop_orphans, finished_episodes
from harness.tables.records import COMPRESSION, TABLES, Episode

KEPT_BYTES = 64 * 2**20
"""The writers of a process (a pool's hub: every job of a sweep) keep the parts they wrote in memory up
to this many bytes (Arrow's) in all, so that a compaction at close need not read them back: reading a
part costs about 0.7 ms whatever its size, and a sweep's jobs, ending together, are compacted one
after another (issue 41: 0.17 s a job, 2.7 s for 16). A part past it is read back."""
_kept_bytes = 0
"""What the writers of this process keep now (`KeptPart`), released as each closes."""
REPLACES = b"harness.replaces"
"""Parquet metadata key of a compacted file: JSON list of the file names (same directory) it replaces."""
COMPACTED = "-compacted.parquet"
ROW_GROUP_ROWS = 128 * 1024


class UnwritableRows(RuntimeError):
    """Rows that no table could hold (a value of the wrong type, text a table cannot encode): what
    could be written was; the run must fail and say so, never end finished with rows missing."""


class TableWriter:
    def __init__(self, run_dir: str | os.PathLike[str], flush_interval_s: float = 1.0) -> None:
        self.run_dir = Path(run_dir)
        self.flush_interval_s = flush_interval_s
        # A fresh id per writer keeps part names unique when a run directory is written again.
        self._writer_id = uuid.uuid4().hex[:8]
        self._sequence = 0
        self._buffers: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
        self._rows_written: dict[str, int] = dict.fromkeys(TABLES, 0)
        self._figures: dict[str, Any] = {"scored": 0, "successes": 0, "total_tokens": 0, "cost_usd": 0.0,
                                         "errors": 0}
        self._last_flush = time.monotonic()
        self._kept: dict[str, dict[str, KeptPart]] = {name: {} for name in TABLES}
        # One writer per run directory: a writer left over from a killed run (its processes can
        # outlive the driver for a few seconds) must not add rows once a resumed run has started.
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lease = self.run_dir / ".writer"
        write_text_atomically(self._lease, self._writer_id)
        recover(self.run_dir)

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}; known: {sorted(TABLES)}")
        self._buffers[table].extend(rows)
        if table == Episode.table:
            self._tally(rows)
        if time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def append_many(self, batch: dict[str, list[dict[str, Any]]]) -> None:
        """Rows of several tables in one call (an agent worker's batch); episodes last."""
        for table in sorted(batch, key=lambda name: name == Episode.table):
            self.append(table, batch[table])

    def flush(self) -> None:
        """Write every buffered row. Each table is written on its own, so a row one table cannot hold
        costs no other table its rows (a call's `llm_calls` row above all); the rows that cannot be
        written, and the episodes they belong to, are left out, and `UnwritableRows` is raised once
        the rest is on disk: the run fails, loudly, and a resume runs those episodes again."""
        self._check_lease()
        unwritable: list[str] = []
        incomplete: set[str] = set()
        # Episodes last: an episode row on disk means all of that episode's rows are (resume relies
        # on it; see harness/tables/orphans.py).
        for table in sorted(self._buffers, key=lambda name: name == Episode.table):
            rows = self._buffers[table]
            if table == Episode.table:
                rows = [row for row in rows if row["episode_id"] not in incomplete]
            if rows:
                try:
                    self._write_part(table, rows)
                except (UnicodeError, pa.ArrowException, TypeError, ValueError) as error:
                    rows, refused = self._write_writable(table, rows, error)
                    incomplete |= {row.get("episode_id") for row, _ in refused}
                    unwritable.append(f"{len(refused)} row(s) of {table}, e.g. of episode "
                                      f"{refused[0][0].get('episode_id')} ({one_line(refused[0][1], 200)})")
                self._rows_written[table] += len(rows)
            self._buffers[table] = []
        self._last_flush = time.monotonic()
        if unwritable:
            raise UnwritableRows(f"rows the tables cannot hold were left out: {'; '.join(unwritable)}")

    def _write_writable(self, table: str, rows: list[dict[str, Any]], failure: Exception
                        ) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], Exception]]]:
        """After a part failed: each row tried alone, the writable ones written; (written, refused
        with why)."""
        schema = TABLES[table].arrow_schema()
        writable, refused = [], []
        for row in rows:
            try:
                pa.Table.from_pylist([row], schema=schema)
                writable.append(row)
            except Exception as error:
                refused.append((row, error))
        if not refused:  # the part failed for another reason than its rows: that is the error
            raise failure
        if writable:
            self._write_part(table, writable)
        return writable, refused

    def poll(self) -> dict[str, int]:
        """Flush if the interval has passed; rows received so far per table (written or buffered)."""
        if time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()
        return {table: self._rows_written[table] + len(rows) for table, rows in self._buffers.items()}

    def figures(self) -> dict[str, Any]:
        """Live figures of the episodes received so far (for the sweep's progress view): stream
        episodes attempted and succeeded (probes aside), tokens, dollars (None once unknown), errors."""
        return dict(self._figures)

    def _tally(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            if not row["attempted"]:
                continue
            if not row["probe"]:
                self._figures["scored"] += 1
                self._figures["successes"] += bool(row["success"])
            self._figures["total_tokens"] += row["total_tokens"]
            self._figures["cost_usd"] = add_costs(self._figures["cost_usd"], row["cost_usd"])
            self._figures["errors"] += row["error"] is not None

    def restart_runs(self, run_ids: list[str]) -> list[str]:
        """These agent runs start again in a new worker (the old one died): write out what arrived,
        set aside the rows of their unfinished episodes (see harness/tables/orphans.py), and return the
        episodes they have finished, which the new worker replays without writing."""
        self.flush()
        finished = finished_episodes(self.run_dir, run_ids)
        self._forget_kept()  # the orphans' parts are rewritten
        drop_orphans(self.run_dir, finished, set(run_ids))
        return sorted(finished)

    def close(self, compact: bool = True) -> dict[str, int]:
        """Flush everything, give every table that has no file a zero-row part with its schema, and
        (with `compact`) merge each table's files into one; rows written per table by this writer."""
        try:
            self.flush()
            for table, model in TABLES.items():
                directory = self.run_dir / table
                if not list(directory.glob("*.parquet")):
                    self._write_part(table, [])
                elif compact:
                    self._check_lease()
                    compact_table(directory, model.arrow_schema(), f"{self._writer_id}-{self._sequence:06d}",
                                  self._kept[table])
                    self._sequence += 1
        finally:
            self._forget_kept()  # whether or not it could compact: the hub lives on for other jobs
        return dict(self._rows_written)

    def _forget_kept(self) -> None:
        global _kept_bytes
        _kept_bytes -= sum(part.table.nbytes for parts in self._kept.values() for part in parts.values())
        self._kept = {name: {} for name in TABLES}

    def _check_lease(self) -> None:
        if self._lease.read_text() != self._writer_id:
            raise RuntimeError(f"another writer has taken over {self.run_dir}; this one writes no more")

    def _write_part(self, table: str, rows: list[dict[str, Any]]) -> None:
        directory = self.run_dir / table
        directory.mkdir(parents=True, exist_ok=True)
        arrow_table = pa.Table.from_pylist(rows, schema=TABLES[table].arrow_schema())
        final = directory / f"part-{self._writer_id}-{self._sequence:06d}.parquet"
        replace_atomically(final, lambda temporary: pq.write_table(arrow_table, temporary,
                                                                   compression=COMPRESSION))
        self._sequence += 1
        global _kept_bytes
        if _kept_bytes + arrow_table.nbytes <= KEPT_BYTES:
            self._kept[table][final.name] = KeptPart(arrow_table, final.stat())
            _kept_bytes += arrow_table.nbytes


class KeptPart:
    """A part as its writer wrote it, and the file's size and time then: where the file has changed
    since (rewritten without some episodes' rows: harness/tables/orphans.py), it is read instead."""

    def __init__(self, table: pa.Table, written: os.stat_result) -> None:
        self.table, self._written = table, (written.st_size, written.st_mtime_ns)

    def holds(self, file: Path) -> bool:
        try:
            now = file.stat()
        except FileNotFoundError:
            return False
        return (now.st_size, now.st_mtime_ns) == self._written


def table_files(directory: Path) -> list[Path]:
    """The Parquet files that make up a table now: every `*.parquet` in its directory, less those a
    compacted file already holds (present only for the moment of a compaction, or after a crash in it)."""
    files = sorted(directory.glob("*.parquet"))
    replaced = {name for f in files if f.name.endswith(COMPACTED) for name in _replaces(f)}
    return [f for f in files if f.name not in replaced]


def compact_table(directory: Path, schema: pa.Schema, name: str,
                  kept: dict[str, KeptPart] | None = None) -> Path | None:
    """Merge the table's files into `part-<name>-compacted.parquet` (see the module docstring for the
    steps and what a crash leaves); None when there is nothing to merge, or a file's columns cannot
    be read as `schema`'s. Files of an older harness that lack only columns added since (nullable)
    are merged with nulls there, so a resumed run's table is one schema again. A file `kept` holds
    as it is on disk is taken from memory rather than read."""
    _drop_replaced(directory)
    files = table_files(directory)
    if not files:
        return None
    plain = schema.remove_metadata()
    kept = kept or {}
    in_memory = {f.name: kept[f.name].table for f in files if f.name in kept and kept[f.name].holds(f)}
    on_disk = [f for f in files if f.name not in in_memory]
    read = None
    if on_disk:
        import pyarrow.dataset as ds  # 0.2 s with the pandas it imports: only where a part is read back

        read = ds.dataset([str(f) for f in on_disk], schema=plain, format="parquet")
    fragments = dict(zip((f.name for f in on_disk), read.get_fragments() if read else [], strict=True))
    found = [fragment.physical_schema.remove_metadata() for fragment in fragments.values()]
    if not all(_older_part_of(columns, plain) for columns in found):
        return None
    if len(files) == 1 and (not found or found[0].equals(plain)):
        return None  # one file, already today's
    final = directory / f"part-{name}{COMPACTED}"
    metadata = {**(schema.metadata or {}), REPLACES: json.dumps([f.name for f in files]).encode()}
    merged = schema.with_metadata(metadata)

    def batches() -> Iterator[pa.RecordBatch]:  # the files' rows, in file order
        for file in files:
            if file.name in in_memory:
                yield from in_memory[file.name].to_batches(max_chunksize=ROW_GROUP_ROWS)
            else:
                yield from fragments[file.name].to_batches(schema=plain, batch_size=ROW_GROUP_ROWS)

    replace_atomically(final, lambda temporary: _write_merged(temporary, batches(), merged))
    _fsync(directory)
    for file in files:
        file.unlink(missing_ok=True)
    return final


def _older_part_of(found: pa.Schema, schema: pa.Schema) -> bool:
    """Whether a file's columns are `schema`'s, or some of them with only nullable ones missing (a file
    written before those columns were added): each column it has, as `schema` has it."""
    names = set(found.names)
    return (names <= set(schema.names)
            and all(found.field(n).remove_metadata().equals(schema.field(n).remove_metadata()) for n in names)
            and all(field.nullable for field in schema if field.name not in names))


def _write_merged(path: Path, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> None:
    """The parts' rows, in file order, in row groups of ROW_GROUP_ROWS, synced to disk."""
    with pq.ParquetWriter(path, schema, compression=COMPRESSION) as out:
        pending: list[pa.RecordBatch] = []
        rows = 0
        for batch in batches:
            pending.append(batch.replace_schema_metadata(schema.metadata))
            rows += batch.num_rows
            if rows >= ROW_GROUP_ROWS:
                out.write_table(pa.Table.from_batches(pending, schema), row_group_size=ROW_GROUP_ROWS)
                pending, rows = [], 0
        if pending:
            out.write_table(pa.Table.from_batches(pending, schema), row_group_size=ROW_GROUP_ROWS)
    _fsync(path)


def recover(run_dir: Path) -> None:
    """Finish what a crashed writer left: remove its temporary files, and the files a compacted file
    replaces that are still there (a crash between a compaction's rename and its deletions)."""
    for table in TABLES:
        directory = run_dir / table
        if not directory.is_dir():
            continue
        for temporary in directory.glob(".*.tmp"):
            temporary.unlink(missing_ok=True)
        _drop_replaced(directory)


def _drop_replaced(directory: Path) -> None:
    for compacted in directory.glob(f"*{COMPACTED}"):
        for name in _replaces(compacted):
            if name != compacted.name:
                (directory / name).unlink(missing_ok=True)


def _replaces(compacted: Path) -> list[str]:
    try:
        metadata = pq.read_schema(compacted).metadata or {}
    except FileNotFoundError:  # replaced in turn by a newer compaction since it was listed
        return []
    return json.loads(metadata.get(REPLACES, b"[]"))


def _fsync(path: Path) -> None:
    """Data on disk before the files it replaces go (a directory too: the rename is recorded)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # a directory cannot be opened on every platform
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

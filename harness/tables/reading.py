"""Reading the tables back: a table of one run directory, or of many, and its row count.

Every reader goes through `table_files` (harness/tables/writer.py), which leaves out the part files
a compacted file already holds, so a table read during (or after a crash in) a compaction never
counts a row twice. A table without a file reads as an empty frame.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from harness.tables.writer import table_files


def read_table(run_dir: Path, table: str) -> pl.DataFrame:
    """One table of a run directory (empty when it has no file yet)."""
    files = table_files(run_dir / table)
    if not files:
        return pl.DataFrame()
    try:
        return pl.read_parquet(files)
    except (pl.exceptions.SchemaError, pl.exceptions.ColumnNotFoundError):
        # an older harness's parts beside newer ones (a resumed run, until its writer compacts them)
        return pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")


def read_tables(run_dirs: Iterable[Path], table: str) -> pl.DataFrame:
    """One table of several run directories, concatenated (columns missing in older ones: null)."""
    return concat_tables(read_table(d, table) for d in run_dirs)


def concat_tables(frames: Iterable[pl.DataFrame]) -> pl.DataFrame:
    """One table's frames of several run directories as one (columns missing in older ones: null)."""
    kept = [f for f in frames if not f.is_empty()]
    return pl.concat(kept, how="diagonal_relaxed") if kept else pl.DataFrame()


def count_rows(run_dir: Path, table: str) -> int:
    """Rows of one table of a run directory, from the files' metadata (nothing read)."""
    return sum(pq.ParquetFile(f).metadata.num_rows for f in table_files(run_dir / table))


def run_directories(root: Path) -> list[Path]:
    """Every run directory below `root` (or `root` itself), sorted: one holding `manifest.json` or an
    `episodes/` table. The report and the viewer both find runs so."""
    found: list[Path] = []
    for directory, subdirs, files in os.walk(root):
        if "manifest.json" in files or "episodes" in subdirs:
            found.append(Path(directory))
            subdirs[:] = []  # a run directory holds no other run
            continue
        # Hidden directories (.hydra, .git) hold no run. Names are not judged otherwise: `outputs/runs/`
        # holds runs although a table is called `runs`, and below a run nothing is walked anyway.
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
    return sorted(found)

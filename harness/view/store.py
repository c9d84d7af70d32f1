"""Where the viewer's rows come from: the run directories below the paths it was given, found again on
every request (a sweep in progress adds job directories, a running job adds part files), and each
table of a chosen set of them as one DuckDB scan over their current Parquet files.

Nothing is loaded ahead of a request. A running job's many small part files are read through chunks the
viewer merges them into (harness/view/part_chunks.py). A table is a SQL fragment (`Store.scan`) that
reads only the files of the run directories asked for, with every column of the current schema (a
column older files lack reads as null) and a `run_dir` column naming the directory; DuckDB reads only
the columns and row groups a query needs.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from harness.tables.reading import run_directories
from harness.tables.records import TABLES
from harness.tables.writer import table_files
from harness.view.part_chunks import PartMerger

COLUMN_CACHE_FILES = 20_000
"""Files whose columns are remembered before those no longer there (compacted parts) are forgotten."""
MEMORY_LIMIT = "384MB"
"""DuckDB's own cap (spilling to disk past it), well inside the viewer's 1 GB: the rest is Python,
polars and the page being built."""

_DUCK_TYPES = {
    pa.string(): "VARCHAR",
    pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.timestamp("us", tz="UTC"): "TIMESTAMPTZ",
}


Query = str | Callable[[], str]
"""SQL, or what makes it: made again (from the files there by then) when a file it named has gone."""


class ViewError(ValueError):
    """Bad input: a path with no tables, an unknown run or episode. Shown as one line, never a traceback."""


class TooLarge(ViewError):
    """A selection whose statistics would not fit in the viewer's memory: HTTP 413, in one line."""


class BadParameter(ViewError):
    """A query parameter that cannot be read (a seed that is not a number): HTTP 400, not 404."""


@dataclass(frozen=True)
class RunDir:
    key: str
    """How URLs name it: its path relative to the root it was found under (`.` for the root itself),
    after `<n>:` when the viewer was given several roots."""
    path: Path


def sql_text(value: str) -> str:
    """A SQL string literal (paths and keys are inlined into scans; values go in as parameters)."""
    return "'" + value.replace("'", "''") + "'"


def null_column(field: pa.Field) -> str:
    """A column of the current schema that the files lack (written by an older harness): all null."""
    return f'CAST(NULL AS {_DUCK_TYPES[field.type]}) AS "{field.name}"'


def keyed_run_dirs(roots: Sequence[Path]) -> list[RunDir]:
    """Every run directory below the roots (harness.tables.reading.run_directories), keyed by its path
    relative to its root (prefixed `i:` when there are several roots)."""
    found: list[RunDir] = []
    for index, root in enumerate(roots):
        prefix = f"{index}:" if len(roots) > 1 else ""
        for directory in run_directories(root):
            relative = os.path.relpath(directory, root)
            found.append(RunDir(prefix + relative.replace(os.sep, "/"), directory))
    return sorted(found, key=lambda d: d.key)


def check_roots(roots: Sequence[Path]) -> None:
    """Raise ViewError, one line per root, for a path that is not a directory or holds no run."""
    for root in roots:
        if not root.is_dir():
            raise ViewError(f"{root}: no such directory")
        if not keyed_run_dirs([root]):
            raise ViewError(f"{root}: holds no harness run (no manifest.json or episodes/ below it)")


class Store:
    """The tables of the run directories below `roots`, as DuckDB scans made afresh per query."""

    def __init__(self, roots: Sequence[Path], threads: int = 2) -> None:
        check_roots(roots)
        self.roots = [Path(r).resolve() for r in roots]
        # DuckDB spills into `.tmp` under the working directory unless told otherwise: never the
        # user's checkout or run directory.
        self._spill = tempfile.TemporaryDirectory(prefix="harness-view-")
        self._database = duckdb.connect(config={"memory_limit": MEMORY_LIMIT, "threads": threads,
                                                "temp_directory": self._spill.name})
        # A closed part file never changes (the writer renames it into place once), so its columns
        # are read once; the dictionary only grows by the files the viewer has seen.
        self._columns: dict[Path, frozenset[str]] = {}
        self._lock = threading.Lock()
        self._merger = PartMerger(self._database)
        weakref.finalize(self, self._merger.close)  # its temporary chunks go with the store

    def run_dirs(self, keys: Iterable[str] | None = None) -> list[RunDir]:
        found = keyed_run_dirs(self.roots)
        if keys is None:
            return found
        wanted = set(keys)
        return [d for d in found if d.key in wanted]

    def run_dir(self, key: str) -> RunDir:
        for found in self.run_dirs([key]):
            return found
        raise ViewError(f"no run directory {key!r}")

    def scan(self, table: str, dirs: Sequence[RunDir]) -> str:
        """A SQL subquery of `table` over `dirs`: every column of the current schema plus `run_dir`."""
        schema = TABLES[table].arrow_schema()
        parts = []
        for run_dir in dirs:
            files = self._merger.files(run_dir.path / table, table_files(run_dir.path / table))
            present = self._present_columns(files)
            columns = [f'"{f.name}"' if f.name in present else null_column(f) for f in schema]
            select = f"SELECT {sql_text(run_dir.key)} AS run_dir, {', '.join(columns)}"
            if files:
                paths = ", ".join(sql_text(str(f)) for f in files)
                parts.append(f"{select} FROM read_parquet([{paths}], union_by_name = true)")
        if not parts:  # no file yet (a run that has only started) or no directory: no rows, same columns
            columns = [null_column(f) for f in schema]
            return f"(SELECT CAST(NULL AS VARCHAR) AS run_dir, {', '.join(columns)} WHERE false)"
        return "(" + " UNION ALL ".join(parts) + ")"

    def rows(self, sql: Query, parameters: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run a query and return its rows as dicts. A file listed for the query that a compaction
        removed before DuckDB opened it (the rows are in the compacted file by then) is met by
        building the query again, from the files there now."""
        return self._retrying(sql, parameters, _fetch_dicts)

    def frame(self, sql: Query, parameters: Sequence[Any] = ()) -> pl.DataFrame:
        return self._retrying(sql, parameters, None)

    def _retrying(
        self, sql: Query, parameters: Sequence[Any], fetch: Callable[[duckdb.DuckDBPyConnection], Any] | None
    ) -> Any:
        for attempt in range(3):
            text = sql() if callable(sql) else sql
            cursor = self._database.cursor()
            try:
                if fetch is None:  # a relation hands its rows to polars as Arrow, without a copy
                    return cursor.sql(text, params=list(parameters)).pl()
                return fetch(cursor.execute(text, list(parameters)))
            except duckdb.IOException:
                if attempt == 2 or not callable(sql):
                    raise
            finally:
                cursor.close()
        raise AssertionError("unreachable")

    def _present_columns(self, files: list[Path]) -> frozenset[str]:
        present: set[str] = set()
        for file in files:
            with self._lock:
                known = self._columns.get(file)
            if known is None:
                try:
                    known = frozenset(pq.read_schema(file).names)
                except FileNotFoundError:  # compacted away since it was listed: its rows are elsewhere
                    continue
                with self._lock:
                    if len(self._columns) >= COLUMN_CACHE_FILES:  # a live run's parts, compacted away since
                        self._columns = {f: c for f, c in self._columns.items() if f.exists()}
                    self._columns[file] = known
            present |= known
        return frozenset(present)


def _fetch_dicts(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [column[0] for column in cursor.description or []]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def read_manifest(run_dir: RunDir) -> dict[str, Any]:
    """The run directory's manifest.json; {} when there is none yet or it cannot be read (it is
    replaced atomically, so a read never sees half of one)."""
    try:
        return json.loads((run_dir.path / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}

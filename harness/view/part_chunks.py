"""The viewer's own merge of a running job's part files, so that reading it stays fast while it writes.

A job writes one part file per table every second it has rows (harness/tables/writer.py) and merges them only
when it ends: after 20 minutes a table can be 1,000 files, and every query would open every one of
their footers (a second or more per page). The viewer merges each run of `CHUNK_PARTS` closed parts
into a chunk file of its own, in a temporary directory, and reads the chunks and the parts not yet
merged instead. Part files never change once renamed into place, so a chunk stays right for as long
as every part it holds is still listed; when the writer's compaction has replaced them (the job
ended, or a crash was recovered), the chunk is dropped and the compacted file read instead.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb

from harness.tables.records import COMPRESSION
from harness.tables.writer import COMPACTED

CHUNK_PARTS = 64
"""Parts merged into one chunk: a table is read from at most (parts / 64) chunks and 63 parts."""


@dataclass(frozen=True)
class Chunk:
    path: Path
    parts: frozenset[Path]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class PartMerger:
    """Chunks of part files per table directory, in a temporary directory removed by `close`."""

    def __init__(self, database: duckdb.DuckDBPyConnection) -> None:
        self._database = database
        self._directory = Path(tempfile.mkdtemp(prefix="harness-view-"))
        self._chunks: dict[Path, list[Chunk]] = {}
        self._locks: dict[Path, threading.Lock] = {}
        self._lock = threading.Lock()

    def files(self, table_dir: Path, listed: list[Path]) -> list[Path]:
        """What to read for a table whose current files are `listed` (harness.tables.writer.table_files): its
        chunks and the parts no chunk holds, merging each full run of CHUNK_PARTS parts first. Merging
        in the request keeps the viewer's memory bounded (one COPY of 64 small files at a time, never
        beside a scan of thousands) and costs a live job's viewer about 0.1 s per 64 flushes."""
        parts = [f for f in listed if not f.name.endswith(COMPACTED)]
        if len(parts) < CHUNK_PARTS and table_dir not in self._chunks:
            return listed
        with self._lock:
            table_lock = self._locks.setdefault(table_dir, threading.Lock())
        with table_lock:  # one merge per table at a time; other tables' requests go on
            present = set(listed)
            chunks = [c for c in self._chunks.get(table_dir, []) if c.parts <= present]
            self._forget(table_dir, keep=chunks)
            held = set().union(*(c.parts for c in chunks)) if chunks else set()
            loose = [f for f in parts if f not in held]
            while len(loose) >= CHUNK_PARTS:
                chunk = self._merge(loose[:CHUNK_PARTS])
                if chunk is None:  # a part went (compacted since it was listed): read them as they are
                    break
                chunks.append(chunk)
                loose = loose[CHUNK_PARTS:]
            self._chunks[table_dir] = chunks
        return [*(c.path for c in chunks), *loose, *(f for f in listed if f.name.endswith(COMPACTED))]

    def _merge(self, parts: list[Path]) -> Chunk | None:
        """One chunk of `parts`, in their order, written by DuckDB (in parallel, and holding no lock of
        Python's meanwhile); None when a part has gone (compacted since it was listed: the next
        request reads the compacted file)."""
        path = self._directory / f"{uuid.uuid4().hex}.parquet"
        files = ", ".join(_literal(str(p)) for p in parts)
        cursor = self._database.cursor()
        try:
            cursor.execute(
                f"COPY (SELECT * FROM read_parquet([{files}], union_by_name = true)) "
                f"TO {_literal(str(path))} (FORMAT parquet, COMPRESSION {COMPRESSION})"
            )
        except duckdb.Error:
            path.unlink(missing_ok=True)
            return None
        finally:
            cursor.close()
        return Chunk(path, frozenset(parts))

    def _forget(self, table_dir: Path, keep: list[Chunk]) -> None:
        for chunk in self._chunks.get(table_dir, []):
            if chunk not in keep:
                chunk.path.unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self._directory, ignore_errors=True)

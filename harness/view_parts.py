"""The viewer's own merge of a running job's part files, so that reading it stays fast while it writes.

A job writes one part file per table every second it has rows (harness/writer.py) and merges them only
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

import pyarrow as pa
import pyarrow.parquet as pq

from harness.records import COMPRESSION
from harness.writer import COMPACTED

CHUNK_PARTS = 64
"""Parts merged into one chunk: a table is read from at most (parts / 64) chunks + 63 parts."""


@dataclass(frozen=True)
class Chunk:
    path: Path
    parts: frozenset[Path]


class PartMerger:
    """Chunks of part files per table directory, in a temporary directory removed by `close`."""

    def __init__(self) -> None:
        self._directory = Path(tempfile.mkdtemp(prefix="harness-view-"))
        self._chunks: dict[Path, list[Chunk]] = {}
        self._lock = threading.Lock()

    def files(self, table_dir: Path, listed: list[Path]) -> list[Path]:
        """What to read for a table whose current files are `listed` (harness.writer.table_files):
        its chunks and the parts no chunk holds, merging full runs of CHUNK_PARTS parts on the way."""
        parts = [f for f in listed if not f.name.endswith(COMPACTED)]
        if len(parts) < CHUNK_PARTS:
            return listed
        with self._lock:
            present = set(listed)
            chunks = [c for c in self._chunks.get(table_dir, []) if c.parts <= present]
            held = set().union(*(c.parts for c in chunks)) if chunks else set()
            loose = [f for f in parts if f not in held]
            while len(loose) >= CHUNK_PARTS:
                chunk = self._merge(loose[:CHUNK_PARTS])
                if chunk is None:  # a part went (compacted) or differs in schema: read them as they are
                    break
                chunks.append(chunk)
                loose = loose[CHUNK_PARTS:]
            self._forget(table_dir, keep=chunks)
            self._chunks[table_dir] = chunks
        return [*(c.path for c in chunks), *loose, *(f for f in listed if f.name.endswith(COMPACTED))]

    def _merge(self, parts: list[Path]) -> Chunk | None:
        try:
            tables = [pq.read_table(p) for p in parts]
        except (FileNotFoundError, OSError):
            return None
        schema = tables[0].schema.remove_metadata()
        if any(not t.schema.remove_metadata().equals(schema) for t in tables):
            return None
        path = self._directory / f"{uuid.uuid4().hex}.parquet"
        pq.write_table(pa.concat_tables(tables), path, compression=COMPRESSION)
        return Chunk(path, frozenset(parts))

    def _forget(self, table_dir: Path, keep: list[Chunk]) -> None:
        for chunk in self._chunks.get(table_dir, []):
            if chunk not in keep:
                chunk.path.unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self._directory, ignore_errors=True)

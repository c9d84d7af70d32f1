"""The vectors an agent keeps for itself: an exact in-process search over them (`VectorMirror`, the
episodic memory's), the one similarity measure (`cosine`), and the upkeep of a LanceDB table that
only its agent reads and writes (`compact_table`)."""

from __future__ import annotations

import math
import warnings
from datetime import timedelta
from typing import Any

import numpy as np

TIE_MARGIN = 1e-3
"""Cosine margin below the k-th best float32 score within which rows are re-scored exactly (float64)
before the top k is taken: far above float32's rounding in a dot product of 384 or 1536 dimensions
(under 1e-4 at worst), so the exact top k is always among them."""


class VectorMirror:
    """Every stored item's vector, in process, for an exact top-k by cosine: the memory's search.

    Why not LanceDB's own search (python -m harness.bench, section 3: 100k random unit 384-dim
    vectors, 100 probes next to stored ones; and a sweep of LanceDB 0.40's query options on the same
    kind of data, 60 probes; this shared 2-core machine under load, NumPy exact 16-38 ms p50 at 100k
    in the same runs, ~5 ms when quiet): a flat scan is exact but 10-35x slower than NumPy over the
    same matrix (390 against 38 ms at 100k, 3.0 against 0.1 ms at 1k); the IVF-HNSW-SQ index the
    memory built from 5,000 lessons on found 24-29% of the exact top 5 at its defaults (2.4-3.8 ms),
    57% / 67% / 80% with ef 50 / 200 / 1000 (2.9 / 5.0 / 7.9 ms); nprobes 10 or 40 changed nothing,
    and refine_factor 10 (exact re-ranking of its candidates) added 2 ms and no recall, since the
    misses are the graph's; IVF_FLAT reached 95% only at 20 probes, as slow as NumPy. So: the exact
    search, over a float32 copy of the vectors (1.5 KB a lesson at 384 dimensions), which costs what
    NumPy brute force costs (within 3-13% at 10k and 100k, recall@5 1.0) and needs no index (nor
    its rebuilds as the memory grows: 100 s at 100k here).

    A float32 matrix product scores each row by BLAS, whose rounding depends on a row's place in the
    matrix (identical vectors get different last bits), so the rows within `TIE_MARGIN` of the k-th
    best are re-scored in float64, the same way wherever they sit; equally near rows are then
    ordered by their stamp, the order of their last change (insert, or recall), oldest first. The
    rows' places change as items go (the last row fills the gap) but no result depends on them."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._vectors = np.empty((0, dim), np.float32)
        self._inverse_norms = np.empty(0, np.float32)
        self._stamps = np.empty(0, np.int64)
        self._ids: list[str] = []
        """memory_id of each row in use, by row."""
        self._rows: dict[str, int] = {}
        self._clock = 0

    def __len__(self) -> int:
        return len(self._ids)

    @classmethod
    def of(cls, ids: list[str], vectors: np.ndarray) -> VectorMirror:
        """A mirror of these rows, stamped in this order."""
        mirror = cls(vectors.shape[1])
        mirror._reserve(len(ids))
        n = len(ids)
        mirror._vectors[:n] = vectors
        with np.errstate(divide="ignore"):
            norms = np.sqrt(np.square(vectors, dtype=np.float64).sum(axis=1))
            mirror._inverse_norms[:n] = np.where(norms > 0, 1.0 / norms, 0.0)
        mirror._stamps[:n] = np.arange(n)
        mirror._clock = n
        mirror._ids = list(ids)
        mirror._rows = {m: i for i, m in enumerate(ids)}
        return mirror

    def add(self, memory_id: str, vector: list[float]) -> None:
        row = len(self._ids)
        self._reserve(row + 1)
        self._vectors[row] = vector
        norm = math.sqrt(float(np.square(self._vectors[row], dtype=np.float64).sum()))
        self._inverse_norms[row] = 1.0 / norm if norm else 0.0
        self._stamps[row] = self._tick()
        self._ids.append(memory_id)
        self._rows[memory_id] = row

    def remove(self, memory_id: str) -> None:
        row, last = self._rows.pop(memory_id), len(self._ids) - 1
        moved = self._ids.pop()
        if row != last:  # the last row fills the gap
            for array in (self._vectors, self._inverse_norms, self._stamps):
                array[row] = array[last]
            self._ids[row] = moved
            self._rows[moved] = row

    def touch(self, memory_ids: list[str]) -> None:
        """Stamp these rows as changed now, in this order (after every other row)."""
        for memory_id in memory_ids:
            self._stamps[self._rows[memory_id]] = self._tick()

    def stamp(self, memory_id: str) -> int:
        return int(self._stamps[self._rows[memory_id]])

    def vector(self, memory_id: str) -> list[float]:
        return self._vectors[self._rows[memory_id]].tolist()

    def nearest(self, query: list[float], k: int) -> list[tuple[float, str]]:
        """The k rows most cosine-similar to `query` (similarity, memory_id), best first; equally near
        rows oldest stamp first. Exact: every row is scored."""
        n = len(self._ids)
        if n == 0 or k < 1:
            return []
        q = np.asarray(query, np.float32)
        q_norm = math.sqrt(float(np.square(q, dtype=np.float64).sum()))
        if q_norm == 0:  # no direction: every row is as near as any other (similarity 0)
            return [(0.0, self._ids[i]) for i in np.argsort(self._stamps[:n], kind="stable")[:k]]
        candidates = np.arange(n)
        if n > k:
            scores = self._vectors[:n] @ q
            scores *= self._inverse_norms[:n]
            kth = np.partition(scores, n - k)[n - k]
            candidates = np.flatnonzero(scores >= kth - TIE_MARGIN * q_norm)
        exact = np.empty(len(candidates))
        q64 = q.astype(np.float64)
        for start in range(0, len(candidates), 4096):  # many equally near rows: a bounded copy at a time
            rows = self._vectors[candidates[start:start + 4096]].astype(np.float64)
            norms = np.sqrt(np.square(rows).sum(axis=1)) * q_norm
            with np.errstate(invalid="ignore", divide="ignore"):
                exact[start:start + 4096] = np.where(norms > 0, (rows * q64).sum(axis=1) / norms, 0.0)
        order = np.lexsort((self._stamps[candidates], -exact))[:k]
        return [(float(exact[i]), self._ids[candidates[i]]) for i in order]

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _reserve(self, rows: int) -> None:
        if rows <= len(self._vectors):
            return
        size = max(rows, 2 * len(self._vectors), 64)
        n = len(self._ids)
        vectors = np.empty((size, self.dim), np.float32)
        vectors[:n] = self._vectors[:n]
        inverse_norms, stamps = np.zeros(size, np.float32), np.zeros(size, np.int64)
        inverse_norms[:n], stamps[:n] = self._inverse_norms[:n], self._stamps[:n]
        self._vectors, self._inverse_norms, self._stamps = vectors, inverse_norms, stamps


async def compact_table(table: Any) -> None:
    """Merge a LanceDB table's data fragments, bring its indices up to date, and delete every version
    but the latest: for a table that only this process reads and writes (an agent's own)."""
    # The warning is for tables that other processes may be reading at an older version.
    warnings.filterwarnings("ignore", message=r"optimize\(cleanup_older_than=0\)", category=UserWarning)
    await table.optimize(cleanup_older_than=timedelta(0))


def cosine(a: list[float], b: list[float]) -> float:
    """Cosine similarity of two embeddings (the one measure memory, playbooks and skills use)."""
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0

"""Section 3 of `python -m harness.bench`: memory retrieval at 1k, 10k and 100k lessons. The memory's own
recall (variant=memory's, harness/bench/memory_variant.py: exact, over its in-process mirror of the
vectors) with its recall@5 against NumPy brute force (matrix @ query, argpartition) over the same
float32 matrix, and LanceDB's flat scan (and at 100k an IVF-HNSW index) on the same lessons.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
from lancedb.index import IvfHnswSq

from envs.base import TaskView
from harness.agent_api import Recorder
from harness.bench.memory_variant import build_memory, table_schema


def numpy_top_k(matrix: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    """Row indices of the k rows of `matrix` (unit vectors) most cosine-similar to `query`, best first:
    the brute-force alternative to a vector database."""
    scores = matrix @ (query / np.linalg.norm(query))
    top = np.argpartition(scores, -k)[-k:]
    return top[np.argsort(scores[top])[::-1]]


def retrieval(sizes: list[int], queries: int, dim: int = 384, top_k: int = 5) -> list[dict[str, Any]]:
    """Per size, the memory's own search (EpisodicMemory.recall, top-`top_k`, over the lessons loaded
    as from a snapshot) and LanceDB's over the same rows (flat, and at 100k with the IVF-HNSW index
    the memory built until it searched in process), each against NumPy brute force (numpy_top_k)
    over the same float32 matrix, probe by probe (which of NumPy and the memory goes first
    alternates): p50, and recall@k, the share of NumPy's top k each finds, and how often LanceDB's
    top-1 is NumPy's."""
    return asyncio.run(_retrieval(sizes, queries, dim, top_k))


class _ProbeModel:
    """The memory's embed call for a probe question `probe <i>`: the i-th probe vector."""

    function_calling = False

    def __init__(self, probes: np.ndarray) -> None:
        self.probes = probes

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.probes[int(text.split()[-1])].tolist() for text in texts]


def _lessons(vectors: np.ndarray, schema: pa.Schema) -> pa.Table:
    """Lessons with these vectors as a memory's snapshot has them (`schema`: its table's)."""
    size, dim = vectors.shape
    columns = {"memory_id": [str(i) for i in range(size)], "kind": ["lessons"] * size,
               "text": [f"Lesson {i}." for i in range(size)],
               "question": [f"Question {i}?" for i in range(size)],
               "source_task_id": [f"t{i}" for i in range(size)], "source_position": range(size),
               "reward": [1.0] * size, "verified": [True] * size, "importance": [1.0] * size,
               "access_count": [0] * size}
    arrays = [pa.array(columns[field.name], field.type) for field in schema if field.name != "vector"]
    vector = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()), dim)
    return pa.Table.from_arrays([*arrays, vector], schema=schema)


async def _retrieval(sizes: list[int], queries: int, dim: int, top_k: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        db = await lancedb.connect_async(directory)
        for size in sizes:
            vectors = rng.standard_normal((size, dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            probes = vectors[rng.integers(0, size, queries)] + np.float32(0.01)
            recorder = Recorder()
            memory = build_memory(_ProbeModel(probes), recorder, Path(directory) / f"memory_{size}",
                                  top_k=top_k, capacity=size)
            items = _lessons(vectors, await table_schema(memory, dim))
            table = await db.create_table(f"lessons_{size}", data=items)
            numpy_ms, numpy_top, memory_ms, memory_found = await _memory_against_numpy(
                memory, recorder, items, vectors, probes, top_k)
            for with_index in [False] + ([True] if size >= 100_000 else []):
                if with_index:
                    await table.create_index("vector", config=IvfHnswSq(distance_type="cosine"))
                lancedb_ms, agree, lancedb_found = await _lancedb_search(table, probes, numpy_top, top_k)
                ours = not with_index  # the memory's figures, once per size
                rows.append({"lessons": size,
                             f"memory recall@{top_k}": memory_found / (top_k * len(probes)) if ours else None,
                             "memory p50 ms": memory_ms if ours else None,
                             "numpy top-k p50 ms": numpy_ms,
                             "memory / numpy": memory_ms / numpy_ms if ours else None,
                             "search": "IVF-HNSW index" if with_index else "flat",
                             f"lancedb recall@{top_k}": lancedb_found / (top_k * len(probes)),
                             "lancedb p50 ms": lancedb_ms, "lancedb / numpy": lancedb_ms / numpy_ms,
                             "top-1 agrees with numpy": agree / len(probes)})
    return rows


async def _memory_against_numpy(memory: Any, recorder: Recorder, items: pa.Table, vectors: np.ndarray,
                                probes: np.ndarray, top_k: int) -> tuple[float, list[list[int]], float, int]:
    """The memory's own recall and NumPy's exact top-k on the same probes, taking turns going first:
    NumPy's p50 ms and top-k per probe, the memory's p50 ms and how many of NumPy's top-k it found."""
    await memory.load(items)
    numpy_times, numpy_top, memory_times, memory_found = [], [], [], 0
    for i, q in enumerate(probes):
        for side in ("numpy", "memory") if i % 2 == 0 else ("memory", "numpy"):
            started = time.perf_counter()
            if side == "numpy":
                numpy_top.append(numpy_top_k(vectors, q, top_k).tolist())
                numpy_times.append(time.perf_counter() - started)
            else:
                probe = TaskView(task_id=f"p{i}", family="bench", question=f"probe {i}")
                recalled = await memory.recall(probe)
                memory_times.append(time.perf_counter() - started)
                found = [int(r.memory_id) for r in recalled]
        recorder.take()
        memory_found += len(set(found) & set(numpy_top[-1]))
    return (1000 * statistics.median(numpy_times), numpy_top, 1000 * statistics.median(memory_times),
            memory_found)


async def _lancedb_search(table: Any, probes: np.ndarray, expected_top: list[list[int]],
                          top_k: int) -> tuple[float, int, int]:
    """LanceDB's top-k on the same probes: p50 ms, top-1 agreements with NumPy, NumPy's top-k found."""
    times, agree, found = [], 0, 0
    for q, expected in zip(probes, expected_top, strict=True):
        started = time.perf_counter()
        hits = await table.vector_search(q.tolist()).distance_type("cosine").limit(top_k).to_list()
        times.append(time.perf_counter() - started)
        ids = [int(hit["memory_id"]) for hit in hits]
        agree += bool(ids) and ids[0] == expected[0]
        found += len(set(ids) & set(expected))
    return 1000 * statistics.median(times), agree, found

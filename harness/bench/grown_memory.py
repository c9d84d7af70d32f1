"""Section 6 of `python -m harness.bench`: a memory grown write by write, as an agent grows it
(variant=memory's, harness/bench/memory_variant.py: a recall and a stored lesson per task, a scripted
model, no model calls): search p50 and bytes on disk per lesson against the same lessons written in one
go, and against the writes as they were before the memory compacted its table (an add per lesson, an
update per recall, nothing compacted).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa

from envs.base import TaskView
from harness.agent_api import AttemptResult, Completion, Feedback, Recorder
from harness.bench.memory_variant import build_memory
from harness.tables.records import Usage


class _ScriptedMemoryModel:
    """The two calls a memory makes, answered at once: a lesson for each distil call, and a random unit
    vector for each question (the same one whenever it is asked)."""

    function_calling = False

    def __init__(self, dim: int, seed: int = 0) -> None:
        self.dim = dim
        self.rng = np.random.default_rng(seed)
        self.vectors: dict[str, list[float]] = {}
        self.calls = 0

    async def complete(self, messages: list[dict[str, Any]], purpose: str = "act", **params: Any) -> Any:
        self.calls += 1
        return Completion(text=f"Lesson {self.calls}: check the units and the sign before answering a "
                                "question like this one.", usage=Usage(), call_id=f"bench-{self.calls}")

    async def embed(self, texts: list[str]) -> list[list[float]]:
        for text in texts:
            if text not in self.vectors:
                vector = self.rng.standard_normal(self.dim).astype(np.float32)
                self.vectors[text] = (vector / np.linalg.norm(vector)).tolist()
        return [self.vectors[text] for text in texts]


def _bytes_on_disk(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


async def _search_ms(table: Any, probes: np.ndarray, limit: int) -> float:
    """p50 of a top-`limit` cosine search, as the memory's recall makes it."""
    times = []
    for probe in probes:
        started = time.perf_counter()
        await table.vector_search(probe.tolist()).distance_type("cosine").limit(limit).to_list()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


@dataclass
class _Grown:
    memory: Any
    recalls: list[float]
    """Seconds of each of the memory's recalls."""
    searches: list[float]
    """Seconds of a probe's search after each of the last tenth of the tasks."""
    sizes: list[int]
    """Bytes on disk after each of the last tenth of the tasks."""


async def _grow(workdir: Path, lessons: int, dim: int, compact_every: int | None, probes: np.ndarray,
                limit: int) -> _Grown:
    """variant=memory's memory grown as its agent grows it: per task a recall, then a distilled lesson
    stored (every third task unrewarded). Over the last tenth of the tasks (at least a whole compaction
    cycle), a probe's search and the bytes on disk after each task. `compact_every`: None for the
    yaml's."""
    recorder = Recorder()
    options = {"capacity": lessons, **({"compact_every": compact_every} if compact_every else {})}
    memory = build_memory(_ScriptedMemoryModel(dim), recorder, workdir, **options)
    grown = _Grown(memory, [], [], [])
    for position in range(lessons):
        task = TaskView(task_id=f"t{position}", family="bench", question=f"Question {position}?")
        started = time.perf_counter()
        await memory.recall(task)
        grown.recalls.append(time.perf_counter() - started)
        reward = float(position % 3 != 0)
        final = AttemptResult(number=1, response="42", steps=1, success=bool(reward), score=reward,
                              judge_score=None, reward=reward)
        await memory.remember(Feedback(task=task, attempts=[final]), position)
        recorder.take()  # the harness takes an episode's rows after it
        if lessons - position <= max(memory.compact_every, lessons // 10):
            probe = probes[position % len(probes)].tolist()
            table = await memory.lance_table(dim)
            started = time.perf_counter()
            await table.vector_search(probe).distance_type("cosine").limit(limit).to_list()
            grown.searches.append(time.perf_counter() - started)
            grown.sizes.append(_bytes_on_disk(memory.directory))
    return grown


async def _grow_uncompacted(directory: Path, lessons: int, dim: int, schema: pa.Schema,
                            top_k: int = 3) -> Any:
    """The writes as they were before the memory compacted its table (`schema`: its table's): per task
    an update of the access counts of `top_k` recalled lessons, then an add of the new lesson; nothing
    compacted."""
    rng = np.random.default_rng(1)
    db = await lancedb.connect_async(directory)
    table = await db.create_table("today", schema=schema)
    for position in range(lessons):
        if position:
            recalled = rng.choice(position, size=min(top_k, position), replace=False)
            ids = ", ".join(f"'{i}'" for i in recalled)
            await table.update(where=f"memory_id IN ({ids})",
                               updates_sql={"access_count": "access_count + 1"})
        vector = rng.standard_normal(dim).astype(np.float32)
        await table.add([{"memory_id": str(position), "kind": "lessons",
                          "text": f"Lesson {position}: check the units and the sign before answering a "
                                  "question like this one.",
                          "question": f"Question {position}?", "source_task_id": f"t{position}",
                          "source_position": position, "reward": 1.0, "verified": True, "importance": 1.0,
                          "access_count": 0, "vector": (vector / np.linalg.norm(vector)).tolist()}])
    return table


def grown_memory(sizes: list[int], queries: int, uncompacted_up_to: int = 1000, dim: int = 384,
                 compact_every: int | None = None) -> list[dict[str, Any]]:
    """Per size: a memory grown write by write through its own writes (its own compaction, every
    `compact_every` writes, None: the yaml's), the same rows written in one go into a fresh table,
    and, up to `uncompacted_up_to` lessons, the writes as they were before the memory compacted
    ("before"). Search: a flat top-12 (what a top-3 recall asks for) on the LanceDB table, over the
    same probes: the health of the table as it grows (the memory's own recall reads its in-process
    mirror, section 3); while growing, one after each of the last tenth of the tasks, so that every
    point of the compaction cycle counts ("recalls while growing": the memory's own recalls then;
    "peak": the most bytes on disk after any of those tasks)."""
    rows = []
    for size in sizes:
        with tempfile.TemporaryDirectory() as directory:
            rows.append(asyncio.run(_measure(size, Path(directory), queries, uncompacted_up_to, dim,
                                             compact_every)))
    return rows


async def _measure(size: int, directory: Path, queries: int, uncompacted_up_to: int, dim: int,
                   compact_every: int | None) -> dict[str, Any]:
    probes = np.random.default_rng(2).standard_normal((queries, dim)).astype(np.float32)
    limit = 3 * 4  # a top-3 recall's search (agents/memory_store.py, EpisodicMemory._ranked)
    started = time.perf_counter()
    grown = await _grow(directory / "grown", size, dim, compact_every, probes, limit)
    grow_s = time.perf_counter() - started
    memory = grown.memory
    table = await memory.lance_table(dim)
    items, _ = await memory.export()
    once = await _one_go(directory / "once", items)
    grown_ms = 1000 * statistics.median(grown.searches)
    once_ms = await _search_ms(once, probes, limit)
    row: dict[str, Any] = {
        "lessons": size,
        "grown p50 ms": grown_ms, "one go p50 ms": once_ms, "grown / one go": grown_ms / once_ms,
        "recalls while growing p50 ms": 1000 * statistics.median(grown.recalls[-len(grown.searches):]),
        "grown bytes/lesson": _bytes_on_disk(memory.directory) / size,
        "grown peak bytes/lesson": max(grown.sizes) / size,
        "one go bytes/lesson": _bytes_on_disk(directory / "once") / size,
        "versions kept": len(await table.list_versions()), "grow s": grow_s}
    if size <= uncompacted_up_to:
        started = time.perf_counter()
        today = await _grow_uncompacted(directory / "today", size, dim, await table.schema())
        row["before p50 ms"] = await _search_ms(today, probes, limit)
        row["before / one go"] = row["before p50 ms"] / once_ms
        row["before bytes/lesson"] = _bytes_on_disk(directory / "today") / size
        row["before grow s"] = time.perf_counter() - started
    return row


async def _one_go(directory: Path, items: pa.Table) -> Any:
    db = await lancedb.connect_async(directory)
    return await db.create_table("once", data=items)

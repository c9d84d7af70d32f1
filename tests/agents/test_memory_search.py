"""The memory's search is exact: what it recalls is the exact top-k by cosine (equally near items in
the memory's order, the order a snapshot keeps), however the memory was filled (loaded, or grown
task by task with evictions and compactions), and a memory loaded from a snapshot recalls what the
original does."""

import asyncio
import itertools
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from agents.memory_store import EpisodicMemory, item_model
from agents.vectors import VectorMirror
from envs.base import TaskView
from harness.agent_api import AttemptResult, Completion, Feedback, Recorder
from harness.tables.records import Usage

DIM = 32


class Model:
    """A lesson per distil call and, per question, a seeded vector (not of unit length): the question
    `q <n>` always gets the same one, so repeated questions give equally near items."""

    function_calling = False

    async def complete(self, messages: list[dict[str, Any]], purpose: str = "act",
                       **params: Any) -> Completion:
        return Completion(text="a lesson", usage=Usage(), call_id="c")

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [vector_of(int(text.split()[-1])).tolist() for text in texts]


def vector_of(n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    return (rng.standard_normal(DIM) * rng.uniform(0.5, 2.0)).astype(np.float32)


def exact_top(items: pa.Table, query: np.ndarray, k: int) -> list[tuple[str, float]]:
    """The reference: cosine in float64 over a snapshot's rows, best first, equals in the rows' order."""
    vectors = np.asarray(items.column("vector").to_pylist(), np.float64)
    q = query.astype(np.float64)
    similarity = (vectors * q).sum(axis=1) / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(q))
    order = np.lexsort((np.arange(len(vectors)), -similarity))[:k]
    ids = items.column("memory_id").to_pylist()
    return [(ids[i], float(similarity[i])) for i in order]


def weighted(items: pa.Table, pool: list[tuple[str, float]], k: int) -> list[str]:
    """The memory's recall from its exact pool: by similarity x importance, stable."""
    importance = dict(zip(items.column("memory_id").to_pylist(), items.column("importance").to_pylist(),
                          strict=True))
    return [m for m, _ in sorted(pool, key=lambda pair: -pair[1] * importance[pair[0]])][:k]


def random_items(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    vectors = (rng.standard_normal((n, DIM)) * rng.uniform(0.5, 2.0, (n, 1))).astype(np.float32)
    vectors[7] = vectors[n // 2: n // 2 + 5] = vector_of(7)  # six equal items: ties for the question `q 7`
    rows = [{"memory_id": f"m{i:05d}", "kind": "lessons", "text": f"lesson {i}", "question": f"q {i}",
             "source_task_id": f"t{i}", "source_position": i, "reward": 1.0, "verified": True,
             "importance": 1.0, "access_count": 0, "vector": vectors[i].tolist()} for i in range(n)]
    return pa.Table.from_pylist(rows, schema=item_model(DIM).to_arrow_schema())


def task(n: int, position: int = 0) -> TaskView:
    return TaskView(task_id=f"t{position}", family="f", question=f"q {n}")


def test_a_loaded_memory_recalls_the_exact_numpy_top_k_of_thousands_of_items(tmp_path):
    memory = EpisodicMemory(Model(), Recorder(), tmp_path, "run", top_k=5, capacity=10_000)

    async def check() -> None:
        items = random_items(3000)
        await memory.load(items)
        for probe in itertools.chain(range(1, 30), [7]):  # 7: six equal items, tied
            expected = exact_top(items, vector_of(probe), 5)
            recalled = await memory.recall(task(probe))
            assert [r.memory_id for r in recalled] == [m for m, _ in expected]
            assert [r.similarity for r in recalled] == pytest.approx([s for _, s in expected], abs=1e-9)
            order = items.column("memory_id").to_pylist()
            items, _ = await memory.export()  # the recalled items now come last, in their order before
            assert items.column("memory_id").to_pylist()[-5:] == sorted(
                (m for m, _ in expected), key=order.index)

    asyncio.run(check())


async def grow(directory: Path, tasks: int, capacity: int, compact_every: int) -> EpisodicMemory:
    """A stream whose questions repeat (equal vectors), a recall then a lesson per task (every third
    unrewarded), evictions from `capacity` on."""
    memory = EpisodicMemory(Model(), Recorder(), directory, "run", top_k=4, capacity=capacity,
                            compact_every=compact_every)
    for position in range(tasks):
        question = position % 37
        await memory.recall(task(question, position))
        reward = float(position % 3 != 0)
        final = AttemptResult(number=1, response="x", raw_response="x", steps=1, success=reward > 0,
                              score=reward, judge_score=None, reward=reward)
        await memory.remember(Feedback(task=task(question, position), attempts=[final]), position)
    return memory


def test_a_grown_compacted_memory_recalls_the_exact_top_k_and_so_does_one_loaded_from_its_snapshot(
        tmp_path, monkeypatch):
    ids = itertools.count(1)
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=next(ids) << 80))

    async def check() -> None:
        grown = await grow(tmp_path / "grown", tasks=150, capacity=100, compact_every=7)
        assert grown.size == 100
        snapshot, _ = await grown.export()
        loaded = EpisodicMemory(Model(), Recorder(), tmp_path / "loaded", "run", top_k=4, capacity=100)
        await loaded.load(snapshot)
        for probe in [3, 40, 5, 3, 36, 80, 3]:  # some asked before (ties at similarity 1), some new
            items, _ = await grown.export()
            pool = exact_top(items, vector_of(probe), 4 * 4)
            expected = weighted(items, pool, 4)
            recalled = [await memory.recall(task(probe)) for memory in (grown, loaded)]
            assert [r.memory_id for r in recalled[0]] == expected
            assert recalled[0] == recalled[1]  # ids, texts and similarities alike
        after = [(await memory.export())[0] for memory in (grown, loaded)]
        assert after[0].to_pylist() == after[1].to_pylist()  # access counts and order alike

    asyncio.run(check())


def test_compaction_changes_nothing_the_memory_recalls(tmp_path, monkeypatch):
    recalls = []
    for every in (3, 10**9):
        ids = itertools.count(1)
        monkeypatch.setattr(uuid, "uuid4", lambda ids=ids: uuid.UUID(int=next(ids) << 80))
        memory = asyncio.run(grow(tmp_path / str(every), tasks=60, capacity=40, compact_every=every))
        recalls.append([asyncio.run(memory.recall(task(probe))) for probe in range(37)])
    assert recalls[0] == recalls[1]


def test_equal_vectors_score_alike_wherever_they_sit_and_come_oldest_first():
    rng = np.random.default_rng(0)
    v, q = rng.standard_normal((2, 384)).astype(np.float32)
    for n in (3, 7, 11):  # a float32 matrix product alone scores some of n equal rows differently
        mirror = VectorMirror(384)
        for i in range(n):
            mirror.add(f"m{i}", v.tolist())
        for k in range(1, n + 1):
            found = mirror.nearest(q.tolist(), k)
            assert [m for _, m in found] == [f"m{i}" for i in range(k)] and len({s for s, _ in found}) == 1
    mirror.touch(["m1", "m0"])  # recalled, in this order: now the newest
    mirror.remove("m2")  # the last row moves into its place
    assert [m for _, m in mirror.nearest(q.tolist(), n)] == [f"m{i}" for i in range(3, 11)] + ["m1", "m0"]
    assert [m for _, m in mirror.nearest([0.0] * 384, 2)] == ["m3", "m4"]  # no direction: oldest first


def test_the_exact_top_k_survives_rows_moving_as_items_go():
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((500, DIM)).astype(np.float32)
    mirror = VectorMirror.of([f"m{i}" for i in range(500)], vectors)
    gone = set(rng.choice(500, 200, replace=False).tolist())
    for i in sorted(gone):
        mirror.remove(f"m{i}")
    kept = [i for i in range(500) if i not in gone]
    for _ in range(20):
        q = rng.standard_normal(DIM)
        similarity = vectors[kept].astype(np.float64) @ q / np.linalg.norm(vectors[kept], axis=1)
        expected = [f"m{kept[i]}" for i in np.argsort(-similarity)[:8]]
        assert [m for _, m in mirror.nearest(q.tolist(), 8)] == expected

"""A memory stays compact as it learns: a task's changes are one LanceDB write, the table is compacted
and its old versions deleted every `compact_every` writes, and none of it changes what the memory
holds, recalls or evicts, or what a snapshot of it keeps."""

import asyncio
import itertools
import uuid
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pytest

from agents.memory_store import EpisodicMemory
from envs.base import TaskView
from harness.agent_api import AttemptResult, Completion, Feedback, Recorder
from harness.tables.records import Usage
from tests.conftest import run_variant


class Model:
    """A distil reply and a fixed unit vector per question, from a handful of questions: equally near
    lessons (ties) are common, so the rows' order in the table decides between them."""

    function_calling = False

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, messages: list[dict[str, Any]], purpose: str = "act",
                       **params: Any) -> Completion:
        self.calls += 1
        return Completion(text=f"lesson {self.calls % 5}", usage=Usage(), call_id=str(self.calls))

    async def embed(self, texts: list[str]) -> list[list[float]]:
        vectors = []
        for text in texts:
            vector = np.random.default_rng(int(text.split()[-1])).standard_normal(8)
            vectors.append((vector / np.linalg.norm(vector)).tolist())
        return vectors


def feedback(task: TaskView, reward: float) -> Feedback:
    return Feedback(task=task, attempts=[AttemptResult(number=1, response="x", raw_response="x", steps=1,
                                                       success=reward > 0, score=reward, judge_score=None,
                                                       reward=reward)])


async def grow(directory: Path, compact_every: int, tasks: int = 60, capacity: int = 12,
               monkeypatch: pytest.MonkeyPatch | None = None) -> dict[str, Any]:
    """A stream of tasks (a recall, then a lesson, every third one unrewarded), with a probe (a recall
    only) after every fifth; what the memory recorded, its snapshots every 10 tasks, and at the end."""
    ids = itertools.count(1)
    assert monkeypatch is not None
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=next(ids) << 80))  # the same ids both ways
    recorder = Recorder()
    memory = EpisodicMemory(Model(), recorder, directory, "run", capacity=capacity,
                            compact_every=compact_every)
    snapshots = []
    for position in range(tasks):
        task = TaskView(task_id=f"t{position}", family="f", question=f"question {position % 7}")
        recorder.start_episode("run", f"e{position}", task.task_id, position)
        await memory.recall(task)
        await memory.remember(feedback(task, float(position % 3 != 0)), position)
        if position % 5 == 4:
            recorder.start_episode("run", f"p{position}", "probe", position)
            await memory.recall(TaskView(task_id="probe", family="f", question=f"question {position % 4}"))
        if position % 10 == 9:
            items, _ = await memory.export()
            snapshots.append(items.to_pylist())
    events = [row.model_dump(exclude={"created_at"}) for rows in recorder.take().values() for row in rows]
    table = memory._table
    return {"events": events, "snapshots": snapshots, "memory": memory, "version": await table.version(),
            "versions": len(await table.list_versions()),
            "fragments": (await table.stats())["fragment_stats"]["num_fragments"]}


def test_compaction_changes_no_recall_no_eviction_and_no_snapshot(tmp_path, monkeypatch):
    never = asyncio.run(grow(tmp_path / "never", compact_every=10**9, monkeypatch=monkeypatch))
    often = asyncio.run(grow(tmp_path / "often", compact_every=3, monkeypatch=monkeypatch))
    assert often["events"] == never["events"]
    assert {e["event"] for e in often["events"]} == {"insert", "retrieve", "evict"}
    recalls: dict[str, list[float]] = {}
    for e in often["events"]:
        if e["event"] == "retrieve":
            recalls.setdefault(e["episode_id"], []).append(e["similarity"])
    assert sum(len(set(s)) < len(s) for s in recalls.values()) > 10  # equally near lessons, recalled alike
    assert often["snapshots"] == never["snapshots"]  # rows, order and access counts


def test_the_table_keeps_at_most_one_cycle_of_versions_and_fragments(tmp_path, monkeypatch):
    grown = asyncio.run(grow(tmp_path, compact_every=4, monkeypatch=monkeypatch))
    assert grown["versions"] <= 4 and grown["fragments"] <= 4
    assert grown["version"] > 60  # still numbered on: a snapshot's memory_version orders it
    files = [f for f in (tmp_path / "run.lance").rglob("*") if f.is_file()]
    assert len(files) <= 4 * 4  # at most a data, a deletion, a transaction and a manifest file a write


def test_a_task_is_one_write_its_recalls_counts_its_lesson_and_an_eviction_together(tmp_path, monkeypatch):
    grown = asyncio.run(grow(tmp_path, compact_every=10**9, tasks=20, capacity=5, monkeypatch=monkeypatch))
    events = grown["events"]
    assert sum(e["event"] == "evict" for e in events) == 15
    # A probe's recall (its access counts) goes with the next write, a search reads no table: the next
    # task's, or a snapshot's (after the probes of tasks 9 and 19), which writes them first.
    assert grown["version"] == 1 + 20 + 2  # the empty table, then one write a task, and two snapshots


def test_access_counts_of_recalls_since_the_last_write_are_in_the_next_snapshot(tmp_path, monkeypatch):
    grown = asyncio.run(grow(tmp_path, compact_every=10**9, tasks=10, monkeypatch=monkeypatch))
    memory = grown["memory"]
    recalled = asyncio.run(memory.recall(TaskView(task_id="probe", family="f", question="question 2")))
    assert recalled
    items, _ = asyncio.run(memory.export())
    counts = {row["memory_id"]: row["access_count"] for row in items.to_pylist()}
    retrieved = [e["memory_id"] for e in grown["events"] if e["event"] == "retrieve"]
    retrieved += [r.memory_id for r in recalled]
    assert counts == {m: retrieved.count(m) for m in counts}


async def versions(directory: Path, name: str) -> int:
    table = await (await lancedb.connect_async(directory)).open_table(name)
    return len(await table.list_versions())


def test_an_agent_runs_memory_keeps_at_most_one_cycle_of_versions():
    run = run_variant("variant=memory", "stream.num_tasks=12", "variant.memory.compact_every=5")
    run_id = run.rows["episodes"][0]["run_id"]
    assert asyncio.run(versions(run.workdir / "memory", run_id)) <= 5


def test_the_playbook_mirror_keeps_one_version_the_playbook_as_it_is():
    varied = ("[{purpose: curate, contains: '(empty)', reply: 'ADD strategies: one two three'},"
              " {purpose: curate, reply: 'EDIT b1: one two three four'}]")
    run = run_variant("variant=playbook", "stream.num_tasks=5", f"model.scripted.rules={varied}")
    run_id = run.rows["episodes"][0]["run_id"]
    assert [e["event"] for e in run.rows["playbook_events"] if e["event"] in ("add", "edit")] == [
        "add", "edit", "edit", "edit", "edit"]  # five changes, each rewriting the mirror

    async def bullets() -> list[dict[str, Any]]:
        table = await (await lancedb.connect_async(run.workdir / "playbook")).open_table(run_id)
        return await table.query().select(["bullet_id", "text"]).to_list()

    assert asyncio.run(versions(run.workdir / "playbook", run_id)) == 1
    assert asyncio.run(bullets()) == [{"bullet_id": "b1", "text": "one two three four"}]

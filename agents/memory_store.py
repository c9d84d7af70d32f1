"""Episodic memory: what one agent run keeps from its own past tasks, in its own LanceDB table.

Two modes:
- `lessons`: after each task a distil call (purpose `distill`) turns the attempt and its outcome
  (and any reflections, which makes the lesson `unverified`) into a one-sentence lesson;
  retrieved lessons go into the task's user turn, before the question (never into the system
  prompt, which stays the same from task to task: agents/base.py, `messages_for`).
- `examples`: rewarded tasks are kept as worked examples (question, the agent's own answer) with
  no extra model call; retrieved examples become prior chat turns (self-generated few-shot).

Items are keyed by the embedding of their question (purpose `embed`); retrieval takes the top-k
by cosine similarity weighted by importance and counts each access. Beyond `capacity`, the item
with the lowest importance, then fewest accesses, then oldest is evicted. Every insert, retrieval
and eviction is logged as a memory event. The table is this agent's alone, and this agent is its
only writer.

The table stays compact as it learns (every LanceDB write is a new version and data fragment, and
a read, e.g. a snapshot's, reads every fragment): a task's changes (the access counts of what it
recalled, its new item, an eviction) are one write, made when the task stores its item, or when it
stores none; and every `compact_every` writes the fragments are merged and every older version is
deleted. Nothing needs an old version: a snapshot copies the rows (`export`) and a resumed run
replays from the start. Access counts are kept here between writes (eviction reads them here), so
counts from recalls after the last write (a probe after the stream's last task) reach a snapshot,
which writes them first, but not the table on disk.

Search is exact and in process (`VectorMirror`, agents/vectors.py): LanceDB stays the store
(persistence, snapshots, resume), and the memory keeps a float32 copy of its vectors beside it,
filled from the table's rows on `load` and appended on each write, so a search reads neither the
table nor its index, and the table has no index.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from agents.vectors import VectorMirror, compact_table, cosine
from envs.base import TaskView
from harness.agent_api import AttemptResult, Feedback, MemoryEventRow, Message, ModelClient, Recorder

MemoryMode = Literal["lessons", "examples"]

DISTILL_PROMPT = (
    "You answered a question.\nQuestion: {question}\nYour answer: {answer}\nOutcome: {outcome}\n"
    "{reflections}"
    "Write one short, general lesson (one sentence) that would help answer similar questions "
    "correctly next time."
)


COMPACT_EVERY = 25
"""Writes between compactions, as measured growing a memory write by write (python -m harness.bench,
section 6). At 1,000 lessons, every 5 / 10 / 25 / 50 / 100 writes: search 1.2 / 1.4 / 1.75 / 1.8 /
2.9 times as long as on the same lessons written in one go, peak disk 1.6 / 1.7 / 1.9 / 2.2 / 3.2 KB
a lesson, total time the same up to 25 and then longer (+25% at 50, +60% at 100). At 10,000 lessons
(indexed, where each compaction adds an index segment) 25 beat 10: search 1.7x against 1.9x, 340 s
against 500 s. On this shared 2-core machine the ratios vary by a third from run to run (1.75x and
1.2x at 1,000 lessons, every 25 writes). (Measured while the memory still searched the table and
indexed it from 5,000 lessons on; the memory's own search no longer reads the table.)"""


class Recalled(BaseModel):
    model_config = ConfigDict(frozen=True)

    memory_id: str
    text: str
    question: str
    similarity: float


def item_model(dim: int) -> type[Any]:
    """The table's row model; the Arrow schema is derived from it (LanceModel.to_arrow_schema).
    LanceDB is imported only here and when the table opens, i.e. in the worker that writes it."""
    from lancedb.pydantic import LanceModel, Vector

    class MemoryItem(LanceModel):
        memory_id: str
        kind: str
        text: str
        question: str
        source_task_id: str
        source_position: int
        reward: float
        verified: bool
        importance: float
        access_count: int
        vector: Vector(dim)  # type: ignore[valid-type]

    return MemoryItem


class EpisodicMemory:
    def __init__(self, llm: ModelClient, recorder: Recorder, directory: str | Path, table: str,
                 mode: MemoryMode = "lessons",
                 top_k: int = 3, capacity: int = 200, min_similarity: float = 0.0,
                 failure_importance: float = 0.5, distill_prompt: str | None = None,
                 compact_every: int = COMPACT_EVERY) -> None:
        distill_prompt = distill_prompt or DISTILL_PROMPT  # null in the yaml: the built-in prompt
        if mode not in ("lessons", "examples"):
            raise ValueError(f"variant.memory.mode must be lessons or examples, got {mode!r}")
        if top_k < 1 or capacity < 1 or compact_every < 1:
            raise ValueError("variant.memory.top_k, capacity and compact_every must be >= 1")
        self.llm = llm
        self.recorder = recorder
        self.directory = Path(directory)
        self.table_name = table
        self.mode: MemoryMode = mode
        self.top_k = top_k
        self.capacity = capacity
        self.min_similarity = min_similarity
        self.failure_importance = failure_importance
        self.distill_prompt = distill_prompt
        self.compact_every = compact_every
        self._items: dict[str, dict[str, Any]] = {}
        """Every stored item but its vector, with its access count as of now, in the order of its last
        change (stored, or recalled): what eviction reads, in the order a snapshot keeps."""
        self._mirror: VectorMirror | None = None
        """Every stored item's vector, stamped in `_items` order: what a search reads."""
        self._unsaved: set[str] = set()
        """Recalled items whose new access counts the table does not have yet."""
        self._writes = 0  # since the last compaction
        self.recalled: list[Recalled] = []
        self._table: Any = None
        self._query: tuple[str, list[float]] | None = None  # the current task's question, embedded once
        self._probe_vectors: dict[str, list[float]] = {}  # the sealed gate's probe questions, embedded once
        self._screened: dict[tuple[str, str], bool] = {}  # (id, text) -> the retrieval check's verdict

    async def _ranked(self, vector: list[float]) -> list[tuple[float, dict[str, Any]]]:
        """The `top_k * 4` stored items nearest to `vector` (exact cosine) above min_similarity, best
        first by similarity x importance (equally weighted ones nearest first, equally near ones in
        `_items` order)."""
        if self.size == 0 or self._mirror is None:
            return []
        scored = [(similarity, self._items[memory_id])
                  for similarity, memory_id in self._mirror.nearest(vector, self.top_k * 4)]
        scored = [(s, row) for s, row in scored if s >= self.min_similarity]
        scored.sort(key=lambda pair: pair[0] * pair[1]["importance"], reverse=True)
        return scored

    async def recall(self, task: TaskView,
                     screen: Callable[[Literal["lesson"], str, str], Awaitable[bool]] | None = None
                     ) -> list[Recalled]:
        """Top-k items for this task (by similarity x importance), kept in `recalled` for prompts;
        an item `screen` refuses (the safety check on retrieval) is left out, and the next one taken."""
        self.recalled = []
        if self.size == 0:
            return self.recalled
        scored = await self._ranked(await self._embed(task.question))
        if screen is not None:  # the best ones that pass, checked only as far as needed, once per text
            passed = []
            for similarity, row in scored:
                if len(passed) == self.top_k:
                    break
                key = (row["memory_id"], row["text"])
                if key not in self._screened:
                    self._screened[key] = await screen("lesson", row["memory_id"], row["text"])
                if self._screened[key]:
                    passed.append((similarity, row))
            scored = passed
        for similarity, row in scored[: self.top_k]:
            self.recalled.append(Recalled(memory_id=row["memory_id"], text=row["text"],
                                          question=row["question"], similarity=similarity))
            self._event("retrieve", row, similarity)
            self._unsaved.add(row["memory_id"])
            row["access_count"] += 1
        self._touch([r.memory_id for r in self.recalled])
        return self.recalled

    def recalled_lessons(self) -> str:
        """The lessons recalled for the current task, as the block that goes before its question."""
        if self.mode != "lessons" or not self.recalled:
            return ""
        return lessons_block([r.text for r in self.recalled])

    def example_turns(self) -> list[Message]:
        if self.mode != "examples":
            return []
        turns: list[Message] = []
        for r in reversed(self.recalled):  # the most relevant example sits next to the question
            turns += [{"role": "user", "content": r.question}, {"role": "assistant", "content": r.text}]
        return turns

    async def lessons_for(self, question: str,
                          candidate: tuple[str, list[float], float] | None = None) -> str:
        """The lessons block a task with this question would be shown, with `candidate` (a lesson's
        text, the vector of its question and its importance) stored beside the others: what the
        sealed gate compares. Nothing is recorded and nothing changes."""
        if self.mode != "lessons":
            return ""
        if question not in self._probe_vectors:
            [self._probe_vectors[question]] = await self.llm.embed([question])
        vector = self._probe_vectors[question]
        scored = [(s, row["text"], row["importance"]) for s, row in await self._ranked(vector)]
        if candidate is not None:
            similarity = cosine(vector, candidate[1])
            if similarity >= self.min_similarity:
                scored.append((similarity, candidate[0], candidate[2]))
        scored.sort(key=lambda item: item[0] * item[2], reverse=True)
        return lessons_block([text for _, text, _ in scored[: self.top_k]])

    @property
    def size(self) -> int:
        """Items stored."""
        return len(self._items)

    async def remember(self, feedback: Feedback, position: int,
                       admit: Callable[[str, str, list[float], float], Awaitable[bool]] | None = None
                       ) -> None:
        """Store an item from this task; `admit` (the safety check, and for lessons the sealed gate)
        may refuse it, and it is then not stored. Either way the task's changes are written."""
        row = await self._new_item(feedback, position, admit)
        victim = None
        if row is not None:
            await self._open(len(row["vector"]))
            assert self._mirror is not None
            self._items[row["memory_id"]] = {k: v for k, v in row.items() if k != "vector"}
            self._mirror.add(row["memory_id"], row["vector"])
            self._event("insert", row, None)
            if self.size > self.capacity:
                victim = self._evict()
            if victim == row["memory_id"]:  # evicted as soon as stored: it never reaches the table
                row, victim = None, None
        await self._write(row, victim)

    async def _new_item(self, feedback: Feedback, position: int,
                        admit: Callable[[str, str, list[float], float], Awaitable[bool]] | None
                        ) -> dict[str, Any] | None:
        final = feedback.final
        reflections = [a.reflection for a in feedback.attempts if a.reflection]
        if self.mode == "examples":
            if not final.rewarded or not final.said:
                return None
            text, verified = final.said, True
        else:
            text = await self._distill(feedback.task, final, reflections)
            verified = not reflections  # reflection text is the model's own, unchecked
        importance = 1.0 if final.rewarded else self.failure_importance
        vector = await self._embed(feedback.task.question)
        memory_id = uuid.uuid4().hex[:12]
        if admit is not None and not await admit(memory_id, text, vector, importance):
            return None
        return {"memory_id": memory_id, "kind": self.mode, "text": text,
                "question": feedback.task.question, "source_task_id": feedback.task.task_id,
                "source_position": position, "reward": final.reward, "verified": verified,
                "importance": importance, "access_count": 0, "vector": vector}

    async def export(self) -> tuple[Any, int | None]:
        """Every item (vectors included) as an Arrow table, in `_items` order (so that a memory
        `load`ed from it ranks equally near items as this one does), and the table's LanceDB version;
        (None, None) while the memory is empty and has no table yet."""
        if self._table is None:
            return None, None
        await self._write(None, None)  # access counts of recalls since the last write
        items = await self._table.to_arrow()
        row_of = {m: i for i, m in enumerate(items.column("memory_id").to_pylist())}
        return items.take([row_of[m] for m in self._items]), await self._table.version()

    async def load(self, items: Any) -> None:
        """Start from these items (an `export` of another run's memory), in this run's own table."""
        if items is None or items.num_rows == 0:
            return
        dim = items.schema.field("vector").type.list_size
        table = await self._open(dim)
        await table.add(items)
        self._items = {row["memory_id"]: row for row in items.drop_columns(["vector"]).to_pylist()}
        vectors = items.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        self._mirror = VectorMirror.of(list(self._items), vectors.astype(np.float32).reshape(-1, dim))

    async def _write(self, new: dict[str, Any] | None, victim: str | None) -> None:
        """One write for a task's changes: recalled items' access counts, a new item, an eviction."""
        assert self._mirror is not None or not self._unsaved
        mirror = self._mirror
        updates = [{**self._items[m], "vector": mirror.vector(m)}
                   for m in sorted(self._unsaved, key=mirror.stamp)] if mirror is not None else []
        rows = updates + ([new] if new is not None else [])
        if not rows and victim is None:
            return
        if updates or victim is not None:
            merge = (self._table.merge_insert("memory_id").when_matched_update_all()
                     .when_not_matched_insert_all())
            if victim is not None:
                merge = merge.when_not_matched_by_source_delete(f"memory_id = '{victim}'")
            await merge.execute(rows)
        else:
            await self._table.add(rows)
        self._unsaved.clear()
        self._writes += 1
        if self._writes >= self.compact_every:
            await self.compact()

    async def compact(self) -> None:
        """Merge the table's fragments and delete every older version."""
        self._writes = 0
        await compact_table(self._table)

    def _touch(self, memory_ids: list[str]) -> None:
        """Move these items after every other, in their present order, as changed now."""
        assert self._mirror is not None
        ordered = sorted(memory_ids, key=self._mirror.stamp)
        for memory_id in ordered:
            self._items[memory_id] = self._items.pop(memory_id)
        self._mirror.touch(ordered)

    async def _embed(self, question: str) -> list[float]:
        if self._query is None or self._query[0] != question:
            [vector] = await self.llm.embed([question])
            self._query = (question, vector)
        return self._query[1]

    async def _distill(self, task: TaskView, final: AttemptResult, reflections: list[str]) -> str:
        notes = "".join(f"Reflection (unverified): {r}\n" for r in reflections)
        prompt = self.distill_prompt.format(
            question=task.question, answer=final.said or "(no answer)",
            outcome="correct" if final.rewarded else "incorrect", reflections=notes)
        completion = await self.llm.complete([{"role": "user", "content": prompt}], purpose="distill")
        return " ".join(completion.text.split())

    def _evict(self) -> str:
        """The least important, least used, oldest item (the first of equals in `_items` order),
        dropped here; the caller's write deletes it from the table."""
        victim = min(self._items.values(),
                     key=lambda r: (r["importance"], r["access_count"], r["source_position"]))
        del self._items[victim["memory_id"]]
        assert self._mirror is not None
        self._mirror.remove(victim["memory_id"])
        self._unsaved.discard(victim["memory_id"])
        self._event("evict", victim, None)
        return victim["memory_id"]

    async def lance_table(self, dim: int) -> Any:
        """The memory's LanceDB table, opened (empty, for `dim`-dim vectors) if it is not yet: for a
        measurement of the table itself (its schema, a search on it, its versions), never to write to."""
        return await self._open(dim)

    async def _open(self, dim: int) -> Any:
        if self._table is None:
            import lancedb

            self.directory.mkdir(parents=True, exist_ok=True)
            db = await lancedb.connect_async(self.directory)
            # A table left by an earlier try of this run (a resume replays it from the start) goes
            # whole, versions included, so the replay's versions are those of an uninterrupted run.
            with contextlib.suppress(ValueError):
                await db.drop_table(self.table_name)
            self._table = await db.create_table(self.table_name, schema=item_model(dim), mode="overwrite")
        if self._mirror is None:
            self._mirror = VectorMirror(dim)
        return self._table

    def _event(self, event: Literal["insert", "retrieve", "evict"], row: dict[str, Any],
               similarity: float | None) -> None:
        self.recorder.emit(MemoryEventRow, event=event, memory_id=row["memory_id"], kind=self.mode,
                           text=row["text"], source_task_id=row["source_task_id"], similarity=similarity,
                           importance=row["importance"], verified=row["verified"])


def lessons_block(lessons: list[str]) -> str:
    """Lessons as a prompt shows them ("" for none)."""
    listing = "\n".join(f"- {text}" for text in lessons)
    return f"Lessons from your earlier tasks:\n{listing}" if listing else ""

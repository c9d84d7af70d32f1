"""Episodic memory: what one agent run keeps from its own past tasks, in its own LanceDB table.

Two modes:
- `lessons`: after each task a distil call (purpose `distill`) turns the attempt and its outcome
  (and any reflections, which makes the lesson `unverified`) into a one-sentence lesson;
  retrieved lessons are added to the system prompt.
- `examples`: rewarded tasks are kept as worked examples (question, the agent's own answer) with
  no extra model call; retrieved examples become prior chat turns (self-generated few-shot).

Items are keyed by the embedding of their question (purpose `embed`); retrieval takes the top-k
by cosine similarity weighted by importance and counts each access. Beyond `capacity`, the item
with the lowest importance, then fewest accesses, then oldest is evicted. Every insert, retrieval
and eviction is logged as a memory event. The table is this agent's alone, and this agent is its
only writer.

The table stays compact as it learns (every LanceDB write is a new version and data fragment, and
a search reads every fragment): a task's changes (the access counts of what it recalled, its new
item, an eviction) are one write, made when the task stores its item, or when it stores none; and
every `compact_every` writes the fragments are merged and every older version is deleted. Nothing
needs an old version: a snapshot copies the rows (`export`) and a resumed run replays from the
start. Access counts are kept here between writes (eviction reads them here), so counts from
recalls after the last write (a probe after the stream's last task) reach a snapshot, which
writes them first, but not the table on disk.
"""

from __future__ import annotations

import contextlib
import math
import uuid
import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from envs.base import TaskView
from harness.agent_api import AttemptResult, Feedback, Message, ModelClient, Recorder
from harness.records import MemoryEventRow

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
1.2x at 1,000 lessons, every 25 writes)."""

INDEX_SEGMENTS = 4
"""Segments the index may have before a compaction rebuilds it whole: each compaction adds the rows
written since as one more segment, a search reads every segment, and fragments of different segments
are never merged. At 10,000 lessons, 4 against 8: search 1.7x against 2.0x that of a fresh index,
in the same total time (python -m harness.bench, section 6)."""


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
                 index_from: int = 5000, compact_every: int = COMPACT_EVERY) -> None:
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
        self.index_from = index_from
        self.compact_every = compact_every
        self._items: dict[str, dict[str, Any]] = {}
        """Every stored item but its vector, in the table's row order, with its access count as of
        now: what eviction reads (rows a write updates move to the table's end, in this order)."""
        self._unsaved: dict[str, dict[str, Any]] = {}
        """Recalled items whose new access counts the table does not have yet: each whole row as read."""
        self._writes = 0  # since the last compaction
        self._index_segments = 0  # 0: no index yet
        self.recalled: list[Recalled] = []
        self._table: Any = None
        self._query: tuple[str, list[float]] | None = None  # the current task's question, embedded once
        self._probe_vectors: dict[str, list[float]] = {}  # the sealed gate's probe questions, embedded once
        self._screened: dict[tuple[str, str], bool] = {}  # (id, text) -> the retrieval check's verdict

    async def _ranked(self, vector: list[float]) -> list[tuple[float, dict[str, Any]]]:
        """Stored items near `vector` above min_similarity, best first by similarity x importance."""
        if self.size == 0:
            return []
        # Equally near items come back in the table's row order, which a write changes: written
        # first, the search sees the rows in the order it always has (another recall since the last
        # write, e.g. a probe's, or the sealed gate's searches before the task's item is stored).
        await self._write(None, None)
        rows = await (self._table.vector_search(vector).distance_type("cosine")
                      .limit(self.top_k * 4).to_list())
        scored = [(1.0 - row["_distance"], row) for row in rows]
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
            self._unsaved[row["memory_id"]] = {k: v for k, v in row.items() if not k.startswith("_")}
            self._items[row["memory_id"]]["access_count"] += 1
        recalled = {r.memory_id for r in self.recalled}
        for memory_id in [m for m in self._items if m in recalled]:  # as the write will place them
            self._items[memory_id] = self._items.pop(memory_id)
        return self.recalled

    def system_addendum(self) -> str:
        if self.mode != "lessons" or not self.recalled:
            return ""
        lessons = "\n".join(f"- {r.text}" for r in self.recalled)
        return f"\n\nLessons from your earlier tasks:\n{lessons}"

    def example_turns(self) -> list[Message]:
        if self.mode != "examples":
            return []
        turns: list[Message] = []
        for r in reversed(self.recalled):  # the most relevant example sits next to the question
            turns += [{"role": "user", "content": r.question}, {"role": "assistant", "content": r.text}]
        return turns

    async def addendum_for(self, question: str,
                           candidate: tuple[str, list[float], float] | None = None) -> str:
        """The lessons a task with this question would be shown, with `candidate` (a lesson's text
        the vector of its question and its importance) stored beside the others: what the sealed gate
        compares.
        Nothing is recorded and nothing changes."""
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
        lessons = "\n".join(f"- {text}" for _, text, _ in scored[: self.top_k])
        return f"\n\nLessons from your earlier tasks:\n{lessons}" if lessons else ""

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
        stored, victim = row is not None, None
        if row is not None:
            await self._open(len(row["vector"]))
            self._items[row["memory_id"]] = {k: v for k, v in row.items() if k != "vector"}
            self._event("insert", row, None)
            if self.size > self.capacity:
                victim = self._evict()
            if victim == row["memory_id"]:  # evicted as soon as stored: it never reaches the table
                row, victim = None, None
        await self._write(row, victim)
        if stored and not self.indexed and self.size >= self.index_from:
            await self._index()

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
        """Every item (vectors included) as an Arrow table, and the table's LanceDB version; (None,
        None) while the memory is empty and has no table yet."""
        if self._table is None:
            return None, None
        await self._write(None, None)  # access counts of recalls since the last write
        return await self._table.to_arrow(), await self._table.version()

    async def load(self, items: Any) -> None:
        """Start from these items (an `export` of another run's memory), in this run's own table."""
        if items is None or items.num_rows == 0:
            return
        table = await self._open(items.schema.field("vector").type.list_size)
        await table.add(items)
        self._items = {row["memory_id"]: row for row in items.drop_columns(["vector"]).to_pylist()}

    async def _write(self, new: dict[str, Any] | None, victim: str | None) -> None:
        """One write for a task's changes: recalled items' access counts, a new item, an eviction.
        The rows a write updates move to the table's end, in `_items` order, so the table's order
        stays the order `_items` has (and eviction's tie-break with it)."""
        updates = [{**self._unsaved[m], "access_count": item["access_count"]}
                   for m, item in self._items.items() if m in self._unsaved]
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
        """Merge the table's fragments, bring its index up to date, and delete every older version.
        Each compaction adds the items written since to the index as one more segment, and a search
        reads every segment; an index of `INDEX_SEGMENTS` is rebuilt whole instead."""
        self._writes = 0
        if self._index_segments >= INDEX_SEGMENTS:
            await self._index()
        elif self._index_segments:
            self._index_segments += 1
        await compact_table(self._table)

    @property
    def indexed(self) -> bool:
        """Whether the table has its vector index (from `index_from` items on)."""
        return self._index_segments > 0

    async def _index(self) -> None:
        """A flat scan is fine for small memories; past `index_from` items an IVF-HNSW index keeps a
        top-k search at a few milliseconds (python -m harness.bench). Built (or rebuilt) over every
        item, as one segment."""
        from lancedb.index import IvfHnswSq

        await self._table.create_index("vector", config=IvfHnswSq(distance_type="cosine"), replace=True)
        self._index_segments = 1

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
        """The least important, least used, oldest item (the first of equals in the table's order),
        dropped here; the caller's write deletes it from the table."""
        victim = min(self._items.values(),
                     key=lambda r: (r["importance"], r["access_count"], r["source_position"]))
        del self._items[victim["memory_id"]]
        self._unsaved.pop(victim["memory_id"], None)
        self._event("evict", victim, None)
        return victim["memory_id"]

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
        return self._table

    def _event(self, event: Literal["insert", "retrieve", "evict"], row: dict[str, Any],
               similarity: float | None) -> None:
        self.recorder.emit(MemoryEventRow, event=event, memory_id=row["memory_id"], kind=self.mode,
                           text=row["text"], source_task_id=row["source_task_id"], similarity=similarity,
                           importance=row["importance"], verified=row["verified"])


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

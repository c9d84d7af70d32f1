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
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Awaitable, Callable
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
                 index_from: int = 5000) -> None:
        distill_prompt = distill_prompt or DISTILL_PROMPT  # null in the yaml: the built-in prompt
        if mode not in ("lessons", "examples"):
            raise ValueError(f"variant.memory.mode must be lessons or examples, got {mode!r}")
        if top_k < 1 or capacity < 1:
            raise ValueError("variant.memory.top_k and variant.memory.capacity must be >= 1")
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
        self.size = 0
        self._inserts_since_index: int | None = None  # None: no index yet
        self.recalled: list[Recalled] = []
        self._table: Any = None
        self._query: tuple[str, list[float]] | None = None  # the current task's question, embedded once
        self._probe_vectors: dict[str, list[float]] = {}  # the sealed gate's probe questions, embedded once
        self._screened: dict[tuple[str, str], bool] = {}  # (id, text) -> the retrieval check's verdict

    async def _ranked(self, vector: list[float]) -> list[tuple[float, dict[str, Any]]]:
        """Stored items near `vector` above min_similarity, best first by similarity x importance."""
        if self.size == 0:
            return []
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
        if self.recalled:
            ids = ", ".join(f"'{r.memory_id}'" for r in self.recalled)
            await self._table.update(where=f"memory_id IN ({ids})",
                                     updates_sql={"access_count": "access_count + 1"})
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

    async def remember(self, feedback: Feedback, position: int,
                       admit: Callable[[str, str, list[float], float], Awaitable[bool]] | None = None
                       ) -> None:
        """Store an item from this task; `admit` (the safety check, and for lessons the sealed gate)
        may refuse it, and it is then not stored."""
        final = feedback.final
        reflections = [a.reflection for a in feedback.attempts if a.reflection]
        if self.mode == "examples":
            if not final.rewarded or not final.said:
                return
            text, verified = final.said, True
        else:
            text = await self._distill(feedback.task, final, reflections)
            verified = not reflections  # reflection text is the model's own, unchecked
        importance = 1.0 if final.rewarded else self.failure_importance
        vector = await self._embed(feedback.task.question)
        memory_id = uuid.uuid4().hex[:12]
        if admit is not None and not await admit(memory_id, text, vector, importance):
            return
        row = {"memory_id": memory_id, "kind": self.mode, "text": text,
               "question": feedback.task.question, "source_task_id": feedback.task.task_id,
               "source_position": position, "reward": final.reward, "verified": verified,
               "importance": importance, "access_count": 0, "vector": vector}
        table = await self._open(len(vector))
        await table.add([row])
        self.size += 1
        self._event("insert", row, None)
        if self.size > self.capacity:
            await self._evict()
        await self._maintain_index(table)

    async def export(self) -> tuple[Any, int | None]:
        """Every item (vectors included) as an Arrow table, and the table's LanceDB version; (None,
        None) while the memory is empty and has no table yet."""
        if self._table is None:
            return None, None
        return await self._table.to_arrow(), await self._table.version()

    async def load(self, items: Any) -> None:
        """Start from these items (an `export` of another run's memory), in this run's own table."""
        if items is None or items.num_rows == 0:
            return
        table = await self._open(items.schema.field("vector").type.list_size)
        await table.add(items)
        self.size = items.num_rows

    async def _maintain_index(self, table: Any) -> None:
        """A flat scan is fine for small memories; past `index_from` items an IVF-HNSW index keeps a
        top-k search at a few milliseconds (python -m harness.bench), refreshed every 1,000 inserts."""
        if self._inserts_since_index is None:
            if self.size >= self.index_from:
                from lancedb.index import IvfHnswSq

                await table.create_index("vector", config=IvfHnswSq(distance_type="cosine"))
                self._inserts_since_index = 0
            return
        self._inserts_since_index += 1
        if self._inserts_since_index >= 1000:
            await table.optimize()
            self._inserts_since_index = 0

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

    async def _evict(self) -> None:
        rows = (await self._table.query().select(
            ["memory_id", "kind", "text", "question", "source_task_id", "source_position", "importance",
             "access_count", "verified"]).to_list())
        victim = min(rows, key=lambda r: (r["importance"], r["access_count"], r["source_position"]))
        await self._table.delete(f"memory_id = '{victim['memory_id']}'")
        self.size -= 1
        self._event("evict", victim, None)

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


def cosine(a: list[float], b: list[float]) -> float:
    """Cosine similarity of two embeddings (the one measure memory, playbooks and skills use)."""
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0

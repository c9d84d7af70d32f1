"""Skills: a bounded library of procedural skills, admitted through a gate (GRASP, SkillOS).

Before each task the `top_k` skills most similar to it (cosine of the embeddings of the task and of
the skill's source task) go into the task's user turn, before the question (the system prompt stays
the same from task to task: agents/base.py, `messages_for`). After a failed task
(`propose_on=failure`, or after every task with `always`), the agent proposes one candidate skill
by comparing the failed attempt with successful ones it kept (same family first; purpose propose).
The candidate is admitted only through the gate: with `gate=sealed` (the default, GRASP's design)
the library with it must give a net improvement on a balanced held-out probe from the tuning split
(never the evaluated stream) and break at most `regression_budget` probe items the library without
it got right (harness/agent_run/gate.py; purpose validate). `gate=none` admits every candidate: the ablation
GRASP reports as no better than no skills. Beyond `max_skills` the least used (then oldest) skill
is evicted. Every proposal, its probe result and the decision, every retrieval and eviction is a
row of `skill_events`; with `variant.safety` a candidate is checked when written and each skill
again when it is retrieved.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

from pydantic import BaseModel

from agents.base import BaseAgent, require_placeholders
from agents.vectors import cosine
from envs.base import EnvEpisode, TaskView
from harness.agent_api import (
    AgentContext,
    Attempt,
    AttemptResult,
    Feedback,
    GateKind,
    Opening,
    Render,
    SkillEventRow,
    Trial,
)

PROPOSE_PROMPT = (
    "You keep a library of short, reusable skills for tasks like these.\n"
    "A failed attempt:\nTask: {question}\nAnswer: {answer}\n\n"
    "Successful attempts at similar tasks:\n{successes}\n\n"
    "Compare them and write one skill: one or two sentences of procedure that would turn the failure "
    "into a success on tasks like it. Reply with the skill only."
)


class Skill(BaseModel):
    skill_id: str
    family: str
    text: str
    vector: list[float]
    uses: int = 0
    position: int
    """Stream position of the task it was proposed after."""



class SkillsAgent(BaseAgent):
    @classmethod
    def uses_embedder(cls, options: dict[str, Any]) -> bool:
        return True  # skills are retrieved by similarity

    def __init__(self, context: AgentContext, max_skills: int = 8, top_k: int = 2,
                 min_similarity: float = 0.0,
                 propose_on: Literal["failure", "always"] = "failure", successes_kept: int = 3,
                 propose_prompt: str | None = None, **kwargs: Any) -> None:
        propose_prompt = propose_prompt or PROPOSE_PROMPT  # null in the yaml: the built-in prompt
        super().__init__(context, **kwargs)
        if max_skills < 1 or top_k < 1 or successes_kept < 0:
            raise ValueError("variant.max_skills and variant.top_k must be >= 1, variant.successes_kept >= 0")
        if propose_on not in ("failure", "always"):
            raise ValueError(f"variant.propose_on must be failure or always, got {propose_on!r}")
        require_placeholders("variant.propose_prompt", propose_prompt, "question", "answer", "successes")
        self.max_skills = max_skills
        self.top_k = top_k
        self.min_similarity = min_similarity
        self.propose_on = propose_on
        self.successes_kept = successes_kept
        self.propose_prompt = propose_prompt
        self.library: list[Skill] = []
        self.next_id = 1
        self.successes: dict[str, list[tuple[str, str]]] = defaultdict(list)
        self.retrieved: list[Skill] = []
        self._vectors: dict[str, list[float]] = {}  # question -> embedding, embedded once per run

    def gated_edits(self) -> tuple[GateKind, ...]:
        return ("skill", *super().gated_edits())

    async def run_task(self, trial: Trial) -> list[AttemptResult]:
        ranked = await self._rank(self.library, trial.task.question)
        self.retrieved = []
        for similarity, skill in ranked:
            if len(self.retrieved) == self.top_k:
                break
            if await self.guard.screen("skill", skill.skill_id, skill.text):
                self.retrieved.append(skill)
                self._event("retrieved", skill, similarity=similarity)
        return await super().run_task(trial)

    async def solve(self, episode: EnvEpisode) -> Attempt:
        return await self.act(episode, self.messages_for(episode.observation,
                                                         task_context=self._listing(self.retrieved)))

    @staticmethod
    def _listing(skills: list[Skill]) -> str:
        """Skills as a prompt shows them, before the task's question ("" for none)."""
        if not skills:
            return ""
        listing = "\n".join(f"- {s.text}" for s in skills)
        return f"Skills from your library for tasks like this:\n{listing}"

    async def learn(self, feedback: Feedback) -> None:
        await super().learn(feedback)
        for skill in self.retrieved:  # here, not at retrieval: replay probes do not learn
            skill.uses += 1
        final, task = feedback.final, feedback.task
        if final.rewarded:
            kept = self.successes[task.family]
            kept.append((task.question, final.said or ""))
            del kept[: max(0, len(kept) - self.successes_kept)]
            if self.propose_on == "failure":
                return
        await self._propose(task, final)

    async def _propose(self, task: TaskView, final: AttemptResult) -> None:
        similar = self.successes.get(task.family) or [s for kept in self.successes.values() for s in kept]
        shown = similar[-self.successes_kept:] if self.successes_kept else []
        listing = "\n".join(f"Task: {q}\nAnswer: {a}" for q, a in shown) or "(none yet)"
        reply = (await self.llm.complete([{"role": "user", "content": self.propose_prompt.format(
            question=task.question, answer=final.said or "(no answer)",
            successes=listing)}], purpose="propose")).text
        text = " ".join(reply.split())
        if not text:
            return
        skill = Skill(skill_id=f"s{self.next_id}", family=task.family, text=text,
                      vector=await self._vector(task.question), position=self.stream_position)
        self.next_id += 1
        self._event("proposed", skill)
        if not await self.guard.check("skill", skill.skill_id, text):
            self._event("rejected", skill, reason="blocked by the safety check")
            return
        audit = await self.guard.audit("skill", skill.skill_id, text, self._renderer(self.library),
                                       self._renderer([*self.library, skill]))
        if audit is not None:
            probe = {"probe_tasks": audit.probe_tasks, "incumbent_correct": audit.incumbent_correct,
                     "candidate_correct": audit.candidate_correct, "regressions": audit.regressions}
            if not audit.accepted:
                budget = self.guard.gate.regression_budget if self.guard.gate is not None else 0
                reason = (f"{audit.regressions} regressions (budget {budget})"
                          if audit.regressions > budget else "no net improvement")
                self._event("rejected", skill, reason=reason, **probe)
                return
            self._event("admitted", skill, **probe)
        else:
            self._event("admitted", skill, reason="ungated (gate=none)")
        self.library.append(skill)
        if len(self.library) > self.max_skills:
            victim = min(self.library, key=lambda s: (s.uses, s.position))
            self.library.remove(victim)
            self._event("evicted", victim)

    def _renderer(self, library: list[Skill]) -> Render:
        """A probe's prompt with the skills this library would retrieve for it (and no lessons)."""
        async def opening(view: TaskView) -> Opening:
            ranked = await self._rank(library, view.question)
            return self.opening(task_context=self._listing([skill for _, skill in ranked[: self.top_k]]))

        return opening

    async def _rank(self, library: list[Skill], question: str) -> list[tuple[float, Skill]]:
        if not library:
            return []
        vector = await self._vector(question)
        scored = [(cosine(vector, s.vector), s) for s in library]
        scored = [(sim, s) for sim, s in scored if sim >= self.min_similarity]
        return sorted(scored, key=lambda pair: (-pair[0], pair[1].position))

    async def _vector(self, question: str) -> list[float]:
        if question not in self._vectors:
            [self._vectors[question]] = await self.llm.embed([question])
        return self._vectors[question]

    def _event(self, event: str, skill: Skill, similarity: float | None = None, reason: str | None = None,
               probe_tasks: int | None = None, incumbent_correct: int | None = None,
               candidate_correct: int | None = None, regressions: int | None = None) -> None:
        self.recorder.emit(SkillEventRow, event=event, skill_id=skill.skill_id, family=skill.family,
                           text=skill.text, probe_tasks=probe_tasks, incumbent_correct=incumbent_correct,
                           candidate_correct=candidate_correct, regressions=regressions, reason=reason,
                           similarity=similarity)

    def memory_size(self) -> int | None:
        return len(self.library) + (super().memory_size() or 0)

    def export_state(self) -> dict[str, Any]:
        return {**super().export_state(), "next_id": self.next_id,
                "library": [s.model_dump() for s in self.library],
                "successes": {family: [list(pair) for pair in kept]
                              for family, kept in self.successes.items()}}

    def import_state(self, state: dict[str, Any]) -> None:
        super().import_state(state)
        self.library = [Skill(**s) for s in state.get("library", [])]
        self.next_id = state.get("next_id", len(self.library) + 1)
        self.successes = defaultdict(list, {f: [tuple(p) for p in kept]
                                            for f, kept in state.get("successes", {}).items()})

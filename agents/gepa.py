"""GEPA: reflective prompt evolution on a Pareto frontier (Agrawal et al., 2025).

Before the first task the agent evolves its system prompt on the tuning split, in GEPA's loop:
the split is cut into Pareto tasks (every kept candidate is scored on each) and feedback tasks
(minibatches to reflect on). Each round picks a parent from the Pareto frontier (a candidate that
is best on at least one Pareto task and not dominated, drawn with weight = the tasks it is best
on), answers a minibatch of feedback tasks with it, shows the model (purpose optimize) those
questions, answers and verdicts and asks for a better instruction, answers the same minibatch
with the proposal, and keeps the proposal only if it solved more; a kept one is scored on the
Pareto tasks. At the end two frontier candidates that win on different tasks are merged by the
model into one instruction, scored on the Pareto tasks like the others. The stream runs with the
candidate of the best mean Pareto score. Every single-turn answer counts against `max_rollouts`
(the default equals OPRO's default spend, so the two compare at equal tuning budget); all of the
calls are charged to the first episode. Every candidate is a row of `prompts`, kept or not, with
its parent, origin and whether it ended on the frontier. Held-out protocol as for `opro`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from agents.base import require_placeholders
from agents.baseline import BaselineAgent
from harness.agent_api import AgentContext, PromptRow, TuningAttempt, TuningSet

REFLECT_PROMPT = (
    "An assistant answered the questions below under this instruction:\n"
    "<instruction>\n{instruction}\n</instruction>\n\n"
    "Its answers, each with whether it was right:\n{examples}\n\n"
    "Read where it went wrong and what the right answers have in common, then write an improved "
    "instruction for such questions: keep what works, add the general strategy it lacked. "
    "Reply with the new instruction inside <instruction></instruction>."
)
MERGE_PROMPT = (
    "Two instructions for an assistant each answer different questions of the same kind right.\n"
    "First:\n<instruction>\n{first}\n</instruction>\n\n"
    "Second:\n<instruction>\n{second}\n</instruction>\n\n"
    "Write one instruction that keeps the strengths of both. "
    "Reply with it inside <instruction></instruction>."
)


@dataclass
class Candidate:
    prompt: str
    step: int
    origin: str
    """start, mutation or merge."""
    parent: int | None = None
    """Step of the candidate it came from (the first of two for a merge)."""
    scores: list[float] = field(default_factory=list)
    """Its score on each Pareto task (empty until scored on them)."""

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else 0.0


def frontier(scores: list[list[float]]) -> dict[int, int]:
    """GEPA's Pareto frontier over tasks: for each candidate that is best on some task and not
    dominated, the number of tasks it is best on. A candidate is dominated when another is best
    on every task it is best on and on more; of candidates best on exactly the same tasks the
    earlier stays. An instance-wise winner stays even when its mean is far below the best's."""
    if not scores or not scores[0]:
        return {}
    tasks = range(len(scores[0]))
    best = [max(s[t] for s in scores) for t in tasks]
    wins = {c: frozenset(t for t in tasks if s[t] == best[t]) for c, s in enumerate(scores)}
    wins = {c: w for c, w in wins.items() if w}
    kept: dict[int, int] = {}
    for c, won in wins.items():
        dominated = any(won < other or (won == other and o < c) for o, other in wins.items() if o != c)
        if not dominated:
            kept[c] = len(won)
    return kept


def _verdict(attempt: TuningAttempt) -> str:
    """Right or wrong, with the score where the env gave partial credit."""
    partial = f" (score {attempt.score:.2f})" if 0 < attempt.score < 1 else ""
    return ("right" if attempt.success else "wrong") + partial


def instruction_in(reply: str) -> str:
    """The instruction a reflection or merge reply proposes: inside its tags if it has them, else
    the whole reply (a small model often forgets them)."""
    found = re.search(r"<instruction>(.*?)(?:</instruction>|$)", reply, re.DOTALL)
    return (found.group(1) if found else reply).strip().strip('"').strip()


class GepaAgent(BaselineAgent):
    def __init__(self, context: AgentContext, max_rollouts: int = 80, pareto_size: int = 10,
                 minibatch: int = 3, merge: bool = True, reflect_prompt: str | None = None,
                 merge_prompt: str | None = None, **kwargs: Any) -> None:
        reflect_prompt = reflect_prompt or REFLECT_PROMPT  # null in the yaml: the built-in prompts
        merge_prompt = merge_prompt or MERGE_PROMPT
        super().__init__(context, **kwargs)
        if max_rollouts < 1 or pareto_size < 1 or minibatch < 1:
            raise ValueError("variant.max_rollouts, variant.pareto_size and variant.minibatch must be >= 1")
        require_placeholders("variant.reflect_prompt", reflect_prompt, "instruction", "examples")
        require_placeholders("variant.merge_prompt", merge_prompt, "first", "second")
        self.max_rollouts = max_rollouts
        self.pareto_size = pareto_size
        self.minibatch = minibatch
        self.merge = merge
        self.reflect_prompt = reflect_prompt
        self.merge_prompt = merge_prompt
        self.protocol = "online"  # until prepare() has tuned

    async def prepare(self, tuning: TuningSet) -> None:
        self.protocol = "held_out" if tuning.held_out else "resubstitution"
        if not tuning.tasks:
            return
        search = _Search(self, tuning, random.Random(f"gepa/{self.seed}/{self.repeat}"))
        await search.run()
        self.system_prompt = search.best().prompt
        search.record(self)


class _Search:
    """One GEPA search over a tuning set, within the agent's rollout budget."""

    def __init__(self, agent: GepaAgent, tuning: TuningSet, rng: random.Random) -> None:
        self.agent = agent
        self.tuning = tuning
        self.rng = rng
        count = len(tuning.tasks)
        # Pareto tasks first; the rest are the feedback tasks (all of them when the split is one task).
        cut = min(agent.pareto_size, max(count - 1, 1))
        self.pareto = list(range(cut))
        self.feedback = list(range(cut, count)) or self.pareto
        self.rollouts = 0
        self.pool: list[Candidate] = []  # scored on the Pareto tasks
        self.rejected: list[tuple[Candidate, float]] = []  # proposals with their minibatch score

    async def run(self) -> None:
        agent = self.agent
        await self._keep(Candidate(agent.system_prompt, 0, "start"))
        batch = min(agent.minibatch, len(self.feedback))
        reserve = len(self.pareto) if agent.merge else 0
        while self.rollouts + 2 * batch + len(self.pareto) + reserve <= agent.max_rollouts:
            await self._mutate(self._parent(), self.rng.sample(self.feedback, batch))
        if agent.merge and self.rollouts + len(self.pareto) <= agent.max_rollouts:
            await self._merge()

    def _parent(self) -> Candidate:
        weights = frontier([c.scores for c in self.pool])
        chosen = self.rng.choices(list(weights), weights=list(weights.values()))[0]
        return self.pool[chosen]

    async def _answers(self, prompt: str, indices: list[int]) -> list[TuningAttempt]:
        self.rollouts += len(indices)
        return await self.tuning.attempt(prompt, indices)

    async def _keep(self, candidate: Candidate) -> None:
        candidate.scores = [a.score for a in await self._answers(candidate.prompt, self.pareto)]
        self.pool.append(candidate)

    def _next_step(self) -> int:
        return len(self.pool) + len(self.rejected)

    def _known(self, prompt: str) -> bool:
        return not prompt or any(prompt == c.prompt for c in self.pool) or any(
            prompt == c.prompt for c, _ in self.rejected)

    async def _mutate(self, parent: Candidate, batch: list[int]) -> None:
        agent = self.agent
        answers = await self._answers(parent.prompt, batch)
        if all(a.success for a in answers):
            return  # nothing to learn from this minibatch (GEPA skips a perfect one)
        examples = "\n\n".join(f"Question: {a.task.question}\nAnswer: {a.answer.strip()}\n"
                               f"Verdict: {_verdict(a)}" for a in answers)
        reply = await agent.llm.complete(
            [{"role": "user", "content": agent.reflect_prompt.format(instruction=parent.prompt,
                                                                     examples=examples)}],
            purpose="optimize")
        proposal = instruction_in(reply.text)
        if self._known(proposal):
            return
        child = Candidate(proposal, self._next_step(), "mutation", parent.step)
        trial = sum(a.score for a in await self._answers(proposal, batch))
        if trial <= sum(a.score for a in answers):
            self.rejected.append((child, trial / len(batch)))
            return
        await self._keep(child)

    async def _merge(self) -> None:
        """Merge the two frontier candidates that together are best on the most Pareto tasks."""
        winners = list(frontier([c.scores for c in self.pool]))
        if len(winners) < 2:
            return
        best = [max(c.scores[t] for c in self.pool) for t in range(len(self.pareto))]

        def covered(i: int, j: int) -> int:
            first, second = self.pool[i].scores, self.pool[j].scores
            return sum(first[t] == best[t] or second[t] == best[t] for t in range(len(best)))

        i, j = max(((i, j) for i in winners for j in winners if i < j), key=lambda p: covered(*p))
        first, second = self.pool[i], self.pool[j]
        reply = await self.agent.llm.complete(
            [{"role": "user", "content": self.agent.merge_prompt.format(first=first.prompt,
                                                                        second=second.prompt)}],
            purpose="optimize")
        merged = instruction_in(reply.text)
        if not self._known(merged):
            await self._keep(Candidate(merged, self._next_step(), "merge", first.step))

    def best(self) -> Candidate:
        return max(self.pool, key=lambda c: (c.mean, -c.step))  # ties: the earlier candidate

    def record(self, agent: GepaAgent) -> None:
        chosen = self.best()
        on_frontier = {self.pool[c].step for c in frontier([c.scores for c in self.pool])}
        rows = [(c, c.mean, len(self.pareto), True) for c in self.pool]
        rows += [(c, score, min(agent.minibatch, len(self.feedback)), False) for c, score in self.rejected]
        for candidate, score, tasks, kept in sorted(rows, key=lambda row: row[0].step):
            agent.recorder.emit(PromptRow, step=candidate.step, prompt=candidate.prompt, tuning_score=score,
                                tuning_tasks=tasks, selected=candidate is chosen, protocol=agent.protocol,
                                origin=candidate.origin, parent_step=candidate.parent, kept=kept,
                                frontier=candidate.step in on_frontier)

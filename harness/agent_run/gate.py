"""The sealed gate: a harness-side audit of an agent's self-edits on held-out probe tasks.

Agents that write their own tests keep near-perfect self-scores while real performance falls
(SEAL's verifier-deployment gap), and skill writing without validation is no better than none
(GRASP). With `variant.gate=sealed`, every self-edit (a memory lesson, a playbook delta, a skill)
is put to this gate before it takes effect. The gate runs the agent's incumbent state and the state
with the edit on the same balanced probe items, drawn from the run's tuning split (never from the
evaluated stream; the planner refuses a sealed gate without one), and accepts the edit only if it
gives a net improvement (or, with `accept_ties`, no change) and breaks at most `regression_budget`
items the incumbent got right. The agent gets a yes or no: the probe items' answers and scores are
written to `gate_events` and never reach its prompts, and a rejected edit leaves the whole
incumbent state as it was. Each probe is shown what the agent would show on that task (its stable
system message, then the state's context for the task before the question), so an edit is judged
where it will act. Probe calls are billed under purpose `validate`; an incumbent state's outcomes
are remembered, so an unchanged state is not run again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from envs.base import EnvEpisode, Environment, Task, TaskView
from harness.agent_api import Audit, Opening, Recorder, Render
from harness.tables.records import GateEventRow, GateKind

PARALLEL_PROBES = 4
"""Probe episodes run at once (the model's own concurrency limit still applies)."""
Actor = Callable[[EnvEpisode, list[dict[str, Any]]], Awaitable[Any]]
"""Acts in an episode from these opening messages, billing its calls as `validate`."""


def balanced_probe(tasks: list[Task], size: int, seed: int) -> list[Task]:
    """`size` tasks dealt round-robin over the families (each family's order seeded), so no family
    dominates the audit."""
    rng = random.Random(seed)
    by_family: dict[str, list[Task]] = defaultdict(list)
    for task in sorted(tasks, key=lambda t: t.task_id):
        by_family[task.family].append(task)
    for family in by_family.values():
        rng.shuffle(family)
    order = sorted(by_family)
    dealt = [by_family[f][i] for i in range(max(map(len, by_family.values()), default=0))
             for f in order if i < len(by_family[f])]
    return dealt[:size]


class SealedGate:
    def __init__(self, tasks: list[Task], env: Environment, actor: Actor, recorder: Recorder, size: int = 10,
                 regression_budget: int = 0, accept_ties: bool = False, seed: int = 0) -> None:
        if not tasks:
            raise ValueError("the sealed gate needs held-out probe tasks (a tuning split)")
        self.items = balanced_probe(tasks, size, seed)
        self.env = env
        self.actor = actor
        self.regression_budget = regression_budget
        self.accept_ties = accept_ties
        self.recorder = recorder
        self._outcomes: dict[tuple[str, str], bool] = {}

    async def audit(self, kind: GateKind, edit_id: str, text: str, incumbent: Render,
                    candidate: Render) -> Audit:
        """Run both states on the probe items; the edit is accepted only by the rule above."""
        before = await self._run(incumbent)
        after = await self._run(candidate)
        regressions = sum(a and not b for a, b in zip(before, after, strict=True))
        net = sum(after) - sum(before)
        accepted = regressions <= self.regression_budget and (net > 0 or (self.accept_ties and net == 0))
        audit = Audit(probe_tasks=len(self.items), incumbent_correct=sum(before),
                      candidate_correct=sum(after), regressions=regressions, accepted=accepted)
        self.recorder.emit(GateEventRow, kind=kind, edit_id=edit_id, text=text[:2000], **audit.model_dump())
        return audit

    async def _run(self, render: Render) -> list[bool]:
        # A few at a time: an episode of a multi-step env may hold a simulator (a JVM for ScienceWorld).
        slots = asyncio.Semaphore(PARALLEL_PROBES)

        async def one(task: Task) -> bool:
            async with slots:
                return await self._one(task, render)

        return list(await asyncio.gather(*(one(task) for task in self.items)))

    async def _one(self, task: Task, render: Render) -> bool:
        opening = _opening(await render(TaskView.of(task)))
        # A task's observation is the same on every reset, so a prompt is known by its messages with
        # a placeholder for it, before any episode (a simulator, for some envs) is started.
        shown = json.dumps(opening(_OBSERVATION), sort_keys=True)
        key = (task.task_id, hashlib.sha256(shown.encode()).hexdigest())
        if key not in self._outcomes:
            episode = self.env.reset(task)
            try:
                await self.actor(episode, opening(episode.observation))
                self._outcomes[key] = episode.score().success
            finally:
                episode.close()
        return self._outcomes[key]


_OBSERVATION = "\x00observation\x00"


def _opening(shown: str | Opening) -> Opening:
    """What a render gave, as the probe's opening messages for an observation: a state's own opening
    (the agent's `messages_for`: the stable system message, then the task's context in the turn of
    its question), or a bare system prompt, followed by the observation."""
    if callable(shown):
        return shown
    return lambda observation: [{"role": "system", "content": shown},
                                {"role": "user", "content": observation}]

"""What the two weight learners share: attempts that remember their opening, examples from
outcomes, and an update every `update_every` tasks (agents/sft.py, agents/dpo.py).

The agent decides what to learn from; the harness's `Trainer` (its context's) trains the run's own
LoRA adapter, prices and records the update, and serves the run's later calls with the adapter.
Examples are single-turn: the opening messages of an attempt and the reply it ended with, so an
update teaches the model to answer that prompt; a multi-step attempt's opening and last action are
not a reply to each other, and are left out.
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, Literal

from agents.base import BaseAgent
from envs.base import EnvEpisode
from harness.agent_api import (
    AgentContext,
    Attempt,
    Feedback,
    LearningExample,
    LearntState,
    Message,
    Trainer,
    TrainOptions,
)


class WeightLearner(BaseAgent):
    """A BaseAgent whose learning is weight updates: every `update_every` tasks, one update on the
    examples gathered so far (the trainer keeps `training.max_examples` of the most recent)."""

    kind: Literal["sft", "dpo"]
    retry_temperature = 0.7
    """A retry resamples (greedy would repeat the same reply word for word)."""

    def __init__(self, context: AgentContext, update_every: int = 5,
                 training: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(context, **kwargs)
        if update_every < 1:
            raise ValueError(f"variant.update_every must be >= 1, got {update_every}")
        self._trainer = context.trainer
        self.update_every = update_every
        self.options = TrainOptions(**(training or {}))
        self.examples: list[LearningExample] = []
        self.tasks_seen = 0
        self.updates = 0
        self.openings: list[list[Message]] = []
        """The opening messages of each attempt of the task in progress."""

    @classmethod
    def learns_weights(cls, options: dict[str, Any]) -> bool:
        return True

    @property
    def trainer(self) -> Trainer:
        if self._trainer is None:  # a config check builds the agent without one
            raise RuntimeError(f"variant {self.kind} learns in the model's weights and this run has no "
                               "trainer (the harness gives one to agents whose learns_weights() says so)")
        return self._trainer

    async def solve(self, episode: EnvEpisode) -> Attempt:
        if self.attempt == 1:
            self.openings = []
        messages = self.messages_for(episode.observation)
        self.openings.append(messages)
        params = self.sampling(self.retry_temperature) if self.attempt > 1 else {}
        return await self.act(episode, messages, **params)

    async def learn(self, feedback: Feedback) -> None:
        await super().learn(feedback)
        self.examples += self.gather(feedback)
        self.tasks_seen += 1
        if self.tasks_seen % self.update_every == 0 and self.examples:
            update = await self.trainer.update(self.kind, self.examples, self.options)
            self.updates = update.update

    @abc.abstractmethod
    def gather(self, feedback: Feedback) -> list[LearningExample]:
        """What this task teaches."""

    def single_turn(self, feedback: Feedback) -> list[tuple[list[Message], str | None, bool]]:
        """Each attempt's opening, its reply as written and whether it was rewarded (single-step
        attempts only: module docstring)."""
        return [(opening, result.said, result.rewarded)
                for opening, result in zip(self.openings, feedback.attempts, strict=False)
                if result.steps <= 1]

    def export_state(self) -> dict[str, Any]:
        return {**super().export_state(), "adapter": self.trainer.adapter, "updates": self.updates,
                "tasks_seen": self.tasks_seen,
                "examples": [example.model_dump() for example in self.examples]}

    def import_state(self, state: dict[str, Any]) -> None:
        super().import_state(state)
        self.updates = state.get("updates", 0)
        self.tasks_seen = state.get("tasks_seen", 0)
        self.examples = [LearningExample(**example) for example in state.get("examples", [])]

    async def export_learnt(self) -> LearntState:
        learnt = await super().export_learnt()
        return learnt.model_copy(update={"files": self.trainer.saved()})

    async def import_learnt(self, state: dict[str, Any], memory: Any | None,
                            files: Path | None = None) -> None:
        await super().import_learnt(state, memory, files)
        await self.trainer.adopt(files if state.get("adapter") else None)
        if self.trainer.adapter != state.get("adapter"):
            raise ValueError(f"the snapshot's adapter is {self.trainer.adapter}, its state says "
                             f"{state.get('adapter')}: the snapshot's files do not match it")

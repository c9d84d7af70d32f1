"""The agent extension point.

An agent lives for its whole stream: the runner calls `solve` once per task and `learn` after the
task is scored, so whatever the agent carries from one task to the next (lessons, prompts, tools)
is its own state. Agents reach models only through their `ModelClient`.
"""

from __future__ import annotations

import abc

from pydantic import BaseModel, ConfigDict

from envs.base import EnvEpisode, Score, Task
from harness.model_client import Message, ModelClient

DEFAULT_SYSTEM_PROMPT = "You are a concise assistant. Answer with the answer only, no explanation."


class Attempt(BaseModel):
    """What the agent did on one try at a task."""

    model_config = ConfigDict(frozen=True)

    final_output: str | None
    """The last model output the agent sent to the environment."""
    steps: int
    """Actions taken in the environment."""


class Feedback(BaseModel):
    """What an agent may learn from after an episode."""

    model_config = ConfigDict(frozen=True)

    task: Task
    attempt: Attempt
    score: Score


class Agent(abc.ABC):
    def __init__(self, llm: ModelClient, system_prompt: str = DEFAULT_SYSTEM_PROMPT,
                 max_steps: int = 1) -> None:
        if max_steps < 1:
            raise ValueError(f"variant.max_steps must be >= 1, got {max_steps}")
        self.llm = llm
        self.system_prompt = system_prompt
        self.max_steps = max_steps

    @abc.abstractmethod
    async def solve(self, episode: EnvEpisode) -> Attempt:
        """Act in `episode` until it is done or the step limit is reached."""

    async def learn(self, feedback: Feedback) -> None:  # noqa: B027 - optional hook, no-op by default
        """Update the agent's own state after a scored episode (nothing, by default)."""

    def messages_for(self, observation: str) -> list[Message]:
        return [{"role": "system", "content": self.system_prompt},
                {"role": "user", "content": observation}]

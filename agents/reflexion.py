"""Reflexion: after a failed attempt, reflect on it and retry in a fresh conversation that carries
the reflections, before the question (Shinn et al., 2023). Reflections are model text: recorded,
never trusted."""

from __future__ import annotations

from typing import Any

from agents.base import BaseAgent, require_placeholders
from envs.base import EnvEpisode, TaskView
from harness.agent_api import AgentContext, Attempt, AttemptResult, Trial

REFLECT_PROMPT = (
    "You answered a question and your answer was judged wrong.\n"
    "Question: {question}\nYour answer: {answer}\n\n"
    "In one or two sentences, reflect on what went wrong and what to do differently next time."
)


class ReflexionAgent(BaseAgent):
    def __init__(self, context: AgentContext, reflect_prompt: str | None = None, max_attempts: int = 3,
                 **kwargs: Any) -> None:
        reflect_prompt = reflect_prompt or REFLECT_PROMPT  # null in the yaml: the built-in prompt
        super().__init__(context, max_attempts=max_attempts, **kwargs)
        require_placeholders("variant.reflect_prompt", reflect_prompt, "question", "answer")
        self.reflect_prompt = reflect_prompt
        self.reflections: list[str] = []

    async def run_task(self, trial: Trial) -> list[AttemptResult]:
        self.reflections = []  # reflections belong to one task; lessons across tasks are memory's job
        return await super().run_task(trial)

    async def solve(self, episode: EnvEpisode) -> Attempt:
        # The reflections are this task's own: they go before its question, not into the system
        # prompt, which stays the same on every attempt and every task (agents/base.py).
        notes = "\n".join(f"- {r}" for r in self.reflections)
        context = f"Your reflections on earlier failed attempts at this question:\n{notes}" if notes else ""
        return await self.act(episode, self.messages_for(episode.observation, task_context=context))

    async def before_retry(self, task: TaskView, results: list[AttemptResult]) -> str | None:
        prompt = self.reflect_prompt.format(question=task.question, answer=results[-1].said or "")
        completion = await self.llm.complete([{"role": "user", "content": prompt}], purpose="reflect")
        reflection = " ".join(completion.text.split())
        self.reflections.append(reflection)
        return reflection

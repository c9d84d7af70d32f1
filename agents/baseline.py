"""The baseline: act on each observation with a fixed prompt, learn nothing."""

from __future__ import annotations

from agents.base import Agent, Attempt
from envs.base import EnvEpisode


class BaselineAgent(Agent):
    async def solve(self, episode: EnvEpisode) -> Attempt:
        messages = self.messages_for(episode.observation)
        output: str | None = None
        steps = 0
        while not episode.done and steps < self.max_steps:
            completion = await self.llm.complete(messages, purpose="act")
            output = completion.text
            result = episode.step(output)
            steps += 1
            messages = [*messages, {"role": "assistant", "content": output},
                        {"role": "user", "content": result.observation}]
        return Attempt(final_output=output, steps=steps)

"""Retry: on failure, try again in a fresh conversation, resampled, with no reflection.

The cost-matched control for Reflexion: same attempts, none of the reflection calls.
"""

from __future__ import annotations

from typing import Any

from agents.base import BaseAgent
from envs.base import EnvEpisode
from harness.agent_api import AgentContext, Attempt


class RetryAgent(BaseAgent):
    def __init__(self, context: AgentContext, retry_temperature: float = 0.7, max_attempts: int = 3,
                 **kwargs: Any) -> None:
        super().__init__(context, max_attempts=max_attempts, **kwargs)
        if retry_temperature < 0:
            raise ValueError(f"variant.retry_temperature must be >= 0, got {retry_temperature}")
        self.retry_temperature = retry_temperature

    async def solve(self, episode: EnvEpisode) -> Attempt:
        # Greedy first; a retry resamples, else it would repeat the same answer word for word.
        params = self.sampling(self.retry_temperature) if self.attempt > 1 else {}
        return await self.act(episode, self.messages_for(episode.observation), **params)

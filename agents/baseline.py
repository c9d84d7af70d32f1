"""The baseline: act on each task with a fixed prompt, learn nothing."""

from __future__ import annotations

from agents.base import BaseAgent
from envs.base import EnvEpisode
from harness.agent_api import Attempt


class BaselineAgent(BaseAgent):
    async def solve(self, episode: EnvEpisode) -> Attempt:
        return await self.act(episode, self.messages_for(episode.observation))

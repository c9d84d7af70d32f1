"""Best-of-k: sample k answers, submit one, chosen by majority vote or by the judge.

A cost-matched simple baseline: k act calls (plus k judge calls with `select=judge`) per task,
no memory, no reflection. Single-turn environments only.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Literal

from agents.base import BaseAgent
from envs.base import EnvEpisode, extract_answer, normalize
from harness.agent_api import AgentContext, Attempt


class BestOfKAgent(BaseAgent):
    def __init__(self, context: AgentContext, k: int = 5, temperature: float = 0.7,
                 select: Literal["majority", "judge"] = "majority", **kwargs: Any) -> None:
        super().__init__(context, **kwargs)
        if k < 1:
            raise ValueError(f"variant.k must be >= 1, got {k}")
        if select not in ("majority", "judge"):
            raise ValueError(f"variant.select must be majority or judge, got {select!r}")
        self.judge = context.judge
        if select == "judge" and self.judge is None:
            raise ValueError("variant.select=judge needs a variant.judge section")
        self.k = k
        self.temperature = temperature
        self.select = select

    async def solve(self, episode: EnvEpisode) -> Attempt:
        if episode.multi_step:
            raise ValueError("best_of_k works on single-turn environments only")
        messages = self.messages_for(episode.observation)
        completions = await asyncio.gather(*(
            self.llm.complete(messages, purpose="act", **self.sampling(self.temperature, draw))
            for draw in range(self.k)))
        candidates = [c.text for c in completions]
        chosen = await self._choose(episode.observation, candidates)
        episode.step(chosen)
        return Attempt(final_output=chosen, steps=1)

    async def _choose(self, question: str, candidates: list[str]) -> str:
        if self.select == "judge":
            assert self.judge is not None
            scores = await asyncio.gather(*(self.judge.score(question, c) for c in candidates))
            return candidates[scores.index(max(scores))]
        votes = Counter(normalize(extract_answer(c)) for c in candidates)
        winner, _ = votes.most_common(1)[0]  # ties go to the answer sampled first
        return next(c for c in candidates if normalize(extract_answer(c)) == winner)

"""Self-Refine: draft, criticise, refine, within one attempt and with no feedback from the
environment between rounds (Madaan et al., 2023).

The draft is an act call; each round the model criticises its own latest answer (purpose
critique) and, unless the critique says it is correct, writes an improved one (act). Only the
final answer reaches the environment. This is the cost-matched counterpart of Reflexion, which
retries only after the environment said the answer was wrong: the comparison says what the
environment's signal is worth. In multi-step environments (TextWorld, tools) each episode has many
actions and no single answer to refine, so the agent acts as the baseline does there.
"""

from __future__ import annotations

import re
from typing import Any

from agents.base import BaseAgent, require_placeholders
from envs.base import EnvEpisode
from harness.agent_api import AgentContext, Attempt

CRITIQUE_PROMPT = (
    "Question: {question}\nProposed answer: {answer}\n\n"
    "Check the proposed answer. If it is correct and in the requested format, reply with the single "
    "word CORRECT. Otherwise say in one or two sentences what is wrong."
)
REFINE_PROMPT = "Feedback on your answer: {critique}\n\nGive an improved answer, in the requested format."
_CORRECT = re.compile(r"^\W*correct\b", re.IGNORECASE)


class SelfRefineAgent(BaseAgent):
    def __init__(self, context: AgentContext, max_rounds: int = 2, critique_prompt: str | None = None,
                 refine_prompt: str | None = None, **kwargs: Any) -> None:
        critique_prompt = critique_prompt or CRITIQUE_PROMPT  # null in the yaml: the built-in prompt
        refine_prompt = refine_prompt or REFINE_PROMPT  # null in the yaml: the built-in prompt
        super().__init__(context, **kwargs)
        if max_rounds < 1:
            raise ValueError(f"variant.max_rounds must be >= 1, got {max_rounds}")
        require_placeholders("variant.critique_prompt", critique_prompt, "question", "answer")
        require_placeholders("variant.refine_prompt", refine_prompt, "critique")
        self.max_rounds = max_rounds
        self.critique_prompt = critique_prompt
        self.refine_prompt = refine_prompt

    async def solve(self, episode: EnvEpisode) -> Attempt:
        messages = self.messages_for(episode.observation)
        if episode.multi_step:
            return await self.act(episode, messages)
        answer = (await self.llm.complete(messages, purpose="act")).text
        for _ in range(self.max_rounds):
            critique = (await self.llm.complete(
                [{"role": "user", "content": self.critique_prompt.format(question=episode.observation,
                                                                         answer=answer)}],
                purpose="critique")).text
            if _CORRECT.match(critique):
                break
            answer = (await self.llm.complete(
                [*messages, {"role": "assistant", "content": answer},
                 {"role": "user", "content": self.refine_prompt.format(critique=" ".join(critique.split()))}],
                purpose="act")).text
        episode.step(answer)
        return Attempt(final_output=answer, steps=1)

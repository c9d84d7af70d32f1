"""OPRO: optimise the system prompt with a meta-prompt before the stream (Yang et al., 2023).

Before the first task, the agent scores its starting prompt on the tuning tasks, then for `steps`
rounds asks the model (purpose optimize) for a better instruction given the history of prompts
and scores, scores each proposal the same way (purpose optimize), and keeps the best for the whole
stream. All of it is charged to the first episode. With a held-out tuning split the run is
labelled `held_out`; without one it tunes on its own stream and is labelled `resubstitution`.
"""

from __future__ import annotations

from typing import Any

from agents.base import require_placeholders
from agents.baseline import BaselineAgent
from harness.agent_api import AgentContext, PromptRow, TuningSet

META_PROMPT = (
    "You write instructions (system prompts) for an assistant that answers questions like these:\n"
    "{examples}\n\n"
    "Earlier instructions and the share of such questions answered exactly right with each, "
    "worst first:\n{history}\n\n"
    "Write a new instruction, different from all of the above, that would score higher. "
    "Reply with the instruction only."
)


class OproAgent(BaselineAgent):
    def __init__(self, context: AgentContext, steps: int = 3, tuning_limit: int = 20, meta_examples: int = 3,
                 meta_prompt: str | None = None, **kwargs: Any) -> None:
        meta_prompt = meta_prompt or META_PROMPT  # null in the yaml: the built-in prompt
        super().__init__(context, **kwargs)
        if steps < 1 or tuning_limit < 1:
            raise ValueError("variant.steps and variant.tuning_limit must be >= 1")
        require_placeholders("variant.meta_prompt", meta_prompt, "examples", "history")
        self.steps = steps
        self.tuning_limit = tuning_limit
        self.meta_examples = meta_examples
        self.meta_prompt = meta_prompt
        self.protocol = "online"  # until prepare() has tuned

    async def prepare(self, tuning: TuningSet) -> None:
        self.protocol = "held_out" if tuning.held_out else "resubstitution"
        n = min(self.tuning_limit, len(tuning.tasks))
        history = [(self.system_prompt, await tuning.evaluate(self.system_prompt, n))]
        examples = "\n".join(f"- {t.question}" for t in tuning.tasks[: self.meta_examples])
        for _ in range(self.steps):
            ranked = sorted(history, key=lambda pair: pair[1])
            listing = "\n".join(f"Instruction: {p}\nScore: {round(100 * s)}%" for p, s in ranked)
            reply = await self.llm.complete(
                [{"role": "user", "content": self.meta_prompt.format(examples=examples, history=listing)}],
                purpose="optimize")
            proposal = reply.text.strip().strip('"').strip()
            if proposal:
                history.append((proposal, await tuning.evaluate(proposal, n)))
        best = max(range(len(history)), key=lambda i: (history[i][1], -i))  # ties: the earlier prompt
        self.system_prompt = history[best][0]
        for i, (prompt, score) in enumerate(history):
            self.recorder.emit(PromptRow, step=i, prompt=prompt, tuning_score=score, tuning_tasks=n,
                               selected=i == best, protocol=self.protocol,
                               origin="start" if i == 0 else "proposal")

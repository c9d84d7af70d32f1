"""Preference learning from the agent's own attempts (DPO): to one task's opening, a reply that
succeeded preferred to one that failed. The pairs come from the attempts of a task (a failed
attempt is retried, resampled, up to `max_attempts`) and, with stream.feedback=answer, from the
revealed reference answer preferred to a failed reply when no attempt succeeded. Every
`update_every` tasks, a DPO update (trl's) on the pairs so far."""

from __future__ import annotations

from typing import Any

from agents.weights import WeightLearner
from harness.agent_api import AgentContext, Feedback, LearningExample


class DpoAgent(WeightLearner):
    kind = "dpo"

    def __init__(self, context: AgentContext, max_attempts: int = 2, **kwargs: Any) -> None:
        super().__init__(context, max_attempts=max_attempts, **kwargs)

    def gather(self, feedback: Feedback) -> list[LearningExample]:
        attempts = self.single_turn(feedback)
        failed = [(opening, said) for opening, said, rewarded in attempts if not rewarded and said]
        if not failed:
            return []
        opening, rejected = failed[0]
        chosen = next((said for _, said, rewarded in attempts if rewarded and said), None)
        if chosen is not None:
            return [LearningExample(messages=opening, reply=chosen, rejected=rejected)]
        if feedback.answer is not None and feedback.answer != rejected:
            return [LearningExample(messages=opening, reply=feedback.answer, rejected=rejected,
                                    source="revealed")]
        return []

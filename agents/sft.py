"""Online fine-tuning on the agent's own successes (STaR, ReST-EM): every `update_every` tasks, LoRA
steps on the replies that succeeded so far (rejection sampling) and, with stream.feedback=answer, on
the reference answers revealed after each task (online supervised learning). The `training` rows
count which: examples_own and examples_revealed."""

from __future__ import annotations

from agents.weights import WeightLearner
from harness.agent_api import Feedback, LearningExample


class SftAgent(WeightLearner):
    kind = "sft"

    def gather(self, feedback: Feedback) -> list[LearningExample]:
        attempts = self.single_turn(feedback)
        own = [LearningExample(messages=opening, reply=said)
               for opening, said, rewarded in attempts if rewarded and said]
        if own or feedback.answer is None or not attempts:
            return own[:1]  # one success a task: the same prompt's replies would weigh it twice
        return [LearningExample(messages=attempts[0][0], reply=feedback.answer, source="revealed")]

"""`judge`: an LLM grades the reply against the reference with a rubric (billed as `judge`).

For answers no rule can check: free-form explanations, long answers, the papers that grade with a
model (SimpleQA's and HotpotQA's model-graded variants, inspect_ai's `model_graded_qa`). The judge
is the run's own model, asked through the run's model client, so each verdict is a row of
`llm_calls` with purpose `judge`, counted in the run's spend like every call. It sees the question,
the reference (and its aliases), the reply and the rubric, and ends its answer with `GRADE: C`
(correct), `GRADE: P` (partly correct, half marks where `partial` is on) or `GRADE: I`. A reply
without a readable grade scores 0, with that reason.

Options: `rubric` (what counts as correct; the default asks for the same final answer as the
reference, however phrased), `prompt` (the whole prompt, with `{question}`, `{reference}`,
`{reply}` and `{rubric}`), `partial` (true: P is worth 0.5), `max_tokens` (the judge's reply).
"""

from __future__ import annotations

import re

from envs.base import Checks, Task, Verdict
from envs.scorers import SettlingScorer

RUBRIC = ("The reply is correct if its final answer means the same as the reference answer (or one of "
          "its accepted aliases), however it is phrased; extra explanation is fine, a different or "
          "missing final answer is not.")
PROMPT = """You are grading a reply to a question against its reference answer.

[Question]
{question}

[Reference answer]
{reference}

[Reply]
{reply}

[Rubric]
{rubric}

Reason briefly, then end with one line: GRADE: C if the reply is correct, GRADE: P if it is partly \
correct, GRADE: I if it is incorrect."""
GRADE = re.compile(r"GRADE\s*:\s*\**\s*([CPI])\b", re.IGNORECASE)
PLACEHOLDERS = ("{question}", "{reference}", "{reply}", "{rubric}")


class JudgeScorer(SettlingScorer):
    name = "judge"

    def __init__(self, rubric: str = RUBRIC, prompt: str = PROMPT, partial: bool = True,
                 max_tokens: int = 512) -> None:
        missing = [p for p in PLACEHOLDERS if p not in prompt]
        if missing:
            raise ValueError(f"scorer judge: prompt must contain {' and '.join(missing)}")
        if max_tokens < 1:
            raise ValueError(f"scorer judge: max_tokens must be >= 1, got {max_tokens}")
        self.rubric, self.prompt, self.partial, self.max_tokens = rubric, prompt, partial, max_tokens

    async def settle(self, reply: str, task: Task, checks: Checks) -> Verdict:
        reference = " | ".join([task.answer, *task.aliases])
        content = self.prompt.format(question=task.question, reference=reference, reply=reply,
                                     rubric=self.rubric)
        said = (await checks.complete([{"role": "user", "content": content}], purpose="judge",
                                   max_tokens=self.max_tokens)).text
        grades = GRADE.findall(said)
        answer = reply.strip() or None
        if not grades:
            return Verdict(score=0.0, success=False, response=answer,
                           reason="the judge gave no grade (GRADE: C, P or I)")
        grade = grades[-1].upper()  # its last word on it
        score = {"C": 1.0, "P": 0.5 if self.partial else 0.0, "I": 0.0}[grade]
        words = {"C": "correct", "P": "partly correct", "I": "incorrect"}[grade]
        return Verdict(score=score, success=grade == "C", response=answer, reason=f"the judge: {words}")

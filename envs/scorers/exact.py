"""`exact`: the answer line (or the task's `answer_pattern` group) equal to the reference or an
alias after folding case, accents, punctuation and spacing: what every single-turn environment
scored with before scorers had names."""

from __future__ import annotations

from envs.base import Task, extract_answer, normalize
from envs.scorers import Scorer, Verdict


class Exact(Scorer):
    name = "exact"

    def score(self, reply: str, task: Task) -> Verdict:
        response = extract_answer(reply, task.answer_pattern)
        accepted = {normalize(a) for a in (task.answer, *task.aliases)}
        if normalize(response) in accepted:
            return Verdict(score=1.0, success=True, response=response, reason="matches the reference")
        return Verdict(score=0.0, success=False, response=response,
                       reason="no answer line" if not response else "differs from the reference")

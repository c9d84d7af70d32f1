"""`includes`: the reference (or an alias) occurs somewhere in the reply, both folded as
`envs.base.normalize` folds them (case, accents, punctuation, spacing) and matched on word
boundaries, so "Paris" is found in "I believe it is paris." but not in "Parisian".

This is the lenient "accuracy" of open-domain QA on free-form generations: PopQA (Mallen et al.,
2023, "When Not to Trust Language Models") and Self-RAG (Asai et al., 2023) count a generation
correct when it contains a gold answer, and so does the "contains" match of lm-evaluation-harness
style evaluations of TriviaQA / Natural Questions. It rewards hedging ("Paris or Lyon" contains
"Paris"), which is why it is not the default.

Options:
    word_boundaries: True (default): the folded reference must stand as whole words in the folded
        reply. False: any substring counts, for scripts written without spaces (Chinese, Japanese).
"""

from __future__ import annotations

from envs.base import Task, normalize
from envs.scorers import Scorer, Verdict, require_text

_SHOWN = 200
"""At most this many characters of a reply are shown as the response of a failed verdict."""


class Includes(Scorer):
    name = "includes"

    def __init__(self, word_boundaries: bool = True) -> None:
        self.word_boundaries = word_boundaries

    def check_reference(self, task: Task) -> None:
        require_text(task, ", so every reply would contain it")

    def score(self, reply: str, task: Task) -> Verdict:
        try:
            folded = normalize(reply)
        except Exception as error:  # a reply that is not text at all (never raise on a reply)
            return Verdict(score=0.0, success=False, response=None,
                           reason=f"unreadable reply ({type(error).__name__})")
        # Spaces around both sides make "occurs as whole words" a plain substring test: normalize
        # has already turned every punctuation mark and run of whitespace into one space.
        haystack = f" {folded} " if self.word_boundaries else folded
        for form in (task.answer, *task.aliases):
            needle = normalize(form)
            if needle and (f" {needle} " if self.word_boundaries else needle) in haystack:
                return Verdict(score=1.0, success=True, response=form,
                               reason="the reply contains the reference" if form == task.answer
                               else f"the reply contains the alias {form!r}")
        shown = " ".join(reply.split())
        shown = shown if len(shown) <= _SHOWN else shown[: _SHOWN - 1] + "…"
        return Verdict(score=0.0, success=False, response=shown or None,
                       reason="empty reply" if not folded else "the reply does not contain the reference")

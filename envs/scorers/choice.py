"""`choice`: multiple choice. The task's options are `task.metadata["choices"]` (a list of strings,
lettered A, B, C, ... in order; the environment shuffles them if it wants to, not the scorer), and
the reference is a letter ("B", "(b)") or the text of the correct option.

Reading the reply follows GPQA's and MMLU-Pro's answer extraction, made stricter where they guess.
simple-evals (GPQA) takes the letter after "Answer:", MMLU-Pro (Wang et al., 2024) the letter of
"answer is (X)", falling back to "Answer: X" and then to the last capital letter of the reply.
Here: the text after an anchor ("answer is", "answer:", "the correct option is", "choice:", the last
anchor first) to the end of its line, else the reply's last non-empty line. In that text, in order:
    1. the text is itself a letter, bare or wrapped: "B", "b", "(B)", "B)", "**B**", "[B].";
    2. letters in a wrapper: "(B)", "B)", "[B]", "**B**", "\\boxed{B}", "\\text{B}";
    3. standalone capital letters ("B", "B."; not the "I" of "I'm");
    4. an option's full text, folded as `normalize` folds it ("the answer is Paris"); an option whose
       text lies inside another named one ("Paris" in "Paris, Texas") does not count twice.
The first of these that names one option decides; one that names several letters or options is
ambiguous and fails ("A or B"; "B, not A") rather than guessing, where MMLU-Pro's fallback would
take the last. Only letters of the task's options count (an "E" with four options is no choice).

Options: none.
"""

from __future__ import annotations

import re
import string
from collections import deque
from typing import Any

from envs.base import Task, normalize
from envs.scorers import Scorer, Verdict

LETTERS = string.ascii_uppercase

_ANCHOR = re.compile(r"\b(?:answer|choice|option)\b\s*(?:\*\*)?\s*(?:is\b\s*:?|:|=)", re.IGNORECASE)
_WRAPPED = re.compile(r"(?<![A-Za-z0-9])(?:\(|\[|\*\*|\\boxed\{|\\text(?:bf)?\{|\{)"
                      r"\s*([A-Za-z])\s*(?:\)|\]|\*\*|\})"
                      r"|(?<![A-Za-z0-9\\])([A-Z])\)")
# A lone capital, but not the pronoun "I" before a lowercase word ("I am not sure", "I think B"):
# with nine options or more it would read as option I.
_BARE = re.compile(r"(?<![A-Za-z0-9_\\'’])([A-Z])(?![A-Za-z0-9_'’])(?!(?<=I)\s+[a-z])")
_WRAPPERS = " \t*_`()[]{}.:,;!'\"$"
_ANCHORS_READ, _TEXT_READ, _LINE_READ = 8, 300, 1000


class Ambiguous(Exception):
    """The reply names several options."""


def options_of(task: Task) -> list[str]:
    """The task's options; ValueError (one line) where metadata["choices"] is not a list of them."""
    choices: Any = task.metadata.get("choices")
    if not isinstance(choices, list | tuple) or not all(isinstance(c, str) for c in choices):
        raise ValueError(f"task {task.task_id}: metadata['choices'] must be a list of option texts, "
                         f"got {type(choices).__name__}")
    if not 2 <= len(choices) <= len(LETTERS):
        raise ValueError(f"task {task.task_id}: {len(choices)} choices; 2 to {len(LETTERS)} can be lettered")
    return list(choices)


def _named(found: list[str], letters: str) -> str | None:
    named = sorted({letter.upper() for letter in found} & set(letters))
    if len(named) > 1:
        raise Ambiguous(f"names {', '.join(named[:-1])} and {named[-1]}")
    return named[0] if named else None


def _by_text(text: str, options: list[str]) -> str | None:
    folded = f" {normalize(text)} "
    padded = {i: f" {normalize(option)} " for i, option in enumerate(options)}
    named = {i: text for i, text in padded.items() if text.strip() and text in folded}
    # "Paris, Texas" names "Paris" too: keep only options not inside another named one.
    kept = sorted(i for i in named if not any(i != j and named[i] in named[j] for j in named))
    if len(kept) > 1:
        raise Ambiguous(f"names the options {', '.join(LETTERS[i] for i in kept)}")
    return LETTERS[kept[0]] if kept else None


def read_choice(text: str, options: list[str]) -> str | None:
    """The letter one piece of text names (steps 1 to 4 of the module docstring), None where it names
    none; Ambiguous where it names several."""
    letters = LETTERS[: len(options)]
    core = text.strip(_WRAPPERS)
    if len(core) == 1 and core.upper() in letters:
        return core.upper()
    wrapped = _named([a or b for a, b in _WRAPPED.findall(text)], letters)
    if wrapped:
        return wrapped
    bare = _named(_BARE.findall(text), letters)
    return bare or _by_text(text, options)


def answer_texts(reply: str) -> list[str]:
    """Where the answer may be, most likely first: after each anchor (the last first), to the end of
    its line; then the reply's last non-empty line."""
    # Bounded so that a hostile reply ("answer:" a million times, one endless line) stays linear: an
    # answer follows its anchor closely, and only the last few anchors are worth reading.
    texts = []
    for match in reversed(deque(_ANCHOR.finditer(reply), maxlen=_ANCHORS_READ)):
        end = reply.find("\n", match.end())
        texts.append(reply[match.end(): min(end if end >= 0 else len(reply), match.end() + _TEXT_READ)])
    last_line = next((line for line in reversed(reply.splitlines()) if line.strip()), "")
    return [*texts, last_line[-_LINE_READ:]] if last_line else texts


class Choice(Scorer):
    name = "choice"

    def _reference_letter(self, form: str, task: Task, options: list[str]) -> str:
        core = form.strip(_WRAPPERS)
        if len(core) == 1 and core.upper() in LETTERS[: len(options)]:
            return core.upper()
        matching = [LETTERS[i] for i, option in enumerate(options) if normalize(option) == normalize(form)]
        if len(matching) == 1:
            return matching[0]
        if matching:
            raise ValueError(f"task {task.task_id}: reference {form!r} is the text of several options "
                             f"({', '.join(matching)})")
        raise ValueError(f"task {task.task_id}: reference {form!r} is neither a letter A-"
                         f"{LETTERS[len(options) - 1]} nor the text of an option")

    def _accepted(self, task: Task) -> set[str]:
        options = options_of(task)
        return {self._reference_letter(form, task, options) for form in (task.answer, *task.aliases)}

    def check_reference(self, task: Task) -> None:
        self._accepted(task)

    def score(self, reply: str, task: Task) -> Verdict:
        try:
            accepted = self._accepted(task)
            options = options_of(task)
        except ValueError:  # refused by check_reference before any run; a score never raises
            return Verdict(score=0.0, success=False, response=None,
                           reason="the reference is not one of the task's options")
        try:
            chosen = None
            for text in answer_texts(reply):
                chosen = read_choice(text, options)
                if chosen:
                    break
        except Ambiguous as ambiguous:
            return Verdict(score=0.0, success=False, response=None,
                           reason=f"ambiguous: the answer {ambiguous}")
        except Exception as error:  # not text: never raise on a reply
            return Verdict(score=0.0, success=False, response=None,
                           reason=f"unreadable reply ({type(error).__name__})")
        if chosen is None:
            return Verdict(score=0.0, success=False, response=None,
                           reason="no option letter or option text in the reply" if reply.strip()
                           else "empty reply")
        if chosen in accepted:
            return Verdict(score=1.0, success=True, response=chosen, reason=f"chose {chosen}, the reference")
        return Verdict(score=0.0, success=False, response=chosen,
                       reason=f"chose {chosen}; the reference is {' or '.join(sorted(accepted))}")

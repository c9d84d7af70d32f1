"""`regex`: a regular expression picks the answer out of the reply, which is then compared with the
reference and its aliases after folding case, accents, punctuation and spacing (`normalize`).

The answer is the pattern's `answer` group where it has one, else the whole match. This is
lm-evaluation-harness's `regex` filter (e.g. GSM8K's "strict-match" `#### (\\-?[0-9\\.\\,]+)`,
or "The answer is (.*)" for chain-of-thought tasks) followed by its exact match with
`ignore_case` and `ignore_punctuation`; like that filter, the last match is taken by default
(`group_select: -1`), since a reasoning reply restates intermediate answers before its final one.

Options:
    pattern: the regular expression (Python syntax), searched anywhere in the reply; required.
    flags: Python's inline flag letters, any of "i" (ignore case), "m" (^ and $ at every line),
        "s" (. matches a newline), "x" (verbose), "a" (ASCII classes); default none.
    last: True (default): the last match in the reply; False: the first.

The pattern runs on each reply for at most `PATTERN_TIMEOUT_S` (the `regex` module's time limit;
Python's `re` has none, and a pattern such as `(x+x+)+y` backtracks for minutes on a long reply): a
reply it cannot finish on fails, and says so.
"""

from __future__ import annotations

import re

import regex

from envs.base import PATTERN_TIMEOUT_S, Task, normalize
from envs.scorers import Scorer, Verdict, require_text

_FLAGS = {"i": regex.IGNORECASE, "m": regex.MULTILINE, "s": regex.DOTALL, "x": regex.VERBOSE,
          "a": regex.ASCII}
_SHOWN = 200


class Regex(Scorer):
    name = "regex"

    def __init__(self, pattern: str, flags: str = "", last: bool = True) -> None:
        if not isinstance(pattern, str) or not pattern:
            raise ValueError("scorer regex: option pattern must be a non-empty regular expression")
        unknown = sorted(set(flags) - set(_FLAGS))
        if unknown:
            raise ValueError(f"scorer regex: unknown flag(s) {''.join(unknown)!r}; use any of "
                             f"{''.join(_FLAGS)}")
        compiled_flags = 0
        for letter in flags:
            compiled_flags |= _FLAGS[letter]
        try:
            re.compile(pattern)  # Python's syntax, as documented; the regex module runs it
            self.pattern = regex.compile(pattern, compiled_flags)
        except (re.error, regex.error) as error:
            raise ValueError(f"scorer regex: pattern {pattern!r} is not a regular expression ({error})") \
                from None
        self.last = last

    def check_reference(self, task: Task) -> None:
        require_text(task)

    def score(self, reply: str, task: Task) -> Verdict:
        try:
            matches = list(self.pattern.finditer(reply, timeout=PATTERN_TIMEOUT_S))
        except TimeoutError:
            return Verdict(score=0.0, success=False, response=None,
                           reason=f"the pattern took over {PATTERN_TIMEOUT_S:g} s on the reply "
                                  "(it backtracks without end: simplify it)")
        except Exception as error:  # not text: never raise on a reply
            return Verdict(score=0.0, success=False, response=None,
                           reason=f"unreadable reply ({type(error).__name__})")
        if not matches:
            return Verdict(score=0.0, success=False, response=None,
                           reason="the pattern does not match the reply")
        match = matches[-1] if self.last else matches[0]
        found = match.group("answer") if "answer" in self.pattern.groupindex else match.group(0)
        if found is None:  # the answer group sat in a branch of the pattern that did not match
            return Verdict(score=0.0, success=False, response=None,
                           reason="the pattern matched but its answer group is empty")
        response = " ".join(found.split())
        response = response if len(response) <= _SHOWN else response[: _SHOWN - 1] + "…"
        folded = normalize(found)
        for form in (task.answer, *task.aliases):
            if folded and folded == normalize(form):
                return Verdict(score=1.0, success=True, response=response,
                               reason="matches the reference" if form == task.answer
                               else f"matches the alias {form!r}")
        return Verdict(score=0.0, success=False, response=response,
                       reason="the matched answer is empty" if not folded else "differs from the reference")

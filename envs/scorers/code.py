"""`code`: the reply's program tested by the task's tests, each in a sandbox of its own
(harness/sandbox/apart.py).

For code generation (HumanEval, MBPP, DS-1000-like tasks): the task's reference is its test code
(in `env.fields.answer`, a column or a template, e.g. `"{test}\\ncheck({entry_point})"` for
HumanEval); the reply passes when the tests run to their end without an exception (pass@1). The
program is the reply's last ```` ```python ```` block, else its last fenced block, else the whole
reply. The program runs in one kernel sandbox (no network, no file of ours, only the standard
library, CPU, memory and wall time bounded), the tests in another; every name the tests use that
the program defines (its functions, a module it imported, a plain value) is bound in the tests to a
stand-in, and a call crosses as plain values only (numbers, strings, lists, tuples, dicts, sets,
bytes, None, bools) and comes back as one, or as the exception it raised, by its builtin type's name
and its message. The verdict is the tests process's, through a channel the program's process never
holds: "passed the tests", "failed the tests: AssertionError", "failed the tests: NameError: ...",
"failed the tests: add(2, 3) returned a Weird (a subclass of float), which cannot cross ...",
"failed the tests: wall-time limit of 10 s exceeded". So an answer equal to everything, a patched
builtin, a replaced module, a search of frames or a forged result changes nothing but the program's
own process. Not guaranteed: a program that answers the tested inputs with the expected outputs (a
table of the tests' answers) passes, as it would anywhere; and a test that needs the program's
objects themselves (an argument changed in place, an instance of its class, a generator) fails,
saying the value cannot cross (docs/datasets.md).

Options: `timeout` (wall seconds per program, 10), `memory_mb` (512), `weak` (false; true: the
weak subprocess sandbox, where kernel isolation is unavailable: it stops honest mistakes, not an
adversary).
"""

from __future__ import annotations

import re

from envs.base import Checks, Task, Verdict
from envs.scorers import SettlingScorer

FENCE = re.compile(r"```([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def program_of(reply: str) -> str:
    """The reply's last ```python block, else its last fenced block, else the reply itself."""
    blocks = FENCE.findall(reply)
    python = [code for language, code in blocks if language.lower() in ("python", "py", "python3")]
    chosen = python or [code for _, code in blocks]
    return chosen[-1] if chosen else reply


class CodeScorer(SettlingScorer):
    name = "code"

    def __init__(self, timeout: float = 10.0, memory_mb: int = 512, weak: bool = False) -> None:
        if timeout <= 0 or memory_mb < 64:
            raise ValueError(f"scorer code: timeout must be > 0 and memory_mb >= 64, got {timeout} and "
                             f"{memory_mb}")
        self.timeout, self.memory_mb, self.weak = timeout, memory_mb, weak

    def check_reference(self, task: Task) -> None:
        try:
            compile(task.answer, f"<tests of {task.task_id}>", "exec")
        except SyntaxError as error:
            raise ValueError(f"task {task.task_id}: its tests are not Python (line {error.lineno}: "
                             f"{error.msg})") from None

    async def settle(self, reply: str, task: Task, checks: Checks) -> Verdict:
        program = program_of(reply)
        if not program.strip():
            return Verdict(score=0.0, success=False, response=None, reason="no code in the reply")
        said = await checks.run_tests(program, task.answer, self.timeout, self.memory_mb, self.weak)
        response = program.strip()
        if said == "passed":
            return Verdict(score=1.0, success=True, response=response, reason="passed the tests")
        why = said.removeprefix("failed: ")
        return Verdict(score=0.0, success=False, response=response, reason=f"failed the tests: {why}"[:300])

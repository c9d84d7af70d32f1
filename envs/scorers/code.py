"""`code`: the reply's program run against the task's tests in the sandbox (harness/sandbox/).

For code generation (HumanEval, MBPP, DS-1000-like tasks): the task's reference is its test code
(in `env.fields.answer`, a column or a template, e.g. `"{test}\\ncheck({entry_point})"` for
HumanEval), run after the program as one script; the reply passes when the script ends without an
exception (pass@1). The program is the reply's last ```` ```python ```` block, else its last fenced
block, else the whole reply. It runs in the kernel sandbox: no network, no file of ours, only the
standard library, CPU, memory and wall time bounded; the verdict is one line ("passed the tests",
"failed the tests: AssertionError", "failed the tests: NameError: ...", "timed out ...").
The verdict is what the sandbox's runner returns once the tests have run, through the sandbox's
own channel with a nonce drawn for the run: a program that writes `{"value": "passed"}` to a
result file and exits has "failed the tests: ended without returning a result" (written to a
descriptor it guesses: "... no readable result"). Not guaranteed: the program and its tests share
one interpreter, so a program written to subvert them (an answer equal to everything, the
runner's frames searched for the nonce) is beyond what running the tests can stop.

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
        said = await checks.run_python(f"{program}\n\n{task.answer}\n", self.timeout, self.memory_mb,
                                       self.weak)
        response = program.strip()
        if said == "passed":
            return Verdict(score=1.0, success=True, response=response, reason="passed the tests")
        why = said.removeprefix("failed: ")
        return Verdict(score=0.0, success=False, response=response, reason=f"failed the tests: {why}"[:300])

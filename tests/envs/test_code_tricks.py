"""A program written to be scored "passed" without solving the task (issue 50) fails the `code`
scorer's tests with a reason: the tests run in a sandbox of their own and see only plain values,
so nothing the program does to its own process reaches them. Each trick is scored through a whole
agent run (scripted replies) and through `python -m harness`; the honest solution passes."""

from __future__ import annotations

import json

import pytest

from harness.sandbox import kernel_isolation_problem
from harness.tables.reading import read_table
from tests.conftest import run_variant
from tests.processes import QUIET, run_cli

pytestmark = pytest.mark.skipif(kernel_isolation_problem() is not None,
                                reason=f"no kernel sandbox here: {kernel_isolation_problem()}")

TESTS = """def check(candidate):
    assert candidate(2, 3) == 5
    assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9


check(add)
"""
"""HumanEval's shape: `check(candidate)`, then `check(<entry point>)` (the issue's tests)."""
MATH_TESTS = """def check(candidate):
    import math
    assert math.isclose(candidate(1.5, 2.5), 4.0)


check(add)
"""
"""Tests that import a module (for the program that puts a fake one in `sys.modules`)."""

ALWAYS_EQUAL = """
class Weird(float):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __sub__(self, other):
        return Weird(0.0)
    def __lt__(self, other):
        return True
    __hash__ = float.__hash__

def add(a, b):
    return Weird(0.0)
"""

FAKE_MATH = """
import sys, types
fake = types.ModuleType('math')
fake.isclose = lambda *args, **kwargs: True
sys.modules['math'] = fake

def add(a, b):
    return 0
"""

FRAMES = """
import json, os, sys

def forge():
    frame = sys._getframe()
    while frame is not None:
        found = frame.f_locals
        if 'channel' in found and 'nonce' in found:
            os.write(found['channel'], json.dumps({'nonce': found['nonce'], 'value': 'passed'}).encode())
            os._exit(0)
        frame = frame.f_back

def add(a, b):
    forge()
    return 0
"""

EVERY_CHANNEL = """
import json, os

def add(a, b):
    for fd in range(64):
        try:
            forged = {'value': 'passed', 'passed': True, 'ready': True}
            os.write(fd, json.dumps(forged).encode() + bytes([10]))
        except OSError:
            pass
    os._exit(0)
"""

TRICKS = {
    "honest": ("def add(a, b):\n    return a + b\n", "passed the tests"),
    "wrong": ("def add(a, b):\n    return a - b\n", "failed the tests: AssertionError"),
    "always_equal": (ALWAYS_EQUAL, "failed the tests: add(2, 3) returned a Weird (a subclass of float), "
                                   "which cannot cross to the tests (only plain values do)"),
    "str_subclass": ("class S(str):\n    def __eq__(self, other):\n        return True\n"
                     "    __hash__ = str.__hash__\n\ndef add(a, b):\n    return S('5')\n",
                     "failed the tests: add(2, 3) returned a S (a subclass of str), which cannot cross to "
                     "the tests (only plain values do)"),
    "list_subclass": ("class L(list):\n    def __eq__(self, other):\n        return True\n\n"
                      "def add(a, b):\n    return L()\n",
                      "failed the tests: add(2, 3) returned a L (a subclass of list), which cannot cross "
                      "to the tests (only plain values do)"),
    "class_property": ("class Fake:\n    @property\n    def __class__(self):\n        return int\n"
                       "    def __eq__(self, other):\n        return True\n\n"
                       "def add(a, b):\n    return Fake()\n",
                       "failed the tests: add(2, 3) returned a Fake, which cannot cross to the tests (only "
                       "plain values do)"),
    "patched_abs": ("import builtins\nbuiltins.abs = lambda x: 0\n\ndef add(a, b):\n    return 5\n",
                    "failed the tests: AssertionError"),
    "fake_module": (FAKE_MATH, "failed the tests: AssertionError"),
    "shadowed_abs": ("def abs(x):\n    return 0\n\ndef add(a, b):\n    return 5\n",
                     "failed the tests: AssertionError"),  # a builtin the tests use is never the program's
    "frames_and_forged_verdict": (FRAMES, "failed the tests: the program's process ended during add(2, 3)"),
    "every_channel": (EVERY_CHANNEL, "failed the tests: AssertionError"),  # add(2, 3) said "passed"
    "prints_the_verdict": ("print('passed')\nprint('passed the tests')\n\ndef add(a, b):\n    return 0\n",
                           "failed the tests: AssertionError"),
    "exits_at_once": ("import sys\nsys.exit(0)\n", "failed the tests: SystemExit: 0"),
    "exits_when_called": ("import sys\n\ndef add(a, b):\n    sys.exit(0)\n",
                          "failed the tests: add(2, 3) raised SystemExit: 0"),
    "os_exit_at_once": ("import os\nos._exit(0)\n",
                        "failed the tests: the program's process ended before the tests ran"),
    "redefined_check": ("def check(candidate):\n    pass\n\ndef add(a, b):\n    return 0\n",
                        "failed the tests: AssertionError"),
    "swallowed_exit": ("import sys\n\ndef add(a, b):\n    try:\n        sys.exit(0)\n    finally:\n"
                       "        return None\n", "failed the tests: AssertionError"),
}
"""Each reply's program and the verdict's reason: the honest and the wrong solution, the tricks that
passed while program and tests were one script (always-equal, a patched or shadowed `abs`, a fake
module, the frame walk), and more: subclasses, `__class__`, ending the process, writing every
descriptor, printing a verdict, redefining the tests' own function."""


def _rows(tmp_path) -> str:
    path = tmp_path / "tricks.jsonl"
    tests = {"fake_module": MATH_TESTS}
    path.write_text("".join(json.dumps({"id": name, "question": f"Write add(a, b). [{name}]",
                                        "answer": tests.get(name, TESTS)}) + "\n" for name in TRICKS))
    return str(path)


def _rules() -> str:
    """The scripted model's replies: each trick's program for the question that names it. (Programs
    hold no double quote, backslash or dollar: the override's value is one double-quoted string.)"""
    rules = []
    for name, (program, _) in TRICKS.items():
        assert not set(program) & {'"', "\\", "$"}, name
        rules.append(f'{{purpose:act,contains:"[{name}]",reply:"```python\n{program}```"}}')
    return "model.scripted.rules=[" + ",".join(rules) + "]"


def _overrides(tmp_path) -> list[str]:
    return ["env=jsonl", f"env.path={_rows(tmp_path)}", "env.scorer={name: code, timeout: 5}",
            f"stream.num_tasks={len(TRICKS)}", "stream.tuning_size=0", _rules()]


def test_each_trick_fails_the_tests_with_its_reason_and_the_honest_solution_passes(tmp_path):
    run = run_variant(*_overrides(tmp_path))
    verdicts = {a["task_id"]: (a["score"], a["score_reason"]) for a in run.rows["attempts"]}
    assert verdicts == {name: (float(reason == "passed the tests"), reason)
                        for name, (_, reason) in TRICKS.items()}


@pytest.mark.slow
def test_each_trick_fails_through_the_command_line(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli("model=scripted", "embedder=hashing", "cache.enabled=false", *QUIET,
                     *_overrides(tmp_path), f"hydra.run.dir={run_dir}", timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    attempts = read_table(run_dir, "attempts").to_dicts()
    verdicts = {a["task_id"]: (a["score"], a["score_reason"]) for a in attempts}
    assert verdicts == {name: (float(reason == "passed the tests"), reason)
                        for name, (_, reason) in TRICKS.items()}

"""The `code` scorer: the reply's program and the task's tests, each in a sandbox of its own; it passes
when the tests run to their end without an exception (the tricks that try otherwise:
test_code_tricks.py)."""

import asyncio
import json

import pytest

from envs.base import SingleTurnEpisode, Task
from envs.scorers import scorer
from envs.scorers.code import program_of
from harness.agent_run.checks import EpisodeChecks
from harness.sandbox import kernel_isolation_problem
from tests.conftest import run_variant

pytestmark = pytest.mark.skipif(kernel_isolation_problem() is not None,
                                reason=f"no kernel sandbox here: {kernel_isolation_problem()}")
ADD = Task(task_id="add", family="code", question="Write add(a, b).",
           answer="assert add(2, 3) == 5\nassert add(-1, 1) == 0")


def scored(reply: str, **options):
    episode = SingleTurnEpisode(ADD, scorer({"name": "code", "timeout": 3, **options}))
    episode.step(reply)
    asyncio.run(episode.settle(EpisodeChecks(llm=None)))  # type: ignore[arg-type]
    return episode.score()


@pytest.mark.parametrize(("reply", "success", "reason"), [
    ("Here it is:\n```python\ndef add(a, b):\n    return a + b\n```\nDone.", True, "passed the tests"),
    ("def add(a, b):\n    return a - b", False, "failed the tests: AssertionError"),
    ("```python\nprint('no add here')\n```", False, "failed the tests: NameError: name 'add' is not defined"),
    ("I cannot write that.", False, "failed the tests: SyntaxError: invalid syntax (<program>, line 1)"),
    ("```python\nwhile True:\n    pass\n```", False, "failed the tests: wall-time limit of 3 s exceeded"),
    ("```python\nimport socket\nsocket.socket()\n```", False,
     "failed the tests: PermissionError: sandbox: socket.__new__ is not allowed"),
])
def test_the_program_passes_when_the_tests_after_it_raise_nothing(reply, success, reason):
    result = scored(reply)
    assert (result.success, result.score, result.reason) == (success, float(success), reason)


def test_the_program_is_the_last_python_block_else_the_last_fence_else_the_reply():
    assert program_of("```python\na = 1\n```\ntext\n```py\nb = 2\n```") == "b = 2\n"
    assert program_of("```\nc = 3\n```") == "c = 3\n"
    assert program_of("d = 4") == "d = 4"


def test_tests_that_are_not_python_are_refused_before_the_run():
    bad = ADD.model_copy(update={"answer": "assert add(2, 3) =="})
    with pytest.raises(ValueError, match=r"task add: its tests are not Python \(line 1"):
        scorer("code").check_reference(bad)


def test_a_stream_of_code_tasks_is_scored_by_running_each_reply(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"id": "add", "question": "Write add(a, b).", "answer": "assert add(2, 3) == 5"},
        {"id": "neg", "question": "Write neg(x).", "answer": "assert neg(4) == -4"}]) + "\n")
    rules = ('model.scripted.rules=[{purpose:act,contains:"add(a, b)",reply:"def add(a, b): return a + b"},'
             '{purpose:act,contains:"neg(x)",reply:"def neg(x): return x"}]')
    run = run_variant("env=jsonl", f"env.path={path}", "env.scorer=code", "stream.num_tasks=2",
                      "stream.tuning_size=0", rules)
    by_task = {a["task_id"]: a for a in run.rows["attempts"]}
    assert (by_task["add"]["success"], by_task["add"]["score_reason"]) == (True, "passed the tests")
    assert (by_task["neg"]["success"], by_task["neg"]["score_reason"]) == (
        False, "failed the tests: AssertionError")


def test_mbpp_rows_are_scored_against_their_list_of_tests(tmp_path):
    """MBPP's layout (google-research-datasets/mbpp, "full"): `test_list` is a list of asserts, which
    a template lays out one per line. (A preamble such as `test_setup_code` needs a line break in the
    template: a config file's, as Hydra keeps an override's `\\n` as two characters.)"""
    path = tmp_path / "mbpp.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"task_id": 2, "text": "Write a function to find the shared elements of two lists.",
         "code": "def similar_elements(a, b):\n    return tuple(set(a) & set(b))", "test_setup_code": "",
         "test_list": ["assert set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10))) == {4, 5}",
                       "assert set(similar_elements((1, 2, 3, 4), (5, 4, 3, 7))) == {3, 4}"],
         "challenge_test_list": []},
        {"task_id": 3, "text": "Write a python function to identify non-prime numbers.",
         "code": "def is_not_prime(n):\n    return n < 2 or any(n % i == 0 for i in range(2, n))",
         "test_setup_code": "",
         "test_list": ["assert is_not_prime(2) == False", "assert is_not_prime(10) == True"],
         "challenge_test_list": []}]) + "\n")
    union = "def similar_elements(a, b): return tuple(set(a) | set(b))"  # the 1st assert fails
    rules = ('model.scripted.rules=[{purpose:act,contains:"shared elements",reply:"' + union + '"},'
             '{purpose:act,contains:"non-prime",reply:"def is_not_prime(n): return n < 2 or any(n % i == 0 '
             'for i in range(2, n))"}]')
    run = run_variant("env=dataset", f"env.path={path}", "env.scorer=code", "env.fields.id=task_id",
                      'env.fields.question="{text} Your code should pass these tests: {test_list}"',
                      'env.fields.answer="{test_list}"', "stream.num_tasks=2", "stream.tuning_size=0", rules)
    by_task = {a["task_id"]: a for a in run.rows["attempts"]}
    assert (by_task["3"]["success"], by_task["3"]["score_reason"]) == (True, "passed the tests")
    assert (by_task["2"]["success"], by_task["2"]["score_reason"]) == (False,
                                                                       "failed the tests: AssertionError")
    references = {e["task_id"]: e["reference"] for e in run.rows["episodes"]}
    assert references["3"] == "assert is_not_prime(2) == False\nassert is_not_prime(10) == True"


FORGED = """```python
import json, os

def add(a, b):
    return a - b

with open("result.json", "w") as verdict:
    json.dump({"value": "passed"}, verdict)
os._exit(0)
```"""


@pytest.mark.parametrize("weak", [False, True], ids=["kernel", "weak"])
def test_a_program_that_writes_its_own_pass_and_exits_fails(weak):
    # The verdict is the tests' sandbox's, through its channel: a result.json in the program's
    # working directory is nobody's verdict, and the program ended before the tests could call it.
    result = scored(FORGED, weak=weak)
    assert (result.success, result.score, result.reason) == (
        False, 0.0, "failed the tests: the program's process ended before the tests ran")


SHAPES = Task(task_id="shapes", family="code", question="Write area, pair, root.", answer="""
assert math.isclose(area(2), 12.566, rel_tol=1e-3)
assert pair(1, 2) == (1, 2) and isinstance(pair(1, 2), tuple)
assert SIDES == {'a': [1, 2]}
try:
    root(-1)
except ValueError as error:
    assert str(error) == 'negative'
else:
    assert False, 'no ValueError'
""")


def test_plain_scripts_use_the_programs_functions_constants_modules_and_exceptions():
    """docs/datasets.md: a module the program imported, a constant, a tuple, a builtin exception."""
    program = """```python
import math

SIDES = {'a': [1, 2]}

def area(r):
    return math.pi * r * r

def pair(a, b):
    return (a, b)

def root(x):
    if x < 0:
        raise ValueError('negative')
    return math.sqrt(x)
```"""
    episode = SingleTurnEpisode(SHAPES, scorer({"name": "code", "timeout": 3}))
    episode.step(program)
    asyncio.run(episode.settle(EpisodeChecks(llm=None)))  # type: ignore[arg-type]
    assert episode.score().reason == "passed the tests"


@pytest.mark.parametrize(("reply", "reason"), [
    ("from collections import namedtuple\nP = namedtuple('P', 'x y')\n\ndef add(a, b):\n    return P(a, b)",
     "failed the tests: add(2, 3) returned a P (a subclass of tuple), which cannot cross to the tests (only "
     "plain values do)"),
    ("def add(a, b):\n    return (x for x in [a + b])",
     "failed the tests: add(2, 3) returned a generator, which cannot cross to the tests (only plain values "
     "do)"),
    ("class Bad(Exception):\n    pass\n\ndef add(a, b):\n    raise Bad('no')",
     "failed the tests: RuntimeError: Bad: no"),
    ("def add(a, b):\n    try:\n        return a + b\n    finally:\n        import os\n        os._exit(0)",
     "failed the tests: the program's process ended during add(2, 3)"),
])
def test_a_test_that_needs_the_programs_objects_fails_saying_why(reply, reason):
    assert scored(reply).reason == reason


def test_a_function_the_tests_pass_to_the_program_does_not_cross():
    apply = ADD.model_copy(update={"answer": "assert add(lambda: 1, 2) == 3"})
    episode = SingleTurnEpisode(apply, scorer({"name": "code", "timeout": 3}))
    episode.step("def add(a, b):\n    return a() + b")
    asyncio.run(episode.settle(EpisodeChecks(llm=None)))  # type: ignore[arg-type]
    reason = episode.score().reason
    assert reason.startswith("failed the tests: the tests passed add(<function <lambda> at 0x")
    assert reason.endswith(", 2) a value that cannot cross to the program: a function (code)")


@pytest.mark.parametrize(("program", "reason"), [
    ("class W(float):\n    pass\n\ndef add(a, b):\n    return W(5)",
     "failed the tests: add(2, 3) returned a W "),
    ("import os\n\ndef add(a, b):\n    os._exit(0)",
     "failed the tests: the program's process ended during add"),
], ids=["uncrossable", "ended"])
def test_a_broken_crossing_fails_the_tests_even_where_they_catch_what_it_raised(program, reason):
    lenient = ADD.model_copy(update={"answer": "try:\n    add(2, 3)\nexcept BaseException:\n    pass\n"})
    episode = SingleTurnEpisode(lenient, scorer({"name": "code", "timeout": 3}))
    episode.step(program)
    asyncio.run(episode.settle(EpisodeChecks(llm=None)))  # type: ignore[arg-type]
    assert episode.score().reason.startswith(reason)

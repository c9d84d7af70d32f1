"""A program and its tests, each in a kernel sandbox of its own (the `code` scorer's runner).

The program's sandbox runs the reply's program and answers calls of its functions; the tests'
sandbox runs the task's tests (data, not our code: sandboxed as well) with every name they take from
the program bound to a stand-in that calls across (harness/sandbox/crossing.py). Between the two,
two pipes made here carry one JSON line per message: plain values and exceptions by name, never code
or objects. The verdict is the tests sandbox's value, through its own result channel with its own
nonce; the program's process never holds that channel, shares no interpreter, memory, process
namespace or file with the tests, and what its own sandbox returns is never read as a verdict. So a
program that patches builtins, replaces modules, walks frames, forges a result or ends its process
changes only what its own process answers: plain values, which the tests judge.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
from pathlib import Path

from harness.sandbox import Running, Sandbox

PROGRAM_GRACE_S = 1.0
"""The program's sandbox outlives the tests' by this much wall and CPU time, so that a program that
runs forever is the tests' timeout (one reason, whichever process the scheduler favoured), not its
own death mid-call; it is stopped as soon as the tests' verdict is in."""


@functools.cache
def _side(entry: str) -> str:
    """The tool code of one side: crossing.py, then `tool` calling `entry`."""
    source = Path(__file__).with_name("crossing.py").read_text()
    return f"{source}\n\ndef tool(argument):\n    return {entry}(argument)\n"


def run_tests_apart(program: str, tests: str, wall_s: float, memory_mb: int, weak: bool) -> str:
    """"passed", or "failed: <why>": `tests` run against `program` across the boundary. Raises
    ValueError where kernel isolation is unavailable and `weak` was not asked for."""
    cpu_s = max(1, math.ceil(wall_s))
    tests_box = Sandbox(cpu_s=cpu_s, wall_s=wall_s, memory_mb=memory_mb, weak=weak)
    program_box = Sandbox(cpu_s=cpu_s + math.ceil(PROGRAM_GRACE_S), wall_s=wall_s + PROGRAM_GRACE_S,
                          memory_mb=memory_mb, weak=weak)
    to_program_r, to_program_w = os.pipe()
    to_tests_r, to_tests_w = os.pipe()
    try:
        program_run = program_box.start(_side("serve_program"), program, link=(to_program_r, to_tests_w))
        tests_run = tests_box.start(_side("run_tests"), tests, link=(to_tests_r, to_program_w))
    finally:  # each sandbox has its ends now: with ours closed, either side's end is the other's EOF
        for fd in (to_program_r, to_program_w, to_tests_r, to_tests_w):
            os.close(fd)
    return _verdict(tests_run, program_run)


def _verdict(tests_run: Running, program_run: Running) -> str:
    """The tests' verdict; the program's run is waited on beside it (its pipes drained, its processes
    reaped) and stopped once the verdict is in. Its own result is never read as a verdict."""
    waiter = threading.Thread(target=program_run.result, daemon=True)
    waiter.start()
    try:
        result = tests_run.result()
    finally:
        program_run.stop()
        with contextlib.suppress(Exception):
            waiter.join(timeout=30)
    if result.ok:
        return result.value if result.value is not None else "failed: no verdict"
    return f"failed: {result.error}"

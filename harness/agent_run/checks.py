"""What an episode's scorer may use to settle its verdict after the step (envs.base.Checks): the
run's model, for the `judge` scorer, and the sandbox, for the `code` scorer."""

from __future__ import annotations

import math
from typing import Any

from harness.agent_api import ModelClient
from harness.sandbox import WEAK_OPT_IN, Sandbox

RUNNER = '''
def tool(program):
    namespace = {"__name__": "__main__"}
    try:
        exec(compile(program, "<program>", "exec"), namespace)
    except AssertionError as error:
        return "failed: AssertionError" + (f": {error}" if str(error) else "")
    except BaseException as error:
        return f"failed: {type(error).__name__}: {error}"
    return "passed"
'''
"""Runs the program (the reply's code, then the task's tests) as a script; its verdict is the value."""
WEAK_SCORER = "env.scorer={name: code, weak: true}"


class EpisodeChecks:
    def __init__(self, llm: ModelClient) -> None:
        self.llm = llm

    async def complete(self, messages: list[dict[str, Any]], purpose: str = "act", **params: Any) -> Any:
        return await self.llm.complete(messages, purpose, **params)  # type: ignore[arg-type]

    async def run_python(self, program: str, wall_s: float, memory_mb: int, weak: bool) -> str:
        """"passed", or "failed: <why>" (an assertion, an exception, a limit, a timeout)."""
        try:
            sandbox = Sandbox(cpu_s=max(1, math.ceil(wall_s)), wall_s=wall_s, memory_mb=memory_mb, weak=weak)
        except ValueError as unavailable:  # no kernel isolation here, and the weak one not asked for
            raise ValueError(f"scorer code: {unavailable}".replace(WEAK_OPT_IN, WEAK_SCORER)) from None
        result = await sandbox.arun(RUNNER, program)
        return result.value or "failed: no verdict" if result.ok else f"failed: {result.error}"

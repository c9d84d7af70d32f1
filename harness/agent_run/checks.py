"""What an episode's scorer may use to settle its verdict after the step (envs.base.Checks): the
run's model as the benchmark's grader, for the `judge` scorer (purpose grade: its rows, priced, outside
the agent's budget), and the sandbox, for the `code` scorer."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from harness.agent_api import Completion, Message
from harness.sandbox import WEAK_OPT_IN
from harness.sandbox.apart import run_tests_apart

WEAK_SCORER = "env.scorer={name: code, weak: true}"


class Grader(Protocol):
    async def grade(self, messages: list[Message], **params: Any) -> Completion: ...


class EpisodeChecks:
    def __init__(self, llm: Grader) -> None:
        self.llm = llm

    async def complete(self, messages: list[dict[str, Any]], **params: Any) -> Completion:
        """A grading call (purpose grade): the benchmark's, never the agent's (AgentModelClient.grade)."""
        return await self.llm.grade(messages, **params)

    async def run_tests(self, program: str, tests: str, wall_s: float, memory_mb: int, weak: bool) -> str:
        """"passed", or "failed: <why>" (an assertion, an exception, a value that cannot cross, a limit,
        a timeout): the tests and the program each in a sandbox of their own (harness/sandbox/apart.py)."""
        try:
            return await asyncio.to_thread(run_tests_apart, program, tests, wall_s, memory_mb, weak)
        except ValueError as unavailable:  # no kernel isolation here, and the weak one not asked for
            raise ValueError(f"scorer code: {unavailable}".replace(WEAK_OPT_IN, WEAK_SCORER)) from None

"""What an episode's scorer may use to settle its verdict after the step (envs.base.Checks): the
run's model, for the `judge` scorer, and the sandbox, for the `code` scorer."""

from __future__ import annotations

import asyncio
from typing import Any

from harness.agent_api import ModelClient
from harness.sandbox import WEAK_OPT_IN
from harness.sandbox.apart import run_tests_apart

WEAK_SCORER = "env.scorer={name: code, weak: true}"


class EpisodeChecks:
    def __init__(self, llm: ModelClient) -> None:
        self.llm = llm

    async def complete(self, messages: list[dict[str, Any]], purpose: str = "act", **params: Any) -> Any:
        return await self.llm.complete(messages, purpose, **params)  # type: ignore[arg-type]

    async def run_tests(self, program: str, tests: str, wall_s: float, memory_mb: int, weak: bool) -> str:
        """"passed", or "failed: <why>" (an assertion, an exception, a value that cannot cross, a limit,
        a timeout): the tests and the program each in a sandbox of their own (harness/sandbox/apart.py)."""
        try:
            return await asyncio.to_thread(run_tests_apart, program, tests, wall_s, memory_mb, weak)
        except ValueError as unavailable:  # no kernel isolation here, and the weak one not asked for
            raise ValueError(f"scorer code: {unavailable}".replace(WEAK_OPT_IN, WEAK_SCORER)) from None

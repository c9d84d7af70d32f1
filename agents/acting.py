"""The acting loop: send, step the environment with the reply, repeat until the episode is done.

In multi-step environments the prompt keeps the opening messages and the last `history_window`
turns, and every action is a row of the steps table. Where the episode offers tools they go to the
model natively (`tools`) when it has function calling, else described in the system prompt with the
JSON-in-text protocol (harness/models/chat.py); each call is an action, and the first plain-text reply
ends the episode.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from envs.base import EnvEpisode
from envs.tool_calls import ToolResult
from harness.agent_api import (
    Attempt,
    Completion,
    Message,
    ModelClient,
    Purpose,
    Recorder,
    StepRow,
    ToolCall,
    describe_tools,
    parse_text_call,
)

OwnTool = tuple[dict[str, Any], Callable[[ToolCall], Awaitable[ToolResult]]]
"""A tool an agent offers itself: its function spec and the coroutine that answers a call."""


@dataclass
class ActingLoop:
    llm: ModelClient
    max_steps: int
    """Upper bound on actions per attempt."""
    history_window: int
    """Multi-step envs: exchanges kept in the prompt after the opening messages (0: all)."""
    recorder: Recorder

    async def run(self, episode: EnvEpisode, messages: list[Message], own: dict[str, OwnTool],
                  attempt: int, purpose: Purpose = "act", record: bool = True, **params: Any) -> Attempt:
        output: str | None = None
        steps = 0
        offered = [*(episode.tools or []), *(spec for spec, _ in own.values())]
        native = bool(offered) and self.llm.function_calling
        opening = messages
        if offered and not native:
            opening = [{**messages[0], "content": f"{messages[0]['content']}\n\n{describe_tools(offered)}"},
                       *messages[1:]]
        turns: list[list[Message]] = []
        step = _StepLog(self.recorder, episode, attempt, record)
        while not episode.done and steps < self.max_steps:
            window = [m for turn in turns[-self.history_window:] for m in turn] if self.history_window else []
            completion = await self.llm.complete([*opening, *window], purpose=purpose, **params,
                                                 **({"tools": offered} if native else {}))
            output = completion.text
            text_call = parse_text_call(output) if offered and not native else None
            calls = completion.tool_calls if native else [text_call] if text_call else []
            if not calls:
                result = episode.step(output)
                steps += 1
                turns.append([{"role": "assistant", "content": output},
                              {"role": "user", "content": result.observation}])
                step(completion, steps, output, result.observation, result.reward, first=True)
                continue
            results = await self._call_tools(episode, calls, own, completion, steps, step)
            steps += len(results)
            turns.append(_tool_turn(output, calls, results, native))
        return Attempt(final_output=output, steps=steps)

    @staticmethod
    async def _call_tools(episode: EnvEpisode, calls: list[ToolCall], own: dict[str, OwnTool],
                          completion: Completion, steps: int, step: _StepLog) -> list[ToolResult]:
        results: list[ToolResult] = []
        for call in calls:
            if episode.done:  # the env's action limit, reached within one reply's calls
                break
            handler = own.get(call.name)
            results.append(await handler[1](call) if handler else episode.call_tool(call))
            step(completion, steps + len(results), call.render(), results[-1].content, 0.0,
                 first=len(results) == 1, result=results[-1])
        return results


def _tool_turn(output: str, calls: list[ToolCall], results: list[ToolResult], native: bool) -> list[Message]:
    if native:
        return [{"role": "assistant", "content": output or None,
                 "tool_calls": [call.message() for call in calls[:len(results)]]},
                *({"role": "tool", "tool_call_id": r.call.id, "content": r.content} for r in results)]
    return [{"role": "assistant", "content": output},
            {"role": "user", "content": f"Result of {calls[0].name}: {results[0].content}"}]


@dataclass
class _StepLog:
    """Rows of the steps table for one attempt; a reply's tokens go on its first action only, so
    they add up to the attempt's act tokens."""

    recorder: Recorder
    episode: EnvEpisode
    attempt: int
    record: bool

    def __call__(self, completion: Completion, step: int, action: str, observation: str, reward: float,
                 first: bool, result: ToolResult | None = None) -> None:
        if not self.record or not self.episode.multi_step:
            return
        self.recorder.emit(
            StepRow, attempt=self.attempt, step=step, action=action, observation=observation[:1000],
            observation_chars=len(observation), reward=reward, done=self.episode.done,
            prompt_tokens=completion.usage.prompt_tokens if first else 0,
            completion_tokens=completion.usage.completion_tokens if first else 0,
            call_id=completion.call_id, tool=result.call.name if result else None,
            arguments=result.call.arguments if result else None,
            tool_error=result.error if result else None)

"""What an in-process outside agent is handed (agents/external.py): its model, as `llm`, and in a
multi-step environment the environment it acts in, as `env`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envs.base import EnvEpisode
from harness.agent_api import ModelEndpoint, parse_text_call


class OutsideModel:
    """What an in-process outside agent gets as `llm`: where its calls go, and with which key."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        self.base_url = endpoint.base_url
        self.api_key = endpoint.api_key
        self.model = endpoint.model
        self.urls = endpoint.urls()

    def url(self, purpose: str) -> str:
        """The base URL that bills `purpose` (reflect, distill, optimize, judge, ...)."""
        if purpose not in self.urls:
            raise ValueError(f"unknown purpose {purpose!r}: one of {', '.join(self.urls)}")
        return self.urls[purpose]

    def __repr__(self) -> str:  # never the key
        return f"OutsideModel(base_url={self.base_url!r}, model={self.model!r})"


class OutsideEnvironment:
    """What a multi-step outside agent acts in: `observation`, `done`, `tools` (OpenAI function
    specs, or None) and `step(action) -> observation`. In an environment with tools, an action is a
    tool call as `{"tool": name, "arguments": {...}}` (text) or a plain-text final reply."""

    def __init__(self, episode: EnvEpisode, record: Callable[..., None]) -> None:
        self._episode = episode
        self._record = record
        self.steps = 0

    @property
    def observation(self) -> str:
        return self._episode.observation

    @property
    def done(self) -> bool:
        return self._episode.done

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return self._episode.tools

    def step(self, action: str) -> str:
        if not isinstance(action, str):
            raise TypeError(f"env.step takes a string action, got {type(action).__name__}")
        if self._episode.done:
            raise RuntimeError("the episode is over (env.done): no more actions")
        call = parse_text_call(action) if self._episode.tools is not None else None
        if call is None:
            return self.reply(action)
        self.steps += 1
        result = self._episode.call_tool(call)
        self._record(self.steps, call.render(), result.content, 0.0, call.name, call.arguments, result.error)
        return result.content

    def reply(self, text: str) -> str:
        """A plain-text action: a command, or in an environment with tools the final reply."""
        self.steps += 1
        outcome = self._episode.step(text)
        self._record(self.steps, text, outcome.observation, outcome.reward, None, None, None)
        return outcome.observation

"""What litellm sends of a model's completion parameters, known once and carried to where litellm is not
loaded (`ParamMap`): the lean path (harness/models/direct.py) sends a call's parameters as litellm would,
without importing it (seconds), once the job's model check (harness/driver/preflight.py) has probed
them with litellm's own `get_optional_params`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

PROVIDER = "openai"
NOT_SENT_HERE = frozenset({
    "stream", "stream_options", "api_base", "api_version", "api_key", "base_url", "deployment_id",
    "organization", "default_headers", "extra_headers", "timeout", "request_timeout", "max_retries"})
"""litellm's OpenAI parameters that are not the request body's: a call with one goes through litellm."""
PROBES: dict[str, Any] = {
    "temperature": 0.5, "top_p": 0.9, "max_tokens": 16, "max_completion_tokens": 16, "seed": 1, "n": 1,
    "stop": ["\n\n"], "presence_penalty": 0.1, "frequency_penalty": 0.1, "logit_bias": {"50256": -1},
    "logprobs": True, "top_logprobs": 2, "user": "someone", "response_format": {"type": "json_object"},
    "tools": [{"type": "function", "function": {"name": "probe", "description": "A probe.", "parameters": {
        "type": "object", "properties": {"x": {"type": "string"}}}}}],
    "tool_choice": "auto", "parallel_tool_calls": False, "reasoning_effort": "low", "store": False,
    "service_tier": "auto"}
"""A value for each parameter a `ParamMap` may cover: litellm's mapping of it, for a model, is probed
with it (the mapping of these is by key, whatever the value, but for None, which is left out)."""


@functools.cache
def passed_as_they_are() -> frozenset[str]:
    """Parameters this path sends (as litellm maps them); a call with any other goes through litellm."""
    import litellm

    return frozenset(litellm.OPENAI_CHAT_COMPLETION_PARAMS) - NOT_SENT_HERE


@dataclass(frozen=True)
class ParamMap:
    """How litellm's `get_optional_params` maps one model's parameters for the openai provider, as far
    as it sends them as they are: a worker sends those without importing litellm."""

    model: str
    """The model as the server knows it (the route without its `openai/`)."""
    unchanged: frozenset[str]
    """The parameters litellm sends as given (a None value aside, which it leaves out)."""

    def body(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """The parameters as litellm would send them, or None where this map cannot say."""
        if (params.keys() <= self.unchanged and all(value is not None for value in params.values())
                and not {"max_tokens", "max_completion_tokens"} <= params.keys()):  # probed apart
            return dict(params)
        return None


def param_map(route: str) -> ParamMap | None:
    """What litellm sends as given for this `openai/` model, probed parameter by parameter and all
    together (imports litellm); None where it changes them together otherwise."""
    from litellm.utils import get_optional_params

    model = route.split("/", 1)[1]

    def mapped(params: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return as_sent(get_optional_params(model=model, custom_llm_provider=PROVIDER, **params))
        except Exception:  # refused: the call goes through litellm, which says so
            return None

    probes = {key: value for key, value in PROBES.items() if key in passed_as_they_are()}
    with litellm_logs_at(logging.WARNING):  # each probe logs "LiteLLM completion() model=..." at INFO
        unchanged = {key for key, value in probes.items() if mapped({key: value}) == {key: value}}
        together = {key: probes[key] for key in unchanged if key != "max_completion_tokens"}
        if mapped(together) != together:
            return None
    return ParamMap(model, frozenset(unchanged))


@contextlib.contextmanager
def litellm_logs_at(level: int) -> Iterator[None]:
    """litellm's logger at `level` for a while: what it logs there is of no use to the user (the
    driver's logging, Hydra's, prints INFO)."""
    logger = logging.getLogger("LiteLLM")
    before = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)


def as_sent(mapped: dict[str, Any]) -> dict[str, Any]:
    """litellm's mapped parameters as the request body carries them."""
    mapped = dict(mapped)
    extra = mapped.pop("extra_body", None) or {}
    if mapped.get("stream") is False:  # what litellm leaves out, as the SDK does
        del mapped["stream"]
    return {**mapped, **extra}

"""What a chat call carries across the model boundary: the messages, the reply (`Completion`) and its
function calls (`ToolCall`), native or in the JSON-in-text protocol.

A model with function calling is sent `tools` and answers with `tool_calls` (the gateway reads them
into `ToolCall`s); a model without it is told the tools and the protocol in its prompt
(`describe_tools`), and a reply holding `{"tool": ..., "arguments": ...}` is a call
(`parse_text_call`; `text_call` writes one, as the scripted model does). Either way a call is the
same `ToolCall`, which an environment with tools takes as it is (envs/tool_calls.py). The agents see
these through harness/agent_api.py; nothing here imports an environment.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.tables.records import Usage

Message = dict[str, Any]
"""A chat message: role and content, and for function calling `tool_calls` / `tool_call_id`."""


class ToolCall(BaseModel):
    """One call as the model made it: the arguments are its raw JSON text, unparsed."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str

    @classmethod
    def new(cls, name: str, arguments: str, key: str | None = None) -> ToolCall:
        """A call with a fresh id, or one derived from `key` (the same key, the same id: replays match)."""
        suffix = hashlib.sha256(key.encode()).hexdigest()[:12] if key is not None else uuid.uuid4().hex[:12]
        return cls(id=f"call_{suffix}", name=name, arguments=arguments)

    def render(self) -> str:
        return f"{self.name}({self.arguments})"

    def message(self) -> dict[str, Any]:
        """The call as an assistant message's `tool_calls` item (OpenAI format). Arguments that are
        not a JSON object are echoed as `{}`: providers (Anthropic, Gemini through litellm) refuse a
        conversation that holds them, and the call's result already says what was wrong."""
        try:
            well_formed = isinstance(json.loads(self.arguments or "{}"), dict)
        except json.JSONDecodeError:
            well_formed = False
        arguments = self.arguments if well_formed else "{}"
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": arguments}}


class Completion(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    usage: Usage
    call_id: str
    tool_calls: list[ToolCall] = []


def describe_tools(specs: list[dict[str, Any]]) -> str:
    """The tools and the JSON-in-text protocol, for a model without native function calling."""
    lines = []
    for spec in specs:
        function = spec["function"]
        properties = function["parameters"].get("properties", {})
        arguments = ", ".join(f"{name}: {prop.get('type', 'any')}" for name, prop in properties.items())
        lines.append(f"- {function['name']}({arguments}): {function['description']}")
    return ("You can use these tools:\n" + "\n".join(lines) + "\n"
            'To call a tool, reply with only a JSON object: {"tool": "<name>", "arguments": {...}}. '
            "One call per reply; its result comes back in the next message. When the task is done, "
            "or you need to ask the user something, reply in plain text with no JSON.")


_CALL_START = re.compile(r'\{\s*"tool"\s*:')


def parse_text_call(reply: str) -> ToolCall | None:
    """The call a text-protocol reply makes, or None when it is a plain-text final reply. A reply
    that starts a call but is not a well-formed one is returned as a call the environment rejects."""
    match = _CALL_START.search(reply)
    if match is None:
        return None
    start = match.start()
    try:
        value, _ = json.JSONDecoder().raw_decode(reply[start:])
    except json.JSONDecodeError:
        name = re.match(r'\{\s*"tool"\s*:\s*"([^"]*)"', reply[start:])
        return ToolCall.new(name.group(1) if name else "", reply[start:].strip())
    name = value.get("tool")
    arguments = value.get("arguments", {})
    return ToolCall.new(name if isinstance(name, str) else "", json.dumps(arguments))


def text_call(call: ToolCall) -> str:
    """A call written in the text protocol (what a text-protocol model replies)."""
    return json.dumps({"tool": call.name, "arguments": json.loads(call.arguments or "{}")})

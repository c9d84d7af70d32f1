"""Function calls between an agent and an environment whose actions are tool calls (env=tools).

An environment offers tools as OpenAI-style function specs derived from a Python class: each public
method is a tool, its type hints (through pydantic) the JSON schema of its arguments, its docstring
the description (`ToolBox`). The agent sends calls natively (litellm's `tools` / `tool_calls`)
when its model has function calling, and otherwise through a JSON-in-text protocol: the tools are
described in the prompt (`describe_tools`) and a reply holding `{"tool": ..., "arguments": ...}`
is a call (`parse_text_call`). Both arrive at the environment as the same `ToolCall`, so a
malformed call (unknown tool, invalid JSON, bad arguments) is classified in one place, `ToolBox.call`,
and comes back to the agent as an observation with its error kind, never as an exception.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import uuid
from collections.abc import Callable
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

ToolErrorKind = Literal["unknown_tool", "invalid_json", "bad_arguments", "tool_error"]
"""unknown_tool: no such tool; invalid_json: the arguments are not a JSON object; bad_arguments:
missing, extra or mistyped arguments; tool_error: the tool refused (no such account, bad date)."""


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


class ToolResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    call: ToolCall
    content: str
    """What the agent is shown: the tool's return value as JSON, or the error."""
    error: ToolErrorKind | None = None


class ToolError(ValueError):
    """A tool's refusal (no such file, insufficient funds): the agent sees the message."""


def _description(method: Callable[..., Any]) -> str:
    return " ".join((inspect.getdoc(method) or method.__name__).split())


def arguments_model(method: Callable[..., Any]) -> type[BaseModel]:
    """A pydantic model of the method's parameters, from its type hints (extra arguments refused)."""
    hints = get_type_hints(method, include_extras=True)
    fields: dict[str, Any] = {}
    for name, parameter in inspect.signature(method).parameters.items():
        if name == "self":
            continue
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[name] = (hints[name], default)
    return create_model(f"{method.__name__}_arguments", __config__=ConfigDict(extra="forbid", strict=True),
                        **fields)


def function_spec(method: Callable[..., Any]) -> dict[str, Any]:
    schema = arguments_model(method).model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    schema.setdefault("required", [])
    return {"type": "function",
            "function": {"name": method.__name__, "description": _description(method), "parameters": schema}}


class ToolBox:
    """The tools of one backend object: its public methods, other than `state`."""

    def __init__(self, backend: object) -> None:
        self.backend = backend
        self.methods: dict[str, Callable[..., Any]] = {
            name: getattr(backend, name) for name in sorted(dir(type(backend)))
            if not name.startswith("_") and name != "state" and callable(getattr(backend, name))}
        self._models = {name: arguments_model(m) for name, m in self.methods.items()}
        self.specs = [function_spec(m) for m in self.methods.values()]

    def call(self, call: ToolCall) -> ToolResult:
        method = self.methods.get(call.name)
        if method is None:
            return ToolResult(call=call, error="unknown_tool", content=(
                f"error: unknown tool {call.name!r}; the tools are {', '.join(self.methods)}"))
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as error:
            return ToolResult(call=call, error="invalid_json",
                              content=f"error: the arguments of {call.name} are not valid JSON ({error.msg})")
        if not isinstance(arguments, dict):
            return ToolResult(call=call, error="invalid_json",
                              content=f"error: the arguments of {call.name} must be a JSON object")
        try:
            validated = self._models[call.name].model_validate(arguments)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                                 for e in error.errors())
            return ToolResult(call=call, error="bad_arguments", content=f"error: {call.name}: {problems}")
        try:
            value = method(**dict(validated))
        except ToolError as error:
            return ToolResult(call=call, error="tool_error", content=f"error: {error}")
        return ToolResult(call=call, content=json.dumps(value, ensure_ascii=False))


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
    that starts a call but is not a well-formed one is returned as a call the ToolBox rejects."""
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

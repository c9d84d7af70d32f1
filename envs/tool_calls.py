"""Function calls between an agent and an environment whose actions are tool calls (env=tools).

An environment offers tools as OpenAI-style function specs derived from a Python class: each public
method is a tool, its type hints (through pydantic) the JSON schema of its arguments, its docstring
the description (`ToolBox`). How the agent's model makes a call (natively, or in a JSON-in-text
protocol for a model without function calling) is the model side's business: a call arrives here as
any object with an id, a name and its raw JSON arguments (`Call`), so a malformed call (unknown tool,
invalid JSON, bad arguments) is classified in one place, `ToolBox.call`, and comes back to the agent
as an observation with its error kind, never as an exception.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, Literal, Protocol, get_type_hints, runtime_checkable

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

ToolErrorKind = Literal["unknown_tool", "invalid_json", "bad_arguments", "tool_error"]
"""unknown_tool: no such tool; invalid_json: the arguments are not a JSON object; bad_arguments:
missing, extra or mistyped arguments; tool_error: the tool refused (no such account, bad date)."""


@runtime_checkable
class Call(Protocol):
    """One call as the model made it: the arguments are its raw JSON text, unparsed."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> str: ...


class ToolResult(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    call: Call
    """The call as it came, the very object (the agent answers it by its id)."""
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

    def call(self, call: Call) -> ToolResult:
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

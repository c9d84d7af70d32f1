"""Tool learning: the model writes Python tools for a task family and reuses them.

After a task it failed (or any task, with `generate_on=always`), the agent asks the model (purpose
toolgen) for a function `tool(question: str) -> str`. The code must parse, define `tool` with one
argument, and run to a result on that question inside the sandbox (harness/sandbox/); only then is
it registered, for this agent run alone, as the tool of that family. On later tasks of the family
the tool runs in the sandbox first; its result becomes a hint just before the question
(`tool_use=hint`) or the submitted answer (`tool_use=answer`). In an environment with tools of its
own (env=tools) the learnt tool is instead offered as one more tool, `learnt_tool(question)`, which
the model may call like the others; the agent runs it in the sandbox. Bad code and sandbox
violations are recorded as events, never raised; each event records how the code was isolated
(`kernel`, or `weak` when `variant.sandbox.weak=true`). Building the agent fails, naming that
opt-in, where kernel isolation is unavailable.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agents.acting import OwnTool
from agents.baseline import BaselineAgent
from envs.base import EnvEpisode, TaskView
from envs.tool_calls import ToolResult
from harness.agent_api import (
    AgentContext,
    Attempt,
    AttemptResult,
    Feedback,
    GateKind,
    LearntState,
    Opening,
    Render,
    Sandbox,
    ToolCall,
    ToolEventRow,
    Trial,
)

TOOLGEN_PROMPT = (
    "Write a Python function `tool(question: str) -> str` that returns the answer to questions like "
    "this one:\n{question}\n{feedback}\n"
    "Use only the Python standard library, no network and no files. Reply with the code only, in "
    "one ```python block."
)
LEARNT_TOOL = "learnt_tool"
LEARNT_TOOL_SPEC = {"type": "function", "function": {
    "name": LEARNT_TOOL,
    "description": "A tool you wrote earlier for tasks like this one: give it the user's request, it "
                   "returns its answer (it cannot see or change anything else).",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"],
                   "additionalProperties": False}}}
_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


class Tool(BaseModel):
    model_config = ConfigDict(frozen=True)

    tool_id: str
    family: str
    code: str


def extract_code(completion: str) -> str:
    match = _CODE_BLOCK.search(completion)
    return (match.group(1) if match else completion).strip()


def _hint(value: str | None) -> str:
    """A tool's result as a prompt shows it, before the task's question."""
    return f"A tool you wrote for such questions returned: {value}"


def check_tool_code(code: str) -> str | None:
    """Why the code cannot be a tool, or None: it must parse and define `tool(question)`."""
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        return f"SyntaxError: {error.msg} (line {error.lineno})"
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "tool"]
    if not functions:
        return "no top-level function named tool"
    if len(functions[0].args.args) != 1:
        return "tool must take exactly one argument (the question)"
    return None


class ToolLearningAgent(BaselineAgent):
    def __init__(self, context: AgentContext, tool_use: Literal["hint", "answer"] = "hint",
                 generate_on: Literal["failure", "always"] = "failure", toolgen_prompt: str | None = None,
                 toolgen_max_tokens: int = 512, sandbox: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        toolgen_prompt = toolgen_prompt or TOOLGEN_PROMPT  # null in the yaml: the built-in prompt
        super().__init__(context, **kwargs)
        if tool_use not in ("hint", "answer"):
            raise ValueError(f"variant.tool_use must be hint or answer, got {tool_use!r}")
        if generate_on not in ("failure", "always"):
            raise ValueError(f"variant.generate_on must be failure or always, got {generate_on!r}")
        self.tool_use = tool_use
        self.generate_on = generate_on
        self.toolgen_prompt = toolgen_prompt
        self.toolgen_max_tokens = toolgen_max_tokens
        self.sandbox = Sandbox(**(sandbox or {}))
        self.tools: dict[str, Tool] = {}
        self._task: TaskView | None = None
        self._offered = False  # the family's tool passed the retrieval check for this task

    async def run_task(self, trial: Trial) -> list[AttemptResult]:
        self._task = trial.task
        return await super().run_task(trial)

    async def solve(self, episode: EnvEpisode) -> Attempt:
        assert self._task is not None
        tool = self.tools.get(self._task.family)
        if tool is not None and not await self.guard.screen("tool", tool.tool_id, tool.code):
            tool = None  # the safety check keeps it out of this task
        self._offered = tool is not None
        hint = ""
        if tool is not None and episode.tools is None:  # with tools of its own, it is one more (own_tools)
            result = await self.sandbox.arun(tool.code, episode.observation)
            self._record("used" if result.ok else "failed", tool, result.value, result.error)
            if result.ok and self.tool_use == "answer":
                episode.step(result.value or "")
                return Attempt(final_output=result.value, steps=1)
            if result.ok:
                hint = _hint(result.value)
        # The hint is this question's own: it goes before the question, not into the system prompt.
        return await self.act(episode, self.messages_for(episode.observation, task_context=hint))

    def own_tools(self) -> dict[str, OwnTool]:
        tool = self.tools.get(self._task.family) if self._task is not None else None
        if tool is None or not self._offered:
            return {}

        async def run(call: ToolCall) -> ToolResult:
            try:
                question = json.loads(call.arguments or "{}").get("question")
            except (json.JSONDecodeError, AttributeError):
                return ToolResult(call=call, error="invalid_json",
                                  content=f"error: the arguments of {LEARNT_TOOL} must be a JSON object")
            if not isinstance(question, str):
                return ToolResult(call=call, error="bad_arguments",
                                  content=f"error: {LEARNT_TOOL}: question: a string is required")
            result = await self.sandbox.arun(tool.code, question)
            self._record("used" if result.ok else "failed", tool, result.value, result.error)
            if not result.ok:
                return ToolResult(call=call, error="tool_error", content=f"error: {result.error}")
            return ToolResult(call=call, content=json.dumps(result.value))

        return {LEARNT_TOOL: (LEARNT_TOOL_SPEC, run)}

    async def learn(self, feedback: Feedback) -> None:
        self._offered = False  # the task is over: the gate's probes must not see its tool
        await super().learn(feedback)
        if self.generate_on == "failure" and feedback.final.rewarded:
            return
        final = feedback.final
        note = (f"An earlier answer, {final.said!r}, was judged wrong." if not final.rewarded else "")
        prompt = self.toolgen_prompt.format(question=feedback.task.question, feedback=note)
        completion = await self.llm.complete([{"role": "user", "content": prompt}], purpose="toolgen",
                                             max_tokens=self.toolgen_max_tokens)
        tool = Tool(tool_id=uuid.uuid4().hex[:12], family=feedback.task.family,
                    code=extract_code(completion.text))
        problem = check_tool_code(tool.code)
        if problem is not None:
            self._record("rejected", tool, None, problem)
            return
        if not await self.guard.check("tool", tool.tool_id, tool.code):
            self._record("rejected", tool, None, "blocked by the safety check")
            return
        trial_run = await self.sandbox.arun(tool.code, feedback.task.question)
        if not trial_run.ok:
            self._record("rejected", tool, None, trial_run.error)
            return
        audit = await self.guard.audit("tool", tool.tool_id, tool.code,
                                       self._hinted(self.tools.get(tool.family)), self._hinted(tool))
        if audit is not None and not audit.accepted:
            self._record("rejected", tool, None, "rejected by the sealed gate")
            return
        self.tools[tool.family] = tool
        self._record("registered", tool, trial_run.value, None)

    def gated_edits(self) -> tuple[GateKind, ...]:
        return ("tool", *super().gated_edits())

    def _hinted(self, tool: Tool | None) -> Render:
        """The sealed gate's probe prompts with this tool's result as the hint (its family's items)."""
        async def opening(view: TaskView) -> Opening:
            if tool is None or view.family != tool.family:
                return self.opening()
            result = await self.sandbox.arun(tool.code, view.question)
            return self.opening(task_context=_hint(result.value) if result.ok else "")

        return opening

    def export_state(self) -> dict[str, Any]:
        return {**super().export_state(), "tools": [tool.model_dump() for tool in self.tools.values()]}

    def import_state(self, state: dict[str, Any]) -> None:
        super().import_state(state)
        self.tools = {tool["family"]: Tool(**tool) for tool in state.get("tools", [])}

    async def export_learnt(self) -> LearntState:
        return (await super().export_learnt()).model_copy(update={"tools": len(self.tools)})

    def _record(self, event: Literal["registered", "rejected", "used", "failed"], tool: Tool,
                output: str | None, error: str | None) -> None:
        self.recorder.emit(ToolEventRow, event=event, tool_id=tool.tool_id, family=tool.family,
                           code=tool.code[:4000], output=output[:500] if output else None, error=error,
                           isolation=self.sandbox.isolation)

"""The agent extension point.

An agent lives for its whole stream. For each task the runner hands it a `Trial`; the agent makes
up to `max_attempts` attempts, each in a fresh environment episode (`solve`), judges each one by
its reward source, and may prepare between attempts (`before_retry`, where Reflexion reflects).
After the task, `learn` sees the outcome. Agents reach models only through their `ModelClient`;
every call they make carries a purpose, so self-improvement is never billed as acting.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from agents.judge import Judge
from envs.base import EnvEpisode, TaskView
from envs.tool_calls import ToolCall, ToolResult, describe_tools, parse_text_call
from harness.model_client import Completion, Message, ModelClient

if TYPE_CHECKING:
    from agents.memory_store import EpisodicMemory
    from agents.safety import SafetyChecker
    from harness.gate import GateKind, Render, SealedGate
    from harness.records import Purpose

OwnTool = tuple[dict[str, Any], Callable[[ToolCall], Awaitable[ToolResult]]]
"""A tool an agent offers itself: its function spec and the coroutine that answers a call."""
DEFAULT_SYSTEM_PROMPT = "You are a concise assistant. Answer with the answer only, no explanation."
RewardSource = Literal["truth", "judge"]


class Attempt(BaseModel):
    """What the agent did on one try at a task."""

    model_config = ConfigDict(frozen=True)

    final_output: str | None
    """The last model output the agent sent to the environment."""
    steps: int
    """Actions taken in the environment."""


class AttemptResult(BaseModel):
    """One attempt and its verdicts: the environment's (truth) and, if configured, the judge's."""

    model_config = ConfigDict(frozen=True)

    number: int
    response: str | None
    """The answer after the environment's extraction."""
    raw_response: str | None = None
    """The model's last reply as it came back, before extraction."""
    steps: int
    success: bool
    score: float
    judge_score: float | None
    reward: float
    """What the agent is told: the true score, or the judge's when `reward_source=judge`."""
    reflection: str | None = None
    """The reflection the agent carried into this attempt, if any (unverified model text)."""

    @property
    def rewarded(self) -> bool:
        return self.reward >= 0.5

    @property
    def said(self) -> str | None:
        """What the agent said, for it to learn from: its last reply as written. `response` is the
        checker's reading of it, which in multi-step and safety envs is a verdict ("3 steps, ...",
        "refused"), not something to imitate."""
        return self.raw_response if self.raw_response is not None else self.response


class Feedback(BaseModel):
    """What an agent may learn from after a task: every attempt, the last one final."""

    model_config = ConfigDict(frozen=True)

    task: TaskView
    attempts: list[AttemptResult]

    @property
    def final(self) -> AttemptResult:
        return self.attempts[-1]


class Trial(abc.ABC):
    """One task as the agent sees it: it can only start fresh attempts of it."""

    task: TaskView

    @abc.abstractmethod
    def start_attempt(self) -> EnvEpisode:
        """A fresh environment episode of the task; later model calls count for this attempt."""


class TuningSet(abc.ABC):
    """Tasks an agent may tune on before its stream, and a way to score a system prompt on them."""

    tasks: list[TaskView]
    held_out: bool
    """True when the tasks are disjoint from the evaluated stream; False for resubstitution."""

    @abc.abstractmethod
    async def evaluate(self, system_prompt: str, limit: int | None = None) -> float:
        """Success rate of single-turn answers under `system_prompt` (calls: purpose optimize)."""


class Agent(abc.ABC):
    #: How the agent's prompt relates to the evaluated stream; OPRO-like variants that tune on a
    #: split say `held_out` or `resubstitution`.
    protocol: str = "online"

    def __init__(self, llm: ModelClient, seed: int = 0, system_prompt: str = DEFAULT_SYSTEM_PROMPT,
                 max_steps: int = 1, max_attempts: int = 1, reward_source: RewardSource = "truth",
                 judge: dict[str, str] | None = None, memory: dict[str, Any] | None = None,
                 history_window: int = 4, workdir: str | None = None, run_id: str = "agent",
                 gate: Literal["none", "sealed"] = "none", probe_size: int = 10, regression_budget: int = 0,
                 accept_ties: bool = False, safety: dict[str, Any] | None = None) -> None:
        if max_steps < 1:
            raise ValueError(f"variant.max_steps must be >= 1, got {max_steps}")
        if max_attempts < 1:
            raise ValueError(f"variant.max_attempts must be >= 1, got {max_attempts}")
        if reward_source not in ("truth", "judge"):
            raise ValueError(f"variant.reward_source must be truth or judge, got {reward_source!r}")
        if reward_source == "judge" and judge is None:
            raise ValueError("variant.reward_source=judge needs a variant.judge section")
        self.llm = llm
        self.seed = seed
        self.attempt = 0
        """Number of the attempt in progress (1-based), for variants that vary their sampling."""
        self.system_prompt = system_prompt
        self.max_steps = max_steps
        self.history_window = history_window
        self._steps: list[dict[str, Any]] = []
        self.max_attempts = max_attempts
        self.reward_source = reward_source
        self.judge = Judge(llm, **judge) if judge is not None else None
        self.memory: EpisodicMemory | None = None
        if memory is not None:
            from agents.memory_store import EpisodicMemory  # LanceDB loads only for agents with memory

            self.memory = EpisodicMemory(llm, directory=Path(workdir or ".") / "memory", table=run_id,
                                         **memory)
        self.stream_position = 0
        """Position in the stream of the task in progress (set by the runner)."""
        if gate not in ("none", "sealed"):
            raise ValueError(f"variant.gate must be none or sealed, got {gate!r}")
        if probe_size < 1 or regression_budget < 0:
            raise ValueError("variant.probe_size must be >= 1 and variant.regression_budget >= 0")
        self.gate_mode = gate
        self.probe_size = probe_size
        self.regression_budget = regression_budget
        self.accept_ties = accept_ties
        self.gate: SealedGate | None = None
        """Set by the runner when `gate_mode` is sealed (harness.gate): it audits every self-edit."""
        if gate == "sealed" and not self.gated_edits():
            raise ValueError(f"variant.gate=sealed: {type(self).__name__} makes no self-edit the gate can "
                             "audit (lessons need variant.memory with mode lessons)")
        self.safety: SafetyChecker | None = None
        if safety is not None:
            from agents.safety import SafetyChecker

            self.safety = SafetyChecker(llm, **safety)

    def gated_edits(self) -> tuple[GateKind, ...]:
        """The kinds of self-edit this agent puts to the gate with variant.gate=sealed."""
        return ("lesson",) if self.memory is not None and self.memory.mode == "lessons" else ()

    async def admit(self, kind: Literal["lesson", "bullet", "skill", "tool"], edit_id: str, text: str,
                    incumbent: Render | None = None, candidate: Render | None = None) -> bool:
        """Whether a self-edit may take effect: the safety check (when written), then the sealed gate
        on the incumbent and candidate states' prompts. With neither configured, always."""
        if self.safety is not None and not await self.safety.check(text, "write", kind, edit_id):
            return False
        if self.gate is None or incumbent is None or candidate is None:
            return True
        return (await self.gate.audit(kind, edit_id, text, incumbent, candidate)).accepted

    async def screen(self, kind: Literal["lesson", "bullet", "skill", "tool"], item_id: str,
                     text: str) -> bool:
        """Whether a stored item may go into a prompt (the safety check on retrieval)."""
        return self.safety is None or await self.safety.check(text, "retrieve", kind, item_id)

    async def prepare(self, tuning: TuningSet) -> None:  # noqa: B027 - optional hook, no-op by default
        """Before the first task: tune on held-out tasks (charged to the first task's episode)."""

    async def run_task(self, trial: Trial) -> list[AttemptResult]:
        """Attempt until rewarded or out of attempts; every attempt is kept."""
        if self.memory is not None:
            await self.memory.recall(trial.task, screen=self.screen if self.safety else None)
        results: list[AttemptResult] = []
        reflection: str | None = None
        while True:
            episode = trial.start_attempt()
            self.attempt = len(results) + 1
            attempt = await self.solve(episode)
            results.append(await self.assess(trial.task, episode, attempt, len(results) + 1, reflection))
            if results[-1].rewarded or len(results) >= self.max_attempts:
                return results
            reflection = await self.before_retry(trial.task, results)

    @abc.abstractmethod
    async def solve(self, episode: EnvEpisode) -> Attempt:
        """Act in `episode` until it is done or the step limit is reached."""

    async def before_retry(self, task: TaskView, results: list[AttemptResult]) -> str | None:
        """Prepare the next attempt after a failed one; return any reflection it will carry."""
        return None

    async def learn(self, feedback: Feedback) -> None:
        """Update the agent's own state after a task: by default, its memory if it has one."""
        if self.memory is not None:
            await self.memory.remember(feedback, self.stream_position, admit=self._admit_lesson)

    async def _admit_lesson(self, item_id: str, text: str, question_vector: list[float],
                            importance: float) -> bool:
        """A new memory item's safety check and, for a lesson, its gate: the probe prompts with the
        lessons memory would recall for each probe question, without and with the new one."""
        memory = self.memory
        assert memory is not None

        async def incumbent(view: TaskView) -> str:
            return self.system_prompt + await memory.addendum_for(view.question)

        async def candidate(view: TaskView) -> str:
            return self.system_prompt + await memory.addendum_for(view.question,
                                                                  (text, question_vector, importance))

        return await self.admit("lesson", item_id, text, incumbent, candidate)

    def export_state(self) -> dict[str, Any]:
        """What the agent has learnt besides its memory, as JSON values (a snapshot's state.json).
        Variants with more learnt state (tools, playbooks) add theirs and read it back in
        `import_state`."""
        return {"system_prompt": self.system_prompt, "protocol": self.protocol}

    def import_state(self, state: dict[str, Any]) -> None:
        self.system_prompt = state["system_prompt"]
        self.protocol = state["protocol"]

    def memory_size(self) -> int | None:
        """Items the agent keeps (memory items; variants with bullets or skills add theirs); None for
        agents that keep none."""
        return self.memory.size if self.memory is not None else None

    def take_rows(self) -> dict[str, list[dict[str, Any]]]:
        """Rows the last task produced for the harness's tables, by table name. The runner adds
        run_id, task_id and stream_position and validates each row against its record model in
        harness/records.py, the one place the columns are defined."""
        rows: dict[str, list[dict[str, Any]]] = {}
        if self.memory is not None:
            rows["memory_events"] = self.memory.take_events()
        if self.gate is not None:
            rows["gate_events"] = self.gate.take_events()
        if self.safety is not None:
            rows["safety_events"] = self.safety.take_events()
        if self._steps:
            rows["steps"], self._steps = self._steps, []
        return rows

    async def assess(self, task: TaskView, episode: EnvEpisode, attempt: Attempt, number: int,
                     reflection: str | None) -> AttemptResult:
        truth = episode.score()
        judge_score = None
        if self.judge is not None:
            judge_score = await self.judge.score(task.question, attempt.final_output or "")
        reward = judge_score if self.reward_source == "judge" and judge_score is not None else truth.score
        return AttemptResult(number=number, response=truth.response, raw_response=attempt.final_output,
                             steps=attempt.steps,
                             success=truth.success, score=truth.score, judge_score=judge_score,
                             reward=reward, reflection=reflection)

    def sampling(self, temperature: float, draw: int = 0) -> dict[str, float | int]:
        """Completion parameters for a sampled (not greedy) call that replays exactly: the provider's
        `seed` is derived from the agent run's seed, the attempt and the draw."""
        return {"temperature": temperature, "seed": self.seed * 1_000_003 + self.attempt * 1_009 + draw}

    def messages_for(self, observation: str, system_prompt: str | None = None) -> list[Message]:
        """System prompt (plus recalled lessons), recalled worked examples, then the observation."""
        system = system_prompt or self.system_prompt
        examples: list[Message] = []
        if self.memory is not None:
            system += self.memory.system_addendum()
            examples = self.memory.example_turns()
        return [{"role": "system", "content": system}, *examples, {"role": "user", "content": observation}]

    def own_tools(self) -> dict[str, OwnTool]:
        """Tools the agent itself offers besides the environment's, by name: a spec and the coroutine
        that answers a call (a learnt tool, say). Offered only in environments with tools."""
        return {}

    async def act(self, episode: EnvEpisode, messages: list[Message], purpose: Purpose = "act",
                  record: bool = True, **params: Any) -> Attempt:
        """The plain acting loop: send, step the environment with the reply, repeat until done.
        In multi-step environments the prompt keeps the first messages and the last
        `history_window` turns, and every action is recorded for the steps table. Where the episode
        offers tools they go to the model natively (`tools`) when it has function calling, else
        described in the system prompt with the JSON-in-text protocol (envs/tool_calls.py); each
        call is an action, and the first plain-text reply ends the episode. The sealed gate acts
        through it too, with purpose validate and nothing recorded."""
        output: str | None = None
        steps = 0
        own = self.own_tools() if episode.tools is not None else {}
        offered = [*(episode.tools or []), *(spec for spec, _ in own.values())]
        native = bool(offered) and self.llm.function_calling
        opening = messages
        if offered and not native:
            opening = [{**messages[0], "content": f"{messages[0]['content']}\n\n{describe_tools(offered)}"},
                       *messages[1:]]
        turns: list[list[Message]] = []
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
                if record:
                    self._record_step(episode, completion, steps, output, result.observation, result.reward,
                                      first=True)
                continue
            results: list[ToolResult] = []
            for call in calls:
                if episode.done:  # the env's action limit, reached within one reply's calls
                    break
                handler = own.get(call.name)
                results.append(await handler[1](call) if handler else episode.call_tool(call))
                steps += 1
                if record:
                    self._record_step(episode, completion, steps, call.render(), results[-1].content, 0.0,
                                      first=len(results) == 1, result=results[-1])
            if native:
                turns.append([{"role": "assistant", "content": output or None,
                               "tool_calls": [r.call.message() for r in results]},
                              *({"role": "tool", "tool_call_id": r.call.id, "content": r.content}
                                for r in results)])
            else:
                turns.append([{"role": "assistant", "content": output},
                              {"role": "user",
                               "content": f"Result of {calls[0].name}: {results[0].content}"}])
        return Attempt(final_output=output, steps=steps)

    def _record_step(self, episode: EnvEpisode, completion: Completion, step: int, action: str,
                     observation: str, reward: float, first: bool, result: ToolResult | None = None) -> None:
        """A row of the steps table; a reply's tokens go on its first action only, so they add up."""
        if not episode.multi_step:
            return
        self._steps.append({
            "attempt": self.attempt, "step": step, "action": action, "observation": observation[:1000],
            "observation_chars": len(observation), "reward": reward, "done": episode.done,
            "prompt_tokens": completion.usage.prompt_tokens if first else 0,
            "completion_tokens": completion.usage.completion_tokens if first else 0,
            "call_id": completion.call_id, "tool": result.call.name if result else None,
            "arguments": result.call.arguments if result else None,
            "tool_error": result.error if result else None})

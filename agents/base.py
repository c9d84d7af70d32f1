"""The base agent: attempts, the acting loop, memory, and what a snapshot keeps.

An agent lives for its whole stream. For each task the runner hands it a `Trial`; the agent makes
up to `max_attempts` attempts, each in a fresh environment episode (`solve`), has each one assessed
by the trial, and may prepare between attempts (`before_retry`, where Reflexion reflects). After the
task, `learn` sees the outcome. Agents reach models only through their context's `ModelClient`;
every call carries a purpose, so self-improvement is never billed as acting. What an agent writes
for itself passes the context's guard (the safety check and the sealed gate, harness-side).
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any

from agents.acting import ActingLoop, OwnTool
from agents.memory_store import EpisodicMemory
from envs.base import EnvEpisode, TaskView
from harness import agent_api
from harness.agent_api import (
    AgentContext,
    Attempt,
    AttemptResult,
    Feedback,
    GateKind,
    LearntState,
    Message,
    Opening,
    Purpose,
    Trial,
    TuningSet,
)

DEFAULT_SYSTEM_PROMPT = "You are a concise assistant. Answer with the answer only, no explanation."


def require_placeholders(option: str, template: str, *names: str) -> None:
    """Refuse a prompt template that lacks any of the `{name}` placeholders its agent fills in, in
    one line naming the option and what is missing: "variant.x_prompt must contain {a} and {b}"."""
    missing = [f"{{{name}}}" for name in names if f"{{{name}}}" not in template]
    if missing:
        raise ValueError(f"{option} must contain {' and '.join(missing)}")


class BaseAgent(agent_api.Agent):
    #: How the agent's prompt relates to the evaluated stream; OPRO-like variants that tune on a
    #: split say `held_out` or `resubstitution`.
    protocol: str = "online"

    def __init__(self, context: AgentContext, system_prompt: str = DEFAULT_SYSTEM_PROMPT,
                 max_steps: int = 50, max_attempts: int = 1, history_window: int = 4,
                 memory: dict[str, Any] | None = None) -> None:
        if max_steps < 1:
            raise ValueError(f"variant.max_steps must be >= 1, got {max_steps}")
        if max_attempts < 1:
            raise ValueError(f"variant.max_attempts must be >= 1, got {max_attempts}")
        self.context = context
        self.llm = context.llm
        self.guard = context.guard
        self.recorder = context.recorder
        self.seed = context.seed
        self.repeat = context.repeat
        self.attempt = 0
        """Number of the attempt in progress (1-based), for variants that vary their sampling."""
        self.system_prompt = system_prompt
        self.max_attempts = max_attempts
        self.loop = ActingLoop(self.llm, max_steps, history_window, self.recorder)
        self.memory = (EpisodicMemory(self.llm, context.recorder, directory=context.workdir / "memory",
                                      table=context.run_id, **memory) if memory is not None else None)
        self.stream_position = 0

    @classmethod
    def uses_embedder(cls, options: dict[str, Any]) -> bool:
        """Episodic memory (`variant.memory`) recalls by similarity, with any variant."""
        return options.get("memory") is not None

    def gated_edits(self) -> tuple[GateKind, ...]:
        """The kinds of self-edit this agent puts to the gate with variant.gate=sealed."""
        return ("lesson",) if self.memory is not None and self.memory.mode == "lessons" else ()

    async def prepare(self, tuning: TuningSet) -> None:
        """Before the first task: tune on held-out tasks (charged to the first task's episode)."""

    async def run_task(self, trial: Trial) -> list[AttemptResult]:
        """Attempt until rewarded or out of attempts; every attempt is kept."""
        if self.memory is not None:
            await self.memory.recall(trial.task, screen=self.guard.screen if self.guard.safety else None)
        results: list[AttemptResult] = []
        reflection: str | None = None
        while True:
            episode = trial.start_attempt()
            self.attempt = len(results) + 1
            attempt = await self.solve(episode)
            results.append(await trial.assess(episode, attempt, reflection))
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
        lessons memory would recall for each probe question, without and with the new one, where
        the agent shows them (the question's turn)."""
        memory = self.memory
        assert memory is not None

        async def incumbent(view: TaskView) -> Opening:
            return self.opening(lessons=await memory.lessons_for(view.question))

        async def candidate(view: TaskView) -> Opening:
            return self.opening(lessons=await memory.lessons_for(view.question,
                                                                 (text, question_vector, importance)))

        return await self.guard.admit("lesson", item_id, text, incumbent, candidate)

    def export_state(self) -> dict[str, Any]:
        """What the agent has learnt besides its memory, as JSON values (a snapshot's state.json).
        Variants with more learnt state (tools, playbooks) add theirs and read it back in
        `import_state`."""
        return {"system_prompt": self.system_prompt, "protocol": self.protocol}

    def import_state(self, state: dict[str, Any]) -> None:
        self.system_prompt = state["system_prompt"]
        self.protocol = state["protocol"]

    async def export_learnt(self) -> LearntState:
        items, version = await self.memory.export() if self.memory is not None else (None, None)
        return LearntState(state=self.export_state(), system_prompt=self.system_prompt, memory=items,
                           memory_version=version,
                           memory_items=self.memory.size if self.memory is not None else None)

    async def import_learnt(self, state: dict[str, Any], memory: Any | None,
                            files: Path | None = None) -> None:
        self.import_state(state)
        if self.memory is not None and memory is not None:
            await self.memory.load(memory)

    def memory_size(self) -> int | None:
        """Items the agent keeps (memory items; variants with bullets or skills add theirs); None for
        agents that keep none."""
        return self.memory.size if self.memory is not None else None

    def sampling(self, temperature: float, draw: int = 0) -> dict[str, float | int]:
        """Completion parameters for a sampled (not greedy) call that replays exactly: the provider's
        `seed` is derived from the agent run's seed, the attempt, the draw and the repeat."""
        seed = self.seed * 1_000_003 + self.attempt * 1_009 + draw + self.repeat * 7_919_999
        return {"temperature": temperature, "seed": seed}

    def messages_for(self, observation: str, system_prompt: str | None = None, task_context: str = "",
                     lessons: str | None = None, examples: list[Message] | None = None) -> list[Message]:
        """The messages of an act call, the stable part first, so that a provider's prompt cache
        (OpenAI's longest seen prefix, Anthropic's `cache_control`) can hold it from task to task:

        1. the system message: `system_prompt` (the agent's own, maybe OPRO-tuned, by default), with
           whatever learnt context a variant adds that does not depend on the task (its playbook).
           Byte for byte the same on every task while the learnt state stands;
        2. what this task brings: memory's worked examples (`examples`, by default what memory
           recalled for the task) as earlier turns, then one user turn with the task's context, i.e.
           memory's lessons (`lessons`, by default those recalled for the task) and the variant's
           `task_context` (retrieved skills, reflections, a tool's hint), then the observation.

        The task's context goes into the question's own turn, just before it, rather than into a
        turn of its own: the model reads it as part of the request it is about; user and assistant
        turns still alternate, which some chat templates (Gemma's, Mistral's) require; the worked
        examples stay plain question-and-answer demonstrations; and in a multi-step environment it
        stays in every step's prompt, with the rest of the opening messages."""
        system = system_prompt or self.system_prompt
        if lessons is None:
            lessons = self.memory.recalled_lessons() if self.memory is not None else ""
        if examples is None:
            examples = self.memory.example_turns() if self.memory is not None else []
        context = "\n\n".join(block for block in (lessons, task_context) if block)
        question = f"{context}\n\n{observation}" if context else observation
        return [{"role": "system", "content": system}, *examples, {"role": "user", "content": question}]

    def opening(self, system_prompt: str | None = None, task_context: str = "", lessons: str = "",
                examples: list[Message] | None = None) -> Opening:
        """What a learnt state shows a sealed-gate probe, as a function of the probe's observation:
        `messages_for` with this state's context and none of the current task's recall."""
        return lambda observation: self.messages_for(observation, system_prompt, task_context, lessons,
                                                     examples or [])

    def own_tools(self) -> dict[str, OwnTool]:
        """Tools the agent itself offers besides the environment's, by name: a spec and the coroutine
        that answers a call (a learnt tool, say). Offered only in environments with tools."""
        return {}

    async def act(self, episode: EnvEpisode, messages: list[Message], purpose: Purpose = "act",
                  record: bool = True, **params: Any) -> Attempt:
        """The acting loop (agents/acting.py) with this agent's own tools. The sealed gate acts
        through it too, with purpose validate and nothing recorded."""
        own = self.own_tools() if episode.tools is not None else {}
        return await self.loop.run(episode, messages, own, self.attempt, purpose, record, **params)

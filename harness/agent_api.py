"""What agents and the harness share: the one module of the harness that agents import.

It imports no agent, and of the harness only what it hands on to agents: what a model call carries
(the reply, its function calls, the JSON-in-text protocol: harness/models/chat.py), the sandbox they
run model-written code in, the table records their rows are, one-line errors and safe text.

Agents (`agents/`) see the harness only through this: the model client they call, the trial of a
task, what an attempt and its verdicts are, the guard their self-edits pass, and the recorder
their rows go to. The harness hosts agents through `Agent` and builds them by `_target_`, so it
never imports `agents/`.
"""

from __future__ import annotations

import abc
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from envs.base import EnvEpisode, TaskView
from harness.errors import one_line as one_line  # re-exported: agents' one-line errors

# What a model call carries, re-exported: the reply, its function calls and the JSON-in-text protocol.
from harness.models.chat import Completion as Completion
from harness.models.chat import Message as Message
from harness.models.chat import ToolCall as ToolCall
from harness.models.chat import describe_tools as describe_tools
from harness.models.chat import parse_text_call as parse_text_call
from harness.sandbox import Sandbox as Sandbox  # re-exported: where agents run code the model wrote
from harness.sandbox import SandboxResult as SandboxResult
from harness.sandbox import kernel_isolation_problem as kernel_isolation_problem
from harness.tables.records import EditKind, GateKind, Purpose, Record

# The rows agents write, re-exported: agents import this module and no other of the harness.
from harness.tables.records import MemoryEventRow as MemoryEventRow
from harness.tables.records import PlaybookEventRow as PlaybookEventRow
from harness.tables.records import PromptRow as PromptRow
from harness.tables.records import SkillEventRow as SkillEventRow
from harness.tables.records import StepRow as StepRow
from harness.tables.records import ToolEventRow as ToolEventRow
from harness.text import safe_text as safe_text  # re-exported: text from a tool, made safe


class ModelClient(Protocol):
    """The only way agents reach a model."""

    function_calling: bool
    """The model takes `tools` and answers with `tool_calls` (else tools go through the text protocol)."""

    async def complete(self, messages: list[Message], purpose: Purpose = "act",
                       **params: Any) -> Completion: ...

    async def embed(self, texts: list[str]) -> list[list[float]]: ...


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
    score_reason: str | None = None
    """The checker's one-line reason for `score`, where it gives one (envs/scorers/)."""
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
    answer: str | None = None
    """The task's reference answer, revealed after its final attempt with stream.feedback=answer
    (online supervised learning); None with stream.feedback=outcome, the default."""

    @property
    def final(self) -> AttemptResult:
        return self.attempts[-1]


class Trial(abc.ABC):
    """One task as the agent sees it: it can start fresh attempts of it and have each assessed."""

    task: TaskView

    @abc.abstractmethod
    def start_attempt(self) -> EnvEpisode:
        """A fresh environment episode of the task; later model calls count for this attempt."""

    @abc.abstractmethod
    async def assess(self, episode: EnvEpisode, attempt: Attempt, reflection: str | None) -> AttemptResult:
        """The attempt's verdicts: the environment's score and, where configured, the judge's; the
        reward the agent is told is the one `reward_source` names."""


class TuningAttempt(BaseModel):
    """One single-turn answer to a tuning task under a candidate system prompt, with its verdict."""

    model_config = ConfigDict(frozen=True)

    task: TaskView
    answer: str
    success: bool
    score: float


class TuningSet(abc.ABC):
    """Tasks an agent may tune on before its stream, and a way to score a system prompt on them."""

    tasks: list[TaskView]
    held_out: bool
    """True when the tasks are disjoint from the evaluated stream; False for resubstitution."""

    @abc.abstractmethod
    async def attempt(self, system_prompt: str, indices: Sequence[int]) -> list[TuningAttempt]:
        """Single-turn answers under `system_prompt` to the tasks at `indices`, concurrently, in
        their order (calls: purpose optimize)."""

    async def evaluate(self, system_prompt: str, limit: int | None = None) -> float:
        """Success rate of single-turn answers under `system_prompt` to the first `limit` tasks."""
        attempts = await self.attempt(system_prompt, range(len(self.tasks[:limit])))
        return sum(a.success for a in attempts) / len(attempts) if attempts else 0.0


Opening = Callable[[str], list[Message]]
"""A learnt state's opening messages for an observation, each part where the agent puts it (the
stable system message first, then the task's lessons or skills, then the observation)."""
Render = Callable[[TaskView], Awaitable[str | Opening]]
"""What a learnt state shows for a task, as the sealed gate probes it: its opening messages, or a
bare system prompt (for a state that changes only the system message)."""


class Audit(BaseModel):
    """The sealed gate's verdict on one self-edit (harness/agent_run/gate.py)."""

    model_config = ConfigDict(frozen=True)

    probe_tasks: int
    incumbent_correct: int
    candidate_correct: int
    regressions: int
    accepted: bool


class SafetyCheck(Protocol):
    async def check(self, text: str, stage: str, kind: EditKind, item_id: str) -> bool: ...


class Gate(Protocol):
    regression_budget: int

    async def audit(self, kind: GateKind, edit_id: str, text: str, incumbent: Render,
                    candidate: Render) -> Audit: ...


@dataclass
class Guard:
    """The harness's checks on what an agent writes for itself, composed around the agent (like
    inspect_ai's approvers): the safety check when an edit is written and when it is retrieved,
    then the sealed gate. With neither, every edit passes. The harness builds it from the variant's
    `safety` and `gate` options; agents only ask it."""

    safety: SafetyCheck | None = None
    gate: Gate | None = None

    async def check(self, kind: EditKind, item_id: str, text: str) -> bool:
        """The write-time safety check alone (True without one)."""
        return self.safety is None or await self.safety.check(text, "write", kind, item_id)

    async def screen(self, kind: EditKind, item_id: str, text: str) -> bool:
        """Whether a stored item may go into a prompt (the safety check on retrieval)."""
        return self.safety is None or await self.safety.check(text, "retrieve", kind, item_id)

    async def audit(self, kind: GateKind, edit_id: str, text: str, incumbent: Render,
                    candidate: Render) -> Audit | None:
        """The sealed gate's verdict on the edit; None where no gate is configured."""
        return None if self.gate is None else await self.gate.audit(kind, edit_id, text, incumbent, candidate)

    async def admit(self, kind: EditKind, edit_id: str, text: str, incumbent: Render | None = None,
                    candidate: Render | None = None) -> bool:
        """Whether a self-edit may take effect: the safety check, then the gate on the incumbent and
        candidate states' prompts."""
        if not await self.check(kind, edit_id, text):
            return False
        if incumbent is None or candidate is None:
            return True
        audit = await self.audit(kind, edit_id, text, incumbent, candidate)
        return audit is None or audit.accepted


R = TypeVar("R", bound=Record)


class Recorder:
    """Where an agent's rows go: each is made as its record model (harness/tables/records.py) where the
    agent makes it, so a wrong field fails inside the episode that made it. The harness says which
    episode the rows belong to and takes them after it."""

    def __init__(self) -> None:
        self.where: dict[str, Any] = {"run_id": "agent", "episode_id": "", "task_id": "",
                                      "stream_position": 0}
        self._rows: defaultdict[str, list[Record]] = defaultdict(list)

    def start_episode(self, run_id: str, episode_id: str, task_id: str, stream_position: int) -> None:
        self.where = {"run_id": run_id, "episode_id": episode_id, "task_id": task_id,
                      "stream_position": stream_position}

    def emit(self, model: type[R], **fields: Any) -> R:
        row = model(**self.where, **fields)
        self._rows[model.table].append(row)
        return row

    def take(self) -> dict[str, list[Record]]:
        """Rows made since the last call, by table."""
        rows, self._rows = dict(self._rows), defaultdict(list)
        return rows


class ModelEndpoint(Protocol):
    """The run's model behind an OpenAI-compatible HTTP endpoint (harness/agent_run/endpoint.py),
    for outside agents (agents/external.py): their calls become the run's calls, as native ones."""

    api_key: str
    """This run's own key (`rotate_key` replaces it)."""

    @property
    def model(self) -> str: ...

    @property
    def base_url(self) -> str:
        """The URL that bills purpose act (`http://127.0.0.1:<port>/v1`)."""

    def url(self, purpose: str) -> str:
        """The URL that bills `purpose`."""

    def urls(self) -> dict[str, str]: ...

    def rotate_key(self) -> None: ...

    def take_stop(self) -> BaseException | None:
        """A failure of an endpoint call that must end the episode (a spent budget, an unusable
        model), once."""

    def environment(self) -> dict[str, str]:
        """The environment of an outside agent's process: this one's without its secrets, and the
        endpoint's URL, key and model (HARNESS_* and OPENAI_*)."""


class Judge(Protocol):
    """An LLM judge as agents may use it (best-of-k's pick): a score in [0, 1] for an answer."""

    async def score(self, question: str, answer: str) -> float: ...


class LearningExample(BaseModel):
    """What a weight update learns from: to `messages` (the opening of an attempt), `reply`; for a
    preference update, `reply` preferred to `rejected`."""

    model_config = ConfigDict(frozen=True)

    messages: list[Message]
    reply: str
    rejected: str | None = None
    source: Literal["own", "revealed"] = "own"
    """own: a reply of the agent's that succeeded; revealed: the reference answer the task revealed
    (Feedback.answer)."""


class TrainOptions(BaseModel):
    """How a weight update trains: the variant's `training` options (conf/variant/sft.yaml)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(default=4, gt=0)
    learning_rate: float = Field(default=2e-3, gt=0)
    rank: int = Field(default=8, gt=0)
    alpha: float = Field(default=16.0, gt=0)
    modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    max_examples: int = Field(default=16, gt=0)
    """The most recent examples an update trains on."""
    max_tokens: int = Field(default=512, gt=0)
    """An example longer than this is cut, its prompt from the left."""
    beta: float = Field(default=0.1, gt=0)
    """DPO's temperature (dpo only)."""
    threads: int = Field(default=1, gt=0)
    """torch's threads during an update."""
    memory_gb: float = Field(default=2.0, gt=0)
    """What one learner's trainer is reserved (fp32 weights, an update, the optimiser's state): the
    pool runs as many learners at once as the machine's memory holds at this size."""


class WeightUpdate(BaseModel):
    """One update as the agent sees it (its full row is the harness's: the `training` table)."""

    model_config = ConfigDict(frozen=True)

    update: int
    adapter: str
    """sha256 of the adapter the run's calls are served with from now on."""
    examples: int
    loss_before: float | None
    loss_after: float | None


class Trainer(Protocol):
    """The weights of the run's model, for agents that learn in them (variant=sft, dpo): each update
    trains the run's own LoRA adapter from where it stands, and the run's later calls are answered by
    the base model with it. The harness trains, prices, records and serves (harness/training/)."""

    adapter: str | None
    """The current adapter's hash; None: the base model."""

    async def update(self, kind: Literal["sft", "dpo"], examples: list[LearningExample],
                     options: TrainOptions) -> WeightUpdate: ...

    def saved(self) -> Path | None:
        """The current adapter's directory, for a snapshot to keep (None: the base model)."""

    async def adopt(self, directory: Path | None) -> None:
        """Serve and train on from the adapter saved in `directory` (a snapshot's); None: the base."""


@dataclass
class AgentContext:
    """What the harness gives every agent, apart from its own settings: the model, the run it
    belongs to, where it may keep files, the guard on its self-edits and where its rows go."""

    llm: ModelClient
    seed: int = 0
    repeat: int = 0
    """Which repeat of its agent run (stream.repeats): its sampled calls draw their own seeds."""
    run_id: str = "agent"
    workdir: Path = Path(".")
    guard: Guard = field(default_factory=Guard)
    recorder: Recorder = field(default_factory=Recorder)
    judge: Judge | None = None
    """The run's judge (variant.judge), where one is configured."""
    endpoint: Callable[[], Awaitable[ModelEndpoint]] | None = None
    """Serves the run's model over HTTP while the run is live (outside agents call it); None
    where no run is live (a config check)."""
    trainer: Trainer | None = None
    """The run model's weights, for an agent whose class says it learns in them (`Agent.learns_weights`);
    None for every other agent."""


class LearntState(BaseModel):
    """What an agent has learnt, as a snapshot keeps it (harness/agent_run/snapshots.py)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    state: dict[str, Any]
    """JSON values: the prompt, the protocol and whatever else the variant learnt (state.json)."""
    system_prompt: str
    tools: int = 0
    """Learnt tools kept."""
    memory: Any = None
    """Every memory item, vectors included, as an Arrow table; None without memory items."""
    memory_version: int | None = None
    memory_items: int | None = None
    files: Path | None = None
    """A directory the snapshot keeps as it is (an outside agent's saved state or workdir)."""


class Agent(abc.ABC):
    """The extension point: one learning agent for one stream. `agents/base.py` implements it."""

    protocol: str
    """How the agent's prompt relates to the evaluated stream: online, held_out or resubstitution."""
    stream_position: int
    """Position in the stream of the task in progress (set by the runner)."""
    system_prompt: str

    @abc.abstractmethod
    def gated_edits(self) -> tuple[GateKind, ...]:
        """The kinds of self-edit this agent puts to the guard's sealed gate."""

    @abc.abstractmethod
    async def prepare(self, tuning: TuningSet) -> None:
        """Before the first task: tune on held-out tasks (charged to the first task's episode)."""

    @abc.abstractmethod
    async def run_task(self, trial: Trial) -> list[AttemptResult]:
        """Attempt the task; every attempt is kept."""

    @abc.abstractmethod
    async def learn(self, feedback: Feedback) -> None:
        """Update the agent's own state after a task."""

    @abc.abstractmethod
    async def act(self, episode: EnvEpisode, messages: list[Message], purpose: Purpose = "act",
                  record: bool = True, **params: Any) -> Attempt:
        """Act in `episode` from these opening messages (the sealed gate's probes act through it)."""

    @abc.abstractmethod
    def memory_size(self) -> int | None:
        """Items the agent keeps; None for agents that keep none."""

    @abc.abstractmethod
    async def export_learnt(self) -> LearntState: ...

    @abc.abstractmethod
    async def import_learnt(self, state: dict[str, Any], memory: Any | None,
                            files: Path | None = None) -> None:
        """Start from a snapshot: its state.json values, its memory items (an Arrow table) and the
        directory of files it kept."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """The run is over: release what the agent holds (an outside agent's process)."""

    @classmethod
    def learns_weights(cls, options: dict[str, Any]) -> bool:
        """Whether an agent of this class built with `options` trains the model's weights (its context
        then has a `trainer`; the model must be one whose weights the harness can load)."""
        return False

    @classmethod
    def uses_embedder(cls, options: dict[str, Any]) -> bool:
        """Whether an agent of this class built with `options` (its variant's) calls `embed`. The
        embedder is served only to runs whose agent says so (the local MiniLM costs a process, torch
        and seconds of start-up); a run whose agent said no gets an error naming this method if it
        embeds all the same."""
        return False

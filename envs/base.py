"""The environment extension point: tasks, episodes and their scores.

An `Environment` is built once per worker (its resources, such as generated games or data tables,
are shared by every episode in that worker). `tasks()` lists the task pool cheaply so the driver can
plan streams; `reset(task)` starts one episode, a small state machine that the agent steps until
it is done and that scores itself.
"""

from __future__ import annotations

import abc
import asyncio
import math
import re
import string
import unicodedata
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import regex
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from envs.tool_calls import Call, ToolResult


class Task(BaseModel):
    """One task of an environment, as planned into a stream."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    """Stable id, unique within its environment."""
    family: str
    """Task family inside the environment (e.g. capital)."""
    question: str
    """What the agent is shown."""
    answer: str
    """Reference answer."""
    aliases: tuple[str, ...] = ()
    """Other answers the checker accepts as exact matches."""
    answer_pattern: str | None = None
    """A regex with an `answer` group: when the reply matches it (e.g. "The capital city of France is
    Paris."), the group is taken as the answer. None: the reply itself must be the answer."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Environment-specific data the episode needs (never shown to the agent)."""


class TaskView(BaseModel):
    """A task as agents may see it: no reference answer, no checker data."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    family: str
    question: str

    @classmethod
    def of(cls, task: Task) -> TaskView:
        return cls(task_id=task.task_id, family=task.family, question=task.question)


class Score(BaseModel):
    model_config = ConfigDict(frozen=True)

    success: bool
    score: float
    response: str | None
    reason: str | None = None
    """One line: why this score, where the checker says (a scorer always does)."""


class Verdict(BaseModel):
    """A scorer's verdict on one reply (envs/scorers/)."""

    model_config = ConfigDict(frozen=True)

    score: float
    """In [0, 1]; partial credit where the scorer has it."""
    success: bool
    """Full marks (a scorer with partial credit says where success starts)."""
    response: str | None
    """The answer the scorer read in the reply (what `attempts.response` shows)."""
    reason: str
    """One line: why this score ("matches the reference", "no number in the reply", ...)."""


class ReplyScorer(Protocol):
    """What a single-turn episode scores a reply with: `envs.scorers.Scorer`."""

    blocking: bool
    """`score` can take seconds: run it in a thread, off the event loop."""

    def score(self, reply: str, task: Task) -> Verdict: ...


class Checks(Protocol):
    """What the harness lends a scorer that settles its verdict after the step: the run's model as
    the benchmark's grader (`complete`: every such call has its row in llm_calls, purpose grade, priced,
    outside the agent's budget; envs/scorers/judge.py) and the sandbox (`run_tests`: a program and its
    tests, each run where it reaches nothing of ours and apart from the other, the verdict "passed" or
    "failed: <why>"; envs/scorers/code.py)."""

    async def complete(self, messages: list[dict[str, Any]], **params: Any) -> Any: ...

    async def run_tests(self, program: str, tests: str, wall_s: float, memory_mb: int, weak: bool) -> str: ...


class StepResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    observation: str
    reward: float
    done: bool


class EnvEpisode(abc.ABC):
    """One episode of one task: observe, step until done, then score.

    The task (with its reference) stays private to the episode: agents get only what they observe.
    """

    multi_step = False
    """True for environments that take several actions per episode (their steps are recorded)."""

    def __init__(self, task: Task) -> None:
        self._task = task
        self.done = False

    @property
    @abc.abstractmethod
    def observation(self) -> str:
        """What the agent sees now."""

    @abc.abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply the agent's action (a single-turn task's answer is its only action); in an
        environment with tools, the final plain-text reply."""

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """Function specs (OpenAI format) of the tools this episode offers; None: no tools."""
        return None

    def call_tool(self, call: Call) -> ToolResult:
        """Run one tool call; a malformed one comes back as a result with its error kind."""
        raise NotImplementedError(f"episode of task {self._task.task_id} offers no tools")

    async def settle(self, checks: Checks) -> None:  # noqa: B027 - optional hook
        """Finish scoring where the scorer settles after the step (it asks a model or runs code),
        before `score`; the harness calls it once the episode is done."""

    @abc.abstractmethod
    def score(self) -> Score:
        """The checker's verdict on the episode so far."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the episode holds (a game interpreter, say)."""


class Environment(abc.ABC):
    """A family of tasks behind one protocol. Subclasses are built with `hydra.utils.instantiate`."""

    name: str = "env"
    packages: ClassVar[tuple[str, ...]] = ()
    """The pip distributions the environment imports (beyond the harness's own): each run's
    manifest records their installed versions."""
    family_option: ClassVar[str | None] = None
    """The constructor option that selects task families (countries' `families`), if there is one.
    Left null in the config, the planner fills it: `default_families` for sequential and isolated
    streams, `interleaved_families` for interleaved ones, which need several."""
    default_families: ClassVar[tuple[str, ...]] = ()
    interleaved_families: ClassVar[tuple[str, ...]] = ()
    order_option: ClassVar[str | None] = None
    """The constructor option that, when set, orders the pool (the dataset env's `order_by`): then a
    stream keeps the order of `tasks()` instead of a seeded shuffle (harness/agent_run/streams.py)."""

    @abc.abstractmethod
    def tasks(self) -> list[Task]:
        """The evaluation pool, in a fixed order; streams are seeded samples of it (kept in this order
        where the env's `order_option` is set)."""

    def setup(self, tasks: list[Task]) -> None:  # noqa: B027 - optional hook
        """Build what these tasks need (games, generators) before any episode; timed as set-up."""

    def tuning_tasks(self) -> list[Task]:
        """An explicit tuning split, disjoint from `tasks()`; empty (the default) lets the harness
        hold out `stream.tuning_size` tasks of the pool instead."""
        return []

    def task_for_seed(self, task: Task, seed: int) -> Task:
        """The task as the agent run with this seed is shown it: the same task, unless the env varies
        it by seed (the dataset env's shuffled options: each seed its own order). The planner asks for
        every task of every run's stream; the default is the task unchanged."""
        return task

    @abc.abstractmethod
    def reset(self, task: Task) -> EnvEpisode:
        """Start an episode on `task`."""


class SingleTurnEpisode(EnvEpisode):
    """A question answered in one step, scored by `scorer` (envs/scorers/); without one, the answer
    is the reply's first line (or the task's `answer_pattern` group) checked by exact match after
    normalisation, and environments with their own checker override `extract` and `grade`."""

    def __init__(self, task: Task, scorer: ReplyScorer | None = None) -> None:
        super().__init__(task)
        self.scorer = scorer
        self._response: str | None = None
        self._score = 0.0
        self._success: bool | None = None
        self._reason: str | None = None
        self._unsettled: str | None = None
        """The reply, until a scorer that settles after the step has scored it (`settle`)."""

    @property
    def observation(self) -> str:
        return self._task.question

    def extract(self, action: str) -> str:
        return extract_answer(action, self._task.answer_pattern)

    def grade(self, response: str) -> float:
        accepted = {normalize(a) for a in (self._task.answer, *self._task.aliases)}
        return float(normalize(response) in accepted)

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError(f"episode of task {self._task.task_id} is already done")
        if self.scorer is not None and (getattr(self.scorer, "settles", False)
                                        or getattr(self.scorer, "blocking", False)):
            self._unsettled = action  # scored by `settle`: a model asked, code run, or a slow check
        elif self.scorer is not None:
            self._take(self.scorer.score(action, self._task))
        else:
            self._response = self.extract(action)
            self._score = self.grade(self._response)
        self.done = True
        return StepResult(observation="", reward=self._score, done=True)

    def _take(self, verdict: Verdict) -> None:
        self._response, self._score = verdict.response, verdict.score
        self._success, self._reason = verdict.success, verdict.reason

    async def settle(self, checks: Checks) -> None:
        if self._unsettled is not None:
            reply, self._unsettled = self._unsettled, None
            if getattr(self.scorer, "settles", False):
                self._take(await self.scorer.settle(reply, self._task, checks))  # type: ignore[union-attr]
            else:
                self._take(await asyncio.to_thread(self.scorer.score, reply, self._task))  # type: ignore[union-attr]

    def score(self) -> Score:
        if self._unsettled is not None:
            raise RuntimeError(f"episode of task {self._task.task_id} is scored after its step: settle it "
                               "first")
        # Without a scorer, success means full marks; partial credit is reported in `score`.
        success = self._success if self._success is not None else self._score >= 1.0
        return Score(success=success, score=self._score, response=self._response, reason=self._reason)


_ANSWER_PREFIX = re.compile(r"^\s*(final answer|answer)\s*[:\-]\s*", re.IGNORECASE)


def nonfinite_answer(value: Any) -> str | None:
    """Why a reference that is a number no reply can give is refused: NaN, Infinity or 1e309 (read as
    inf), whose text "nan" or "inf" the file did not say; None for any other value."""
    if isinstance(value, float) and not math.isfinite(value):
        return (f"{value} is not a finite number (NaN, Infinity or past 1.8e308); write the reference as "
                "text if that is what it is")
    return None


PATTERN_TIMEOUT_S = 1.0
"""How long a pattern (a task's answer_pattern, the regex scorer's, env=dataset's answer_regex) may run
on one text (the `regex` module's time limit: Python's `re` has none, and a pattern such as
`(x+x+)+y` backtracks for minutes on a long line)."""


def extract_answer(completion: str, pattern: str | None = None) -> str:
    """The answer in a completion: its first non-empty line, without an `Answer:` label, narrowed
    to the `answer` group of `pattern` when the line matches it (within PATTERN_TIMEOUT_S; a line
    the pattern cannot finish on is taken whole)."""
    line = next((line for line in completion.strip().splitlines() if line.strip()), "")
    line = _ANSWER_PREFIX.sub("", line).strip()
    if pattern is None:
        return line
    try:
        match = regex.fullmatch(pattern, line, regex.IGNORECASE, timeout=PATTERN_TIMEOUT_S)
    except TimeoutError:
        return line
    return match.group("answer").strip() if match else line


_PUNCTUATION = str.maketrans(dict.fromkeys(string.punctuation + "\u2019\u2018\u201c\u201d", " "))


def normalize(text: str) -> str:
    """Case, accents, punctuation and spacing folded, so "  São-Tomé." matches "sao tome"."""
    decomposed = unicodedata.normalize("NFKD", text)
    without_accents = "".join(c for c in decomposed if not unicodedata.combining(c))
    return " ".join(without_accents.casefold().translate(_PUNCTUATION).split())

"""The agent-run loop: one agent works through its stream, one task at a time.

Pure scheduling and accounting: hand the agent the task, let it attempt and learn, record.
Agent logic stays in `agents/`, task logic in `envs/`. Every episode's token and cost columns are
sums of the call records written beside it, so the tables cannot disagree: the agent's columns over
its calls, `grade_*` over the benchmark's grading calls (purpose grade), which are in neither the
agent's columns nor its budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import json
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from envs.base import EnvEpisode, Environment, Task, TaskView
from harness.agent_api import (
    Agent,
    Attempt,
    AttemptResult,
    Feedback,
    Judge,
    Recorder,
    Trial,
    TuningAttempt,
    TuningSet,
)
from harness.agent_run.assembly import build_agent, build_judge, split_options
from harness.agent_run.checks import EpisodeChecks
from harness.agent_run.endpoint import RunEndpoint
from harness.agent_run.snapshots import load_snapshot, save_snapshot
from harness.agent_run.spec import AgentRunSpec, CheckedParams, episode_id, probe_points
from harness.clock import utc_now
from harness.errors import DiskFull, disk_full, is_disk_full, one_line
from harness.models.model_client import (
    BUDGET_EXHAUSTED,
    AgentModelClient,
    GatewayLink,
    GatewayUnavailable,
    ModelCallError,
    ModelUnavailable,
)
from harness.redact import RedactingSink, Redactor
from harness.tables.costs import add_costs
from harness.tables.records import (
    BENCHMARK_PURPOSES,
    AttemptRow,
    Episode,
    LLMCall,
    Record,
    SnapshotRow,
    TrainingRow,
    TranscriptRow,
    Usage,
)
from harness.text import safe_text
from harness.training.run_trainer import RunTrainer, trainer_for


class RecordSink(Protocol):
    def append(self, table: str, rows: list[dict[str, Any]]) -> None: ...


class _NullSink:
    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        pass


NULL_SINK = _NullSink()


class RunOutcome(BaseModel):
    run_id: str
    episodes: int
    stopped_by: str | None
    """Why the run stopped before the end of its stream (e.g. the budget); None if it finished."""
    spent: Usage = Usage()
    """What the run's calls cost, as its ledger counted them (replayed episodes of a resume included):
    the agent's calls, grading not among them."""
    graded: Usage = Usage()
    """What grading the run's replies cost (purpose grade, the benchmark's: outside `spent` and the
    budget)."""


class EnvTrial(Trial):
    """A task in an environment, run by its episode runner (its env, model client and judge); each
    attempt is a fresh episode and relabels the model calls. An attempt is assessed by the
    environment's checker and, where configured, the judge (which never sees the reference); the agent
    is told the reward the runner's `reward_source` names."""

    def __init__(self, task: Task, runner: EpisodeRunner) -> None:
        self.task = TaskView.of(task)
        self._task = task
        self.runner = runner
        self.attempts_started = 0
        self._episodes: list[EnvEpisode] = []

    async def assess(self, episode: EnvEpisode, attempt: Attempt, reflection: str | None) -> AttemptResult:
        await episode.settle(EpisodeChecks(self.runner.llm))
        truth = episode.score()
        judge, judge_score = self.runner.judge, None
        if judge is not None:
            judge_score = await judge.score(self.task.question, attempt.final_output or "")
        judged = self.runner.reward_source == "judge" and judge_score is not None
        reward = judge_score if judged else truth.score
        return AttemptResult(number=self.attempts_started, response=truth.response,
                             raw_response=attempt.final_output, steps=attempt.steps, success=truth.success,
                             score=truth.score, judge_score=judge_score, reward=reward, reflection=reflection,
                             score_reason=truth.reason)

    def start_attempt(self) -> EnvEpisode:
        self.attempts_started += 1
        self.runner.llm.attempt = self.attempts_started
        episode = self.runner.env.reset(self._task)
        self._episodes.append(episode)
        return episode

    def close(self) -> None:
        for episode in self._episodes:
            episode.close()


class EnvTuningSet(TuningSet):
    def __init__(self, tasks: list[Task], held_out: bool, env: Environment, llm: AgentModelClient) -> None:
        self._tasks = tasks
        self.tasks = [TaskView.of(t) for t in tasks]
        self.held_out = held_out
        self.env = env
        self.llm = llm

    async def attempt(self, system_prompt: str, indices: Sequence[int]) -> list[TuningAttempt]:
        async def one(task: Task) -> TuningAttempt:
            episode = self.env.reset(task)
            messages = [{"role": "system", "content": system_prompt},
                        {"role": "user", "content": episode.observation}]
            try:
                answer = (await self.llm.complete(messages, purpose="optimize")).text
                episode.step(answer)
                await episode.settle(EpisodeChecks(self.llm))
                score = episode.score()
                return TuningAttempt(task=TaskView.of(task), answer=answer, success=score.success,
                                     score=score.score)
            finally:
                episode.close()

        return list(await asyncio.gather(*(one(self._tasks[i]) for i in indices)))


async def start_agent(spec: AgentRunSpec, llm: AgentModelClient, env: Environment,
                      recorder: Recorder, judge: Judge | None = None,
                      endpoint: RunEndpoint | None = None, trainer: RunTrainer | None = None) -> Agent:
    """A new agent for the run: fresh, or with the learnt state of the snapshot it starts from;
    with `variant.gate=sealed`, its sealed gate on the run's tuning split. A learner's weights start
    from the base model (a fresh agent) or the snapshot's adapter."""
    if trainer is not None:
        await trainer.adopt(None)
    agent = build_agent(spec, llm, recorder, env, judge, endpoint.open if endpoint is not None else None,
                        trainer)
    if spec.start_from is not None:
        await load_snapshot(agent, Path(spec.start_from))
    return agent


def snapshot_points(spec: AgentRunSpec) -> set[int]:
    """Stream positions after whose episode the learnt state is saved: every `snapshot_every`
    tasks and the last one; none for a frozen run, which learns nothing."""
    if spec.frozen or not spec.tasks:
        return set()
    every = spec.snapshot_every
    return {p for p in range(len(spec.tasks)) if every and (p + 1) % every == 0} | {len(spec.tasks) - 1}


async def run_agent(spec: AgentRunSpec, params: CheckedParams, env: Environment, gateway: GatewayLink,
                    sink: RecordSink, finished: Collection[str] = ()) -> RunOutcome:
    """Run one agent run to the end of its stream (or its budget), its model calls sent with the
    job's checked `params`; its rows go to `sink`, but for the episodes an earlier run of the job
    `finished`, which are replayed to rebuild the agent's state and not written again."""
    function_calling = params.function_calling
    if function_calling is None:
        from harness.models.capabilities import supports_function_calling  # loaded already where runs run

        function_calling = supports_function_calling(spec.model)
    llm = AgentModelClient(gateway, model=spec.model, run_id=spec.run_id, default_params=params.params,
                           embedder=spec.embedder if spec.embeds else None,
                           model_endpoint=spec.model_endpoint, embedder_endpoint=spec.embedder_endpoint,
                           budget=spec.budget, cache=spec.cache,
                           transcripts=spec.transcripts, function_calling=function_calling,
                           refused_params=params.refused, mark_cache=params.mark_cache,
                           cache_scope=f"repeat-{spec.repeat}" if spec.repeat else "")
    sink = RedactingSink(sink, Redactor.from_environment(spec.secret_env))
    recorder = Recorder()
    options = split_options(spec.variant_cfg)[1]
    judge = build_judge(options, llm)  # one per run: it scores the trials and serves the agent
    episodes = EpisodeRunner(spec, env, llm, sink, recorder, judge, options.reward_source, set(finished))
    endpoint = RunEndpoint(llm, spec.secret_env)  # served only if an outside agent asks for it
    trainer = trainer_for(spec.learner, llm, recorder, spec.run_id, Path(spec.workdir), spec.seed) \
        if spec.learner is not None else None
    hosted: list[Agent] = []
    try:
        hosted.append(await start_agent(spec, llm, env, recorder, judge, endpoint, trainer))
        return await _run_stream(spec, llm, env, recorder, judge, episodes, endpoint, hosted, trainer)
    finally:
        for agent in hosted:
            with contextlib.suppress(Exception):  # what ended the run is what to report
                await agent.close()
        await endpoint.close()
        if trainer is not None:
            await trainer.close()


async def _run_stream(spec: AgentRunSpec, llm: AgentModelClient, env: Environment, recorder: Recorder,
                      judge: Judge | None, episodes: EpisodeRunner, endpoint: RunEndpoint,
                      hosted: list[Agent], trainer: RunTrainer | None) -> RunOutcome:
    agent = hosted[0]
    probes = probe_points(spec)
    snapshots = snapshot_points(spec)
    tune = spec.start_from is None and not spec.frozen  # a snapshot's prompt is already tuned
    for position, task in enumerate(spec.tasks):
        stop = episodes.stopped_by or llm.ledger.exhausted()
        if stop is not None:
            if position > 0 and position - 1 not in snapshots and not spec.frozen:
                await episodes.snapshot(agent, position - 1, final=True)
            episodes.not_attempted(agent, spec.tasks[position:], position, stop)
            return RunOutcome(run_id=spec.run_id, episodes=position, stopped_by=stop, spent=llm.ledger.spent,
                              graded=llm.grading.spent)
        if spec.scenario == "isolated" and position > 0:  # fresh: nothing learnt carries over
            await hosted.pop().close()
            agent = await start_agent(spec, llm, env, recorder, judge, endpoint, trainer)
            hosted.append(agent)
        fresh = position == 0 or spec.scenario == "isolated"
        await episodes.run(agent, task, position, prepare=tune and fresh, snapshot=position in snapshots)
        if position in probes:
            for i, probe in enumerate(spec.tasks[: spec.probe_size]):
                await episodes.run(agent, probe, position, probe_index=i)
    return RunOutcome(run_id=spec.run_id, episodes=len(spec.tasks), stopped_by=None, spent=llm.ledger.spent,
                      graded=llm.grading.spent)


@dataclass(eq=False)
class EpisodeRunner:
    """Runs one episode of an agent run and writes everything it produced."""

    spec: AgentRunSpec
    env: Environment
    llm: AgentModelClient
    sink: RecordSink
    recorder: Recorder
    judge: Judge | None = None
    reward_source: str = "truth"
    finished: set[str] = field(default_factory=set)
    """Episodes a resumed run finished before: replayed, not written again."""
    stopped_by: str | None = field(default=None, init=False)
    """Set when the gateway refused a call because the run's budget was spent."""

    def not_attempted(self, agent: Agent, tasks: list[Task], first_position: int, reason: str) -> None:
        """Rows for the tasks the run will not start, so the table says which and why."""
        rows = []
        for position, task in enumerate(tasks, start=first_position):
            this_episode = episode_id(self.spec.run_id, position)
            if this_episode in self.finished:
                continue
            episode = _episode_record(self.spec, agent, task, this_episode, position, False, [], [],
                                      f"not attempted: {reason}", utc_now(), 0.0)
            rows.append(episode.model_copy(update={"attempted": False}).model_dump())
        self.sink.append(Episode.table, rows)

    async def snapshot(self, agent: Agent, position: int, final: bool) -> list[dict[str, Any]]:
        """Save the agent's learnt state after the stream episode at `position` (not again for an
        episode a resumed run only replays: its snapshot is on disk already)."""
        this_episode = episode_id(self.spec.run_id, position)
        if this_episode in self.finished:
            return []
        row = await save_snapshot(agent, Path(self.spec.workdir), self.spec.run_id, this_episode,
                                  position + 1, final)
        if final and position < len(self.spec.tasks) - 1:  # the run stopped early: written on its own
            self.sink.append(SnapshotRow.table, [row])
            return []
        return [row]

    async def run(self, agent: Agent, task: Task, position: int, prepare: bool = False,
                  probe_index: int | None = None, snapshot: bool = False) -> None:
        spec, llm = self.spec, self.llm
        probe = probe_index is not None
        this_episode = episode_id(spec.run_id, position, probe_index)
        sink = NULL_SINK if this_episode in self.finished else self.sink  # a resumed run replays these
        llm.start_episode(this_episode, task.task_id)
        self.recorder.start_episode(spec.run_id, this_episode, task.task_id, position)
        started_at, clock = utc_now(), time.perf_counter()
        trial = EnvTrial(task, self)
        results: list[AttemptResult] = []
        error: str | None = None
        try:
            if prepare:
                tuning = spec.tuning_tasks or spec.tasks
                await agent.prepare(EnvTuningSet(tuning, bool(spec.tuning_tasks), self.env, llm))
            agent.stream_position = position
            results = await agent.run_task(trial)
            if not probe and not spec.frozen:  # probes measure what the agent kept; they must not teach it
                answer = task.answer if spec.feedback == "answer" else None
                await agent.learn(Feedback(task=trial.task, attempts=results, answer=answer))
        except ModelUnavailable:
            raise  # no task can succeed: the run stops, and a resume runs this episode again
        except ModelCallError as failure:
            error = one_line(str(failure))
            if (failure.record.error or "").startswith(BUDGET_EXHAUSTED):
                self.stopped_by = failure.record.error
        except (GatewayUnavailable, DiskFull):
            raise  # not this episode's failure: the run stops, and a resume runs the episode again
        except Exception as failure:  # an agent or env bug must not end the other tasks of the run
            if is_disk_full(failure):  # e.g. its memory: no later episode could be recorded either
                raise disk_full(spec.workdir, failure) from None
            error = one_line(failure)
        finally:
            trial.close()
        await llm.settle()  # calls still in flight (siblings of a failed one) are billed: keep them
        saved: list[dict[str, Any]] = []
        if snapshot:
            try:  # with the episode's rows, so that the episode on disk means its snapshot is too
                saved = await self.snapshot(agent, position, final=position == len(spec.tasks) - 1)
            except Exception as failure:
                if is_disk_full(failure):
                    raise disk_full(spec.workdir, failure) from None
                error = error or f"saving the snapshot failed: {one_line(failure)}"
        calls = llm.take_records()
        transcripts = llm.take_transcripts()
        made = self.recorder.take()
        episode = _episode_record(spec, agent, task, this_episode, position, probe, results, calls, error,
                                  started_at, time.perf_counter() - clock, made.get(TrainingRow.table, []))
        _write(sink, episode, calls, transcripts, results, made, saved)


def _write(sink: RecordSink, episode: Episode, calls: list[LLMCall], transcripts: list[TranscriptRow],
           results: list[AttemptResult], made: dict[str, list[Record]], saved: list[dict[str, Any]]) -> None:
    """Everything one episode produced, the episode's own row last (its presence says the rest is there)."""
    where = {"run_id": episode.run_id, "episode_id": episode.episode_id, "task_id": episode.task_id,
             "stream_position": episode.stream_position}
    sink.append(LLMCall.table, [call.model_dump() for call in calls])
    sink.append(TranscriptRow.table, [transcript.model_dump() for transcript in transcripts])
    sink.append(AttemptRow.table, [
        AttemptRow(**where, attempt=r.number, response=r.response, raw_response=r.raw_response,
                   success=r.success, score=r.score, judge_score=r.judge_score, reward=r.reward,
                   steps=r.steps, reflection=r.reflection, score_reason=r.score_reason).model_dump()
        for r in results])
    for table, rows in made.items():
        sink.append(table, [row.model_dump() for row in rows])
    sink.append(SnapshotRow.table, saved)
    sink.append(Episode.table, [episode.model_dump()])


def _episode_record(spec: AgentRunSpec, agent: Agent, task: Task, episode_id: str, position: int,
                    probe: bool, results: list[AttemptResult], calls: list[LLMCall], error: str | None,
                    started_at: dt.datetime, latency_s: float, updates: Sequence[Record] = ()) -> Episode:
    final = results[-1] if results else None
    graded = _sum_usage([c for c in calls if c.purpose in BENCHMARK_PURPOSES])
    calls = [c for c in calls if c.purpose not in BENCHMARK_PURPOSES]  # the agent's: the columns below
    usage = _sum_usage(calls)
    trained = [row for row in updates if isinstance(row, TrainingRow)]
    act = _sum_usage([c for c in calls if c.purpose == "act"])
    overhead = _sum_usage([c for c in calls if c.purpose != "act"])
    return Episode(
        episode_id=episode_id, run_id=spec.run_id, variant=spec.variant, seed=spec.seed, env=spec.env,
        family=task.family, scenario=spec.scenario, order_seed=spec.order_seed, repeat=spec.repeat,
        stream_position=position,
        probe=probe, attempted=True, task_id=task.task_id,
        question=task.question, reference=task.answer, task_metadata=_metadata_json(task),
        response=final.response if final else None, success=final.success if final else False,
        score=final.score if final else 0.0, judge_score=final.judge_score if final else None,
        reward=final.reward if final else 0.0, attempts=len(results), model=spec.model,
        n_calls=len(calls), prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens, cost_usd=usage.cost_usd, cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens, reasoning_tokens=usage.reasoning_tokens,
        act_tokens=act.total_tokens,
        act_cost_usd=act.cost_usd, overhead_tokens=overhead.total_tokens,
        overhead_cost_usd=overhead.cost_usd, flops=usage.flops,
        grade_tokens=graded.total_tokens, grade_cost_usd=graded.cost_usd,
        train_tokens=sum(row.tokens_trained for row in trained),
        train_cost_usd=sum(row.cost_usd for row in trained),
        train_flops=add_costs(*(row.flops for row in trained)),
        memory_size=agent.memory_size(), protocol=agent.protocol,
        view=spec.view, snapshot_of=spec.snapshot_of, snapshot_position=spec.snapshot_position,
        latency_s=latency_s, error=one_line(error) if error else None,
        started_at=started_at, finished_at=utc_now())


def _metadata_json(task: Task) -> str | None:
    """The task's metadata for `episodes.task_metadata`: JSON, its text made safe (a dataset's cells
    are text from outside)."""
    if not task.metadata:
        return None
    return safe_text(json.dumps(task.metadata, sort_keys=True, ensure_ascii=False, default=str))


def _sum_usage(calls: list[LLMCall]) -> Usage:
    return functools.reduce(lambda total, call: total + call.usage, calls, Usage())

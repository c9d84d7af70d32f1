"""The agent-run loop: one agent works through its stream, one episode at a time.

Pure scheduling and accounting: reset, let the agent solve, score, record, let the agent learn.
Agent logic stays in `agents/`, task logic in `envs/`. Every episode's token and cost columns are
the sum of the call records written beside it, so the two tables cannot disagree.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from typing import Any, Protocol

from pydantic import BaseModel

from agents.base import Agent, Attempt, Feedback
from envs.base import Environment
from harness.model_client import AgentModelClient, GatewayLink, ModelCallError
from harness.plan import AgentRunSpec, instantiate_component
from harness.records import Episode, LLMCall, Usage


class RecordSink(Protocol):
    def append(self, table: str, rows: list[dict[str, Any]]) -> None: ...


class RunOutcome(BaseModel):
    run_id: str
    episodes: int
    stopped_by: str | None
    """Why the run stopped before the end of its stream (e.g. the budget); None if it finished."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def build_agent(spec: AgentRunSpec, llm: AgentModelClient) -> Agent:
    agent: Agent = instantiate_component(spec.variant_cfg, "variant", Agent, llm=llm)
    return agent


def budget_exhausted(spec: AgentRunSpec, spent: Usage) -> str | None:
    budget = spec.budget
    if budget.max_tokens is not None and spent.total_tokens >= budget.max_tokens:
        return f"token budget spent ({spent.total_tokens} >= {budget.max_tokens})"
    cost = spent.cost_usd
    if budget.max_cost_usd is not None and cost is not None and cost >= budget.max_cost_usd:
        return f"dollar budget spent ({cost:.4f} >= {budget.max_cost_usd})"
    return None


async def run_agent(spec: AgentRunSpec, env: Environment, gateway: GatewayLink,
                    sink: RecordSink) -> RunOutcome:
    llm = AgentModelClient(gateway, model=spec.model, run_id=spec.run_id, default_params=spec.model_params)
    agent = build_agent(spec, llm)
    spent = Usage()
    for position, task in enumerate(spec.tasks):
        stop = budget_exhausted(spec, spent)
        if stop is not None:
            return RunOutcome(run_id=spec.run_id, episodes=position, stopped_by=stop)
        llm.start_episode(task.task_id)
        started_at, clock = _now(), time.perf_counter()
        episode = env.reset(task)
        error: str | None = None
        attempt = Attempt(final_output=None, steps=0)
        try:
            attempt = await agent.solve(episode)
        except ModelCallError as failure:
            error = str(failure)
        except Exception as failure:  # an agent or env bug must not end the other tasks of the run
            error = f"{type(failure).__name__}: {failure}"
        score = episode.score()
        calls = llm.take_records()
        usage = _sum_usage(calls)
        spent = spent + usage
        record = Episode(
            run_id=spec.run_id, variant=spec.variant, seed=spec.seed, env=spec.env, family=task.family,
            scenario=spec.scenario, stream_position=position, task_id=task.task_id,
            question=task.question, reference=task.answer, response=score.response,
            success=score.success, score=score.score, model=spec.model, n_calls=len(calls),
            prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens, cost_usd=usage.cost_usd,
            latency_s=time.perf_counter() - clock, error=" ".join(error.split()) if error else None,
            started_at=started_at, finished_at=_now())
        sink.append(LLMCall.table, [call.model_dump() for call in calls])
        sink.append(Episode.table, [record.model_dump()])
        if error is None:
            await agent.learn(Feedback(task=task, attempt=attempt, score=score))
    return RunOutcome(run_id=spec.run_id, episodes=len(spec.tasks), stopped_by=None)


def _sum_usage(calls: list[LLMCall]) -> Usage:
    return functools.reduce(
        lambda total, c: total + Usage(prompt_tokens=c.prompt_tokens, completion_tokens=c.completion_tokens,
                                       cost_usd=c.cost_usd, latency_s=c.latency_s),
        calls, Usage())

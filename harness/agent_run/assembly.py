"""Building an agent run's agent with the harness pieces composed around it.

A variant's yaml holds the agent's own options and a few the harness applies from outside the
agent (like inspect_ai's scorers and approvers around a solver): how attempts are rewarded
(`reward_source`, `judge`), and what checks the agent's self-edits (`safety`, and the sealed `gate`
with `probe_size`, `regression_budget`, `accept_ties`). This module splits them, builds the agent
by its `_target_` with only its own options, and wires the judge, the safety check and the gate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from envs.base import EnvEpisode, Environment
from harness.agent_api import (
    Agent,
    AgentContext,
    Guard,
    Judge,
    ModelClient,
    ModelEndpoint,
    Recorder,
    Trainer,
)
from harness.agent_run.checks import EpisodeChecks
from harness.agent_run.components import instantiate_component
from harness.agent_run.gate import SealedGate
from harness.agent_run.reference_free_judge import ReferenceFreeJudge
from harness.agent_run.safety_check import SafetyChecker
from harness.agent_run.spec import AgentRunSpec
from harness.config import ConfigError


class HarnessOptions(BaseModel):
    """The variant options the harness applies around the agent, declared here once: every other
    option is the agent's own. Their defaults are conf/variant/parts/base.yaml's values (a test
    holds them equal)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reward_source: Literal["truth", "judge"] = "truth"
    judge: dict[str, Any] | None = None
    gate: Literal["none", "sealed"] = "none"
    probe_size: int = 10
    regression_budget: int = 0
    accept_ties: bool = True
    safety: dict[str, Any] | None = None


HARNESS_OPTIONS = tuple(HarnessOptions.model_fields)
"""The names of the harness's variant options (HarnessOptions' fields)."""


def split_options(variant_cfg: dict[str, Any]) -> tuple[dict[str, Any], HarnessOptions]:
    """The agent's own options (with `_target_`) and the harness's, checked with one-line errors."""
    own = {k: v for k, v in variant_cfg.items() if k not in HARNESS_OPTIONS}
    given = {k: v for k, v in variant_cfg.items() if k in HARNESS_OPTIONS}
    if given.get("reward_source", "truth") not in ("truth", "judge"):
        _refuse(f"variant.reward_source must be truth or judge, got {given['reward_source']!r}")
    if given.get("reward_source") == "judge" and given.get("judge") is None:
        _refuse("variant.reward_source=judge needs a variant.judge section")
    if given.get("gate", "none") not in ("none", "sealed"):
        _refuse(f"variant.gate must be none or sealed, got {given['gate']!r}")
    if given.get("probe_size", 1) < 1 or given.get("regression_budget", 0) < 0:
        _refuse("variant.probe_size must be >= 1 and variant.regression_budget >= 0")
    return own, HarnessOptions(**given)


def _refuse(message: str) -> None:
    raise ConfigError(f"invalid config: variant: ValueError: {message}")


def _configured(factory: type, llm: ModelClient, options: dict[str, Any], **extra: Any) -> Any:
    try:
        return factory(llm, **options, **extra)
    except (TypeError, ValueError) as error:
        message = " ".join(f"{type(error).__name__}: {error}".split())
        raise ConfigError(f"invalid config: variant: {message}") from None


def build_judge(options: HarnessOptions, llm: ModelClient) -> ReferenceFreeJudge | None:
    """The run's judge (`variant.judge`): it scores every attempt, and best-of-k may pick with it."""
    return _configured(ReferenceFreeJudge, llm, options.judge) if options.judge is not None else None


def build_agent(spec: AgentRunSpec, llm: ModelClient, recorder: Recorder | None = None,
                env: Environment | None = None, judge: Judge | None = None,
                endpoint: Callable[[], Awaitable[ModelEndpoint]] | None = None,
                trainer: Trainer | None = None) -> Agent:
    """The run's agent with its judge (the run's, else one of its own) and the guard on its
    self-edits: the safety check and, with `variant.gate=sealed` and an env to probe, the sealed
    gate on the run's tuning split."""
    own, options = split_options(spec.variant_cfg)
    recorder = recorder or Recorder()
    judge = judge or build_judge(options, llm)
    safety = (_configured(SafetyChecker, llm, options.safety, recorder=recorder)
              if options.safety is not None else None)
    guard = Guard(safety=safety)
    context = AgentContext(llm=llm, seed=spec.seed, repeat=spec.repeat, run_id=spec.run_id,
                           workdir=Path(spec.workdir),
                           guard=guard, recorder=recorder, judge=judge, endpoint=endpoint, trainer=trainer)
    agent: Agent = instantiate_component(own, "variant", Agent, context=context)
    if options.gate == "sealed" and not agent.gated_edits():
        _refuse(f"variant.gate=sealed: {type(agent).__name__} makes no self-edit the gate can audit (of the "
                "native agents' lessons, those of variant.memory with mode lessons)")
    if options.gate == "sealed" and env is not None and not spec.frozen:
        async def probe(episode: EnvEpisode, messages: list[dict[str, Any]]) -> Any:
            # The probes act through the agent's own loop, billed as validate, recorded as no step.
            attempt = await agent.act(episode, messages, purpose="validate", record=False)
            await episode.settle(EpisodeChecks(llm))  # a probe is scored as a stream task is
            return attempt

        guard.gate = SealedGate(spec.tuning_tasks, env, probe, recorder, size=options.probe_size,
                                regression_budget=options.regression_budget, accept_ties=options.accept_ties,
                                seed=spec.seed)
    return agent

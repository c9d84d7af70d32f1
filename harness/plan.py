"""From validated settings to the list of agent runs one job executes."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from pydantic import BaseModel, ConfigDict

from envs.base import Environment, Task
from harness.config import BudgetSettings, ConfigError, HarnessConfig


class AgentRunSpec(BaseModel):
    """One agent run: a variant, with its own seed, working through one task stream."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    variant: str
    variant_cfg: dict[str, Any]
    seed: int
    env: str
    env_cfg: dict[str, Any]
    scenario: str
    tasks: list[Task]
    tuning_tasks: list[Task]
    """Held-out tasks for variants that tune (OPRO), disjoint from every stream; may be empty."""
    model: str
    model_params: dict[str, Any]
    embedder: str
    budget: BudgetSettings
    workdir: str
    """Directory for the agent's own files (its memory table)."""


def instantiate_component(cfg: dict[str, Any], field: str, expected: type, **kwargs: Any) -> Any:
    """`hydra.utils.instantiate`, with a bad target or option reported as a one-line ConfigError."""
    try:
        component = instantiate(cfg, _convert_="all", **kwargs)
    except InstantiationException as error:
        cause = error.__cause__ or error
        message = " ".join(f"{type(cause).__name__}: {cause}".split())
        raise ConfigError(f"invalid config: {field}: {message}") from None
    if not isinstance(component, expected):
        raise ConfigError(f"invalid config: {field}._target_: {cfg['_target_']} is not a {expected.__name__}")
    return component


def build_environment(env_cfg: dict[str, Any]) -> Environment:
    return instantiate_component(env_cfg, "env", Environment)


def split_tuning(pool: list[Task], size: int) -> tuple[list[Task], list[Task]]:
    """Hold out about `size` tasks for tuning. The split hashes the question text only, so every seed
    and variant of a sweep draws from the same evaluation pool, and repeated questions stay together."""
    if size == 0:
        return [], pool
    if size >= len(pool):
        raise ConfigError(f"invalid config: stream.tuning_size: {size} leaves none of the {len(pool)} "
                          "tasks for evaluation")
    by_hash = sorted({t.question for t in pool}, key=lambda q: hashlib.sha256(q.encode()).hexdigest())
    held = set(by_hash[:size])
    tuning = [t for t in pool if t.question in held]
    evaluation = [t for t in pool if t.question not in held]
    check_disjoint(tuning, evaluation)
    return tuning, evaluation


def check_disjoint(tuning: list[Task], evaluation: list[Task]) -> None:
    """Refuse a tuning split that shares a task id or an exact question with the evaluation pool."""
    shared = ({t.task_id for t in tuning} & {t.task_id for t in evaluation}
              or {t.question for t in tuning} & {t.question for t in evaluation})
    if shared:
        example = sorted(shared)[0]
        raise ConfigError(f"invalid config: stream.tuning_size: the tuning split overlaps the evaluation "
                          f"pool ({len(shared)} shared, e.g. {example[:80]!r})")


def build_plan(settings: HarnessConfig, run_dir: Path) -> list[AgentRunSpec]:
    env_cfg = settings.env.instantiable()
    pool = build_environment(env_cfg).tasks()
    tuning, pool = split_tuning(pool, settings.stream.tuning_size)
    wanted = settings.stream.num_tasks
    if wanted > len(pool):
        held = f" after the {len(tuning)} held out for tuning" if tuning else ""
        raise ConfigError(f"invalid config: stream.num_tasks: {wanted} exceeds the {len(pool)} tasks "
                          f"env {settings.env.name!r} has{held}")
    specs = []
    for seed in settings.seeds:
        tasks = random.Random(seed).sample(pool, wanted)
        identity = {"variant": settings.variant.model_dump(by_alias=True),
                    "env": settings.env.model_dump(by_alias=True), "stream": settings.stream.model_dump(),
                    "model": settings.model.name, "params": settings.model.params,
                    "embedder": settings.embedder.name, "budget": settings.budget.model_dump(), "seed": seed}
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]
        specs.append(AgentRunSpec(
            run_id=f"{settings.variant.name}-{settings.env.name}-s{seed}-{digest}",
            variant=settings.variant.name, variant_cfg=settings.variant.instantiable(), seed=seed,
            env=settings.env.name, env_cfg=env_cfg, scenario=settings.stream.scenario, tasks=tasks,
            tuning_tasks=tuning,
            model=settings.model.name, model_params=settings.model.params,
            embedder=settings.embedder.name, budget=settings.budget, workdir=str(run_dir)))
    return specs

"""Step 1 of the plan: the env's tasks, and the settings that depend on them.

The env's family option is filled for the scenario when left null, the env is built and its tasks made
safe, the tuning split held out of the evaluation pool, the stream's length and the split's size filled
where null, and the stream's settings checked against the pool they draw from. What is planned here is
read before a run's identity is hashed: the filled settings are part of it."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

from hydra.utils import get_class

from envs.base import Environment, Task
from harness.agent_run.components import build_environment
from harness.config import Component, ConfigError, HarnessConfig
from harness.text import safe_text

DEFAULT_NUM_TASKS = 50
"""Stream length when `stream.num_tasks` is null (smaller pools are run whole)."""
DEFAULT_TUNING_SIZE = 20
"""Held-out tuning tasks when `stream.tuning_size` is null (at most a fifth of the pool)."""


class TaskPool(NamedTuple):
    """An env's tasks as planned, and the env that made them."""

    tuning: list[Task]
    """The tuning split (the env's own, or held out of its tasks)."""
    evaluation: list[Task]
    """The pool every stream samples from."""
    env: Environment
    ordered: bool = False
    """The env's pool is ordered (`env_keeps_order`): its streams keep that order."""


def plan_tasks(settings: HarnessConfig) -> tuple[HarnessConfig, TaskPool]:
    """The settings with every null that depends on the env filled (its families, the tuning split's
    size, the stream's length), with the tasks they give; settings the pool cannot serve are refused."""
    settings, tasks = resolve_defaults(settings)
    check_stream(settings, tasks)
    return settings, tasks


def resolve_defaults(settings: HarnessConfig) -> tuple[HarnessConfig, TaskPool]:
    """`plan_tasks` without its checks: the filled settings and their tasks, as `harness.evaluate`
    reads them for runs planned already."""
    stream = settings.stream
    env = env_families(settings.env, stream.scenario)
    tasks = task_pool(env.instantiable(), stream.tuning_size)._replace(ordered=env_keeps_order(env))
    pool = tasks.evaluation
    num_tasks = stream.num_tasks if stream.num_tasks is not None else min(DEFAULT_NUM_TASKS, len(pool))
    tuning_size = stream.tuning_size if stream.tuning_size is not None else len(
        {t.question for t in tasks.tuning})
    resolved = stream.model_copy(update={"num_tasks": num_tasks, "tuning_size": tuning_size})
    return settings.model_copy(update={"env": env, "stream": resolved}), tasks


def env_families(env: Component, scenario: str) -> Component:
    """`env` with its family option filled when left null: the env's defaults for this scenario."""
    try:
        env_class = get_class(env.target)
    except Exception:  # instantiating it says what is wrong, in one line
        return env
    option = getattr(env_class, "family_option", None)
    if option is None or env.kwargs().get(option) is not None:
        return env
    families = env_class.interleaved_families if scenario == "interleaved" else env_class.default_families
    return Component.model_validate({"name": env.name, "_target_": env.target, **env.kwargs(),
                                     option: list(families)})


def env_keeps_order(env: Component) -> bool:
    """Whether the env's pool is ordered (its `order_option` set, e.g. env=dataset's `order_by`):
    its streams keep that order instead of a seeded shuffle."""
    try:
        option = get_class(env.target).order_option
    except Exception:  # not an Environment: instantiating it says what is wrong, in one line
        return False
    return option is not None and env.kwargs().get(option) not in (None, "")


def task_pool(env_cfg: dict[str, Any], tuning_size: int | None) -> TaskPool:
    """The env's tuning split and the evaluation pool every stream samples from."""
    env = build_environment(env_cfg)
    pool = [safe_task(t) for t in env.tasks()]
    tuning = [safe_task(t) for t in env.tuning_tasks()]
    if tuning:
        check_disjoint(tuning, pool)
        return TaskPool(tuning, pool, env)
    return TaskPool(*split_tuning(pool, tuning_size), env)


def safe_task(task: Task) -> Task:
    """The task with its text made safe (harness.text): a task file is text from outside, and its
    question reaches transcripts, tables and the terminal."""
    text = (task.task_id, task.family, task.question, task.answer, *task.aliases)
    if all(safe_text(value) is value for value in text):
        return task
    return task.model_copy(update={"task_id": safe_text(task.task_id), "family": safe_text(task.family),
                                   "question": safe_text(task.question), "answer": safe_text(task.answer),
                                   "aliases": tuple(safe_text(a) for a in task.aliases)})


def split_tuning(pool: list[Task], size: int | None) -> tuple[list[Task], list[Task]]:
    """Hold out about `size` tasks for tuning (None: a fifth of the pool, at most DEFAULT_TUNING_SIZE).
    The split hashes the question text only, so every seed and variant of a sweep draws from the same
    evaluation pool, and repeated questions stay together."""
    if size is None:
        size = min(DEFAULT_TUNING_SIZE, len({t.question for t in pool}) // 5)
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
        raise ConfigError(f"invalid config: tuning split: it overlaps the evaluation pool "
                          f"({len(shared)} shared, e.g. {example[:80]!r})")


def check_stream(settings: HarnessConfig, tasks: TaskPool) -> None:
    """Refuse stream settings the pool cannot serve: more tasks than it holds, an interleaved stream of
    one family, a sealed gate without tuning tasks to audit on, or probes larger than the stream."""
    tuning, pool, stream = tasks.tuning, tasks.evaluation, settings.stream
    wanted = stream.num_tasks
    assert wanted is not None
    if wanted > len(pool):
        held = f" after the {len(tuning)} held out for tuning" if tuning else ""
        raise ConfigError(f"invalid config: stream.num_tasks: {wanted} exceeds the {len(pool)} tasks "
                          f"env {settings.env.name!r} has{held}")
    families = sorted({t.family for t in pool})
    if stream.scenario == "interleaved" and len(families) < 2:
        raise ConfigError(f"invalid config: stream.scenario: interleaved needs several task families; env "
                          f"{settings.env.name!r} has one here ({families[0]})")
    if settings.variant.kwargs().get("gate", "none") != "none" and not tuning:
        raise ConfigError("invalid config: variant.gate: the sealed gate audits edits on held-out probe "
                          "tasks and there are none; set stream.tuning_size > 0 (or use an env with a "
                          "tuning split)")
    if stream.probe_every and stream.probe_size > wanted:
        raise ConfigError(f"invalid config: stream.probe_size: {stream.probe_size} exceeds the stream's "
                          f"{wanted} tasks")

"""An env's tasks as a job plans them: the tuning split held out of the evaluation pool, every null
that depends on the env filled, each task's text made safe."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

from envs.base import Environment, Task
from harness.agent_run.components import build_environment, env_families
from harness.config import ConfigError, HarnessConfig
from harness.text import safe_text

DEFAULT_NUM_TASKS = 50
"""Stream length when `stream.num_tasks` is null (smaller pools are run whole)."""
DEFAULT_TUNING_SIZE = 20
"""Held-out tuning tasks when `stream.tuning_size` is null (at most a fifth of the pool)."""


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


class TaskPool(NamedTuple):
    """An env's tasks as planned, and the env that made them."""

    tuning: list[Task]
    """The tuning split (the env's own, or held out of its tasks)."""
    evaluation: list[Task]
    """The pool every stream samples from."""
    env: Environment

    def for_seed(self, tasks: list[Task], seed: int) -> list[Task]:
        """These tasks as the agent run with this seed is shown them (`Environment.task_for_seed`); a
        task the env shows differently is made safe again, one it shows as it is was made safe already."""
        shown = [(task, self.env.task_for_seed(task, seed)) for task in tasks]
        return [seen if seen is task else safe_task(seen) for task, seen in shown]


def resolve_defaults(settings: HarnessConfig) -> tuple[HarnessConfig, TaskPool]:
    """The settings with every null that depends on the env filled (its families, the tuning split's
    size, the stream's length), with the tasks they give."""
    stream = settings.stream
    env = env_families(settings.env, stream.scenario)
    tasks = task_pool(env.instantiable(), stream.tuning_size)
    pool = tasks.evaluation
    num_tasks = stream.num_tasks if stream.num_tasks is not None else min(DEFAULT_NUM_TASKS, len(pool))
    tuning_size = stream.tuning_size if stream.tuning_size is not None else len(
        {t.question for t in tasks.tuning})
    resolved = stream.model_copy(update={"num_tasks": num_tasks, "tuning_size": tuning_size})
    return settings.model_copy(update={"env": env, "stream": resolved}), tasks


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

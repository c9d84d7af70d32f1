"""From validated settings to the list of agent runs one job executes."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any, NamedTuple

from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from pydantic import BaseModel, ConfigDict

from envs.base import Environment, Task
from harness.agent_run.snapshots import find_snapshot
from harness.agent_run.streams import order_tasks, sample_tasks
from harness.config import (
    BudgetSettings,
    CacheSettings,
    Component,
    ConfigError,
    EndpointSettings,
    HarnessConfig,
    endpoint_key,
)
from harness.text import safe_text


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
    order_seed: int
    tasks: list[Task]
    """The stream, in order."""
    probe_every: int
    """Every this many tasks, replay the first `probe_size` tasks of the stream (0: never)."""
    probe_size: int
    tuning_tasks: list[Task]
    """Held-out tasks for variants that tune (OPRO), disjoint from every stream; may be empty."""
    model: str
    model_endpoint: str
    """The model with its settings (harness.config.endpoint_key), as the gateway knows it."""
    model_params: dict[str, Any]
    """Sent with every call: what the config asks for until the model check (harness.driver.preflight)
    says what the model takes."""
    refused_params: tuple[str, ...] = ()
    """Parameters the model refuses, never sent, also when an agent sets one per call."""
    mark_cache: bool = False
    """The system message carries the provider's cache marker (model.prompt_caching)."""
    function_calling: bool | None = False
    """The model takes tools natively; else they go through the JSON-in-text protocol. Null: as
    litellm's model map says, read on the worker (the driver need not import litellm: seconds)."""
    embedder: str
    embedder_endpoint: str
    embeds: bool = True
    """The variant's agent embeds (harness.agent_api.Agent.uses_embedder); else the run has no
    embedder, and the pool serves none for it."""
    budget: BudgetSettings
    cache: CacheSettings
    """The job's response-cache settings (each call carries its run's own to the gateway)."""
    workdir: str
    """Directory for the agent's own files (its memory table)."""
    snapshot_every: int = 0
    """Save the learnt state every this many stream tasks (0: only at the end of the stream)."""
    start_from: str | None = None
    """Directory of the snapshot the agent starts from (variant.start_from, or an evaluation)."""
    snapshot_of: str | None = None
    """The run that snapshot belongs to."""
    snapshot_position: int | None = None
    """Tasks that run had learnt from at the snapshot."""
    frozen: bool = False
    """Learn nothing (no tuning, no learning after tasks): a snapshot evaluation."""
    view: str | None = None
    """For an evaluation: id, ood or replay (see harness.tables.records.Episode.view)."""
    transcripts: bool = True
    """Keep each call's messages and raw reply (the transcripts table)."""
    secret_env: list[str] = []
    """Environment variables to blank out of transcripts besides those named like keys."""
    settings: dict[str, Any] = {}
    """Every behaviour-relevant setting, flattened (see `behaviour_settings`); the run id hashes it."""
    repeat: int = 0
    """Which repeat of its agent run this is (stream.repeats): 0 for the first; the same tasks in the
    same order, its own sampling seed and response-cache scope."""
    finished: list[str] = []
    """Episode ids already written by an earlier, interrupted run of this job (resume replays them
    without writing them again)."""


BEHAVIOUR_GROUPS = ("variant", "env", "stream", "model", "embedder", "budget")
"""Config groups whose values can change what a run does or spends. Left out: where outputs go, how
Ray is used, progress bars, and the cache's location (answers are the same with or without it); the
cache's billing policy is in, since it changes what a budget buys."""


OUTPUT_ONLY = ("stream.snapshot_every", "stream.repeats")
"""Settings of a behaviour group that only decide what is saved, or how many times a run is made
(each repeat has its own identity): not part of a run's identity."""

PACING = ("max_concurrency", "requests_per_minute")
"""Endpoint settings that pace calls without changing any answer: not part of a run's identity."""


def behaviour_settings(settings: HarnessConfig) -> dict[str, Any]:
    """The settings that shape a run's behaviour, as one flat mapping of dotted keys."""
    dumped = settings.model_dump(by_alias=True, mode="json")
    flat: dict[str, Any] = {}
    for group in BEHAVIOUR_GROUPS:
        flat.update(_flatten(dumped[group], group))
    flat["cache.charge"] = settings.cache.charge
    pacing = {key for key in flat if key.startswith(("model.", "embedder.")) and key.endswith(PACING)}
    return {key: value for key, value in flat.items() if key not in pacing and key not in OUTPUT_ONLY}


def _flatten(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in _flatten(item, f"{prefix}.{key}").items()}
    return {prefix: value}


def probe_points(spec: AgentRunSpec) -> set[int]:
    """Stream positions after which the probe set is replayed."""
    if not spec.probe_every:
        return set()
    return {p for p in range(len(spec.tasks)) if (p + 1) % spec.probe_every == 0}


def episode_id(run_id: str, position: int, probe_index: int | None = None) -> str:
    return f"{run_id}/{position}" + (f"/probe{probe_index}" if probe_index is not None else "")


def episode_ids(spec: AgentRunSpec) -> list[str]:
    """Every episode id the run writes when it goes to the end of its stream."""
    ids = []
    for position in range(len(spec.tasks)):
        ids.append(episode_id(spec.run_id, position))
        if position in probe_points(spec):
            ids += [episode_id(spec.run_id, position, i) for i in range(spec.probe_size)]
    return ids


def expected_episodes(spec: AgentRunSpec) -> int:
    return len(episode_ids(spec))


def instantiate_component(cfg: dict[str, Any], field: str, expected: type, **kwargs: Any) -> Any:
    """`hydra.utils.instantiate`, with a bad target or option reported as a one-line ConfigError.
    `kwargs` are runtime objects passed to the constructor as they are (Hydra would turn a
    dataclass into a config)."""
    try:
        component = instantiate(cfg, _convert_="all", _partial_=True)(**kwargs)
    except InstantiationException as error:
        cause = error.__cause__ or error
        message = " ".join(f"{type(cause).__name__}: {cause}".split())
        raise ConfigError(f"invalid config: {field}: {message}") from None
    except (TypeError, ValueError) as error:  # the constructor refused an option
        message = " ".join(f"{type(error).__name__}: {error}".split())
        raise ConfigError(f"invalid config: {field}: {message}") from None
    if not isinstance(component, expected):
        raise ConfigError(f"invalid config: {field}._target_: {cfg['_target_']} is not a {expected.__name__}")
    return component


def uses_embedder(variant: Component) -> bool:
    """Whether the variant's agent calls the embedder (harness.agent_api.Agent.uses_embedder). A
    target that does not import says yes: building the agent reports it, in one line."""
    try:
        agent = get_class(variant.target)
    except Exception:
        return True
    declared = getattr(agent, "uses_embedder", None)
    return bool(declared(variant.kwargs())) if callable(declared) else True


def models_in_use(settings: HarnessConfig) -> list[EndpointSettings]:
    """The models a job's runs call: its model, and its embedder where its variant embeds."""
    return [settings.model, *([settings.embedder] if uses_embedder(settings.variant) else [])]


def build_environment(env_cfg: dict[str, Any]) -> Environment:
    return instantiate_component(env_cfg, "env", Environment)


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


def build_plan(settings: HarnessConfig, run_dir: Path) -> list[AgentRunSpec]:
    settings, tasks = resolve_defaults(settings)
    tuning, pool = tasks.tuning, tasks.evaluation
    stream = settings.stream
    env_cfg = settings.env.instantiable()
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
    specs = []
    behaviour = behaviour_settings(settings)
    variant_cfg = settings.variant.instantiable()
    start_from = variant_cfg.pop("start_from", None)
    ordered = env_keeps_order(settings.env)
    embeds = uses_embedder(settings.variant)
    for seed in settings.seeds:
        task_set = sample_tasks(pool, wanted, seed, ordered)
        for order_seed, repeat in itertools.product(stream.order_seeds or [seed], range(stream.repeats)):
            # A first repeat keeps the id a run without repeats has (and so its resume and snapshots).
            again = {"repeat": repeat} if repeat else {}
            identity = {**behaviour, "seed": seed, "order_seed": order_seed, **again}
            digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]
            source = find_snapshot(start_from, seed, order_seed) if start_from else None
            suffix = f"-r{repeat}" if repeat else ""
            specs.append(AgentRunSpec(
                run_id=f"{settings.variant.name}-{settings.env.name}-s{seed}-o{order_seed}{suffix}-{digest}",
                repeat=repeat,
                variant=settings.variant.name, variant_cfg=variant_cfg, seed=seed,
                env=settings.env.name, env_cfg=env_cfg, scenario=stream.scenario, order_seed=order_seed,
                tasks=tasks.for_seed(order_tasks(task_set, stream.scenario, order_seed, ordered), seed),
                probe_every=stream.probe_every, probe_size=stream.probe_size,
                tuning_tasks=tasks.for_seed(tuning, seed),
                model=settings.model.name,
                model_endpoint=endpoint_key(settings.model), model_params=settings.model.requested_params,
                function_calling=settings.model.function_calling,
                embedder=settings.embedder.name, embedder_endpoint=endpoint_key(settings.embedder),
                embeds=embeds, budget=settings.budget, cache=settings.cache, workdir=str(run_dir),
                settings=behaviour,
                transcripts=settings.output.transcripts, secret_env=settings.output.secret_env,
                snapshot_every=stream.snapshot_every,
                snapshot_of=source[0] if source else None, snapshot_position=source[1] if source else None,
                start_from=str(source[2]) if source else None))
    return specs

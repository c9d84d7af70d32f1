"""From validated settings to the list of agent runs one job executes (harness/agent_run/spec.py)."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

from harness.agent_run.components import env_keeps_order, learns_weights, uses_embedder
from harness.agent_run.snapshots import find_snapshot
from harness.agent_run.spec import AgentRunSpec
from harness.agent_run.streams import order_tasks, sample_tasks
from harness.agent_run.tasks import resolve_defaults
from harness.config import ConfigError, HarnessConfig, endpoint_key
from harness.training.learner import LearnerSpec

BEHAVIOUR_GROUPS = ("variant", "env", "stream", "model", "embedder", "budget")
"""Config groups whose values can change what a run does or spends. Left out: where outputs go, how
Ray is used, progress bars, and the cache's location (answers are the same with or without it); the
cache's billing policy is in, since it changes what a budget buys."""


OUTPUT_ONLY = ("stream.snapshot_every", "stream.repeats", "model.parameters", "embedder.parameters")
"""Settings of a behaviour group that only decide what is saved (the parameter count: the FLOPs
columns), or how many times a run is made (each repeat has its own identity): not part of a run's
identity."""

NEUTRAL_DEFAULTS: dict[str, Any] = {
    "stream.feedback": "outcome", "budget.max_flops": None, "model.weights": None,
    "model.price.train_per_token": 0.0, "model.local_server.price.train_per_token": 0.0,
    "embedder.price.train_per_token": 0.0}
"""Settings added after runs were already recorded (weight learning, schema 9), left out of a run's
identity at the value that behaves as before: a run directory written before them resumes, and a
run's id stays what it was unless one of them is changed."""

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
    neutral = {key for key, value in NEUTRAL_DEFAULTS.items() if key in flat and flat[key] == value}
    return {key: value for key, value in flat.items()
            if key not in pacing and key not in OUTPUT_ONLY and key not in neutral}


def _flatten(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in _flatten(item, f"{prefix}.{key}").items()}
    return {prefix: value}


def learner_spec(settings: HarnessConfig) -> LearnerSpec | None:
    """How a learner variant's weights are trained and served on this model; None for any other
    variant. A model whose weights the harness cannot load is refused in one line."""
    if not learns_weights(settings.variant):
        return None
    model = settings.model
    local = model.local_server if model.serves_locally else None
    price = local.price if local is not None else model.price
    train_price = price.train_per_token if price is not None else 0.0
    if model.is_scripted:
        return LearnerSpec(backend="scripted", base=model.name, train_price=train_price,
                           parameters=model.parameters)
    if local is None and not (model.api_base and model.weights):
        raise ConfigError(f"invalid config: variant={settings.variant.name} learns in the model's weights, "
                          f"and the harness cannot load the weights of {model.name}; learners run on "
                          "model=smollm2 (the local model), model=scripted (a scripted stand-in), or a "
                          "vLLM server's model.api_base with its model.weights (docs/weights.md)")
    from harness.models.model_server import ModelServerError, model_file
    from harness.training.needs import require

    require(f"variant={settings.variant.name}")
    if local is None:
        assert model.weights is not None
        if not Path(model.weights).expanduser().is_file():
            raise ConfigError(f"invalid config: model.weights: no GGUF file at {model.weights}")
        gguf = str(Path(model.weights).expanduser().resolve())
        return LearnerSpec(backend="transformers", base=gguf, gguf=gguf, train_price=train_price,
                           parameters=model.parameters)
    try:
        gguf = str(model_file(local))
    except ModelServerError as error:
        raise ConfigError(f"invalid config: model.local_server: {error}") from None
    return LearnerSpec(backend="transformers", base=f"{local.package}/{local.file}", gguf=gguf,
                       train_price=train_price, parameters=model.parameters)


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
    learner = learner_spec(settings)
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
                model_endpoint=endpoint_key(settings.model),
                embedder=settings.embedder.name, embedder_endpoint=endpoint_key(settings.embedder),
                embeds=embeds, budget=settings.budget, cache=settings.cache, workdir=str(run_dir),
                settings=behaviour,
                transcripts=settings.output.transcripts, secret_env=settings.output.secret_env,
                snapshot_every=stream.snapshot_every,
                snapshot_of=source[0] if source else None, snapshot_position=source[1] if source else None,
                start_from=str(source[2]) if source else None, feedback=stream.feedback, learner=learner))
    return specs

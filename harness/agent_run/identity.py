"""Step 2 of the plan: the job's agent runs, each with its id, and what the variant's agent needs.

A job runs every seed with every order seed (the seed itself unless `stream.order_seeds` lists
several), each `stream.repeats` times. A run's id names its variant, env, seed, order seed and repeat,
and hashes the settings that shape its behaviour (`behaviour_settings`): the same settings give the
same id, so a job started again finds its runs (resume) and another job's snapshots. The variant's
agent class says, without being built, whether it calls the embedder and whether it learns in the
model's weights (then `harness.training.learner.learner_spec` says how).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any, NamedTuple

from harness.config import Component, HarnessConfig
from harness.training.learner import LearnerSpec, learner_spec

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


class RunId(NamedTuple):
    """One agent run of the job: its id, and the seeds and repeat that tell it from the others."""

    run_id: str
    seed: int
    order_seed: int
    repeat: int


class AgentNeeds(NamedTuple):
    """What the variant's agent class says it needs, read without building it."""

    embedder: bool
    """It calls the embedder (harness.agent_api.Agent.uses_embedder)."""
    weights: bool
    """It trains the model's weights (harness.agent_api.Agent.learns_weights)."""


class RunPlan(NamedTuple):
    """The job's agent runs, and what they share."""

    runs: list[RunId]
    behaviour: dict[str, Any]
    """The settings each run's id hashes (`behaviour_settings`)."""
    variant_cfg: dict[str, Any]
    """The variant's options, as its agent is built with them (`start_from` taken out)."""
    start_from: str | None
    """`variant.start_from`: the snapshots the runs start from (harness.agent_run.snapshots)."""
    embeds: bool
    learner: LearnerSpec | None
    """How the model's weights are trained and served, for a variant that learns in them."""


def plan_runs(settings: HarnessConfig) -> RunPlan:
    """The job's runs, each with its id, for settings whose env-dependent nulls are filled (step 1:
    they are part of the id), and what the variant's agent needs of the harness."""
    behaviour = behaviour_settings(settings)
    stream = settings.stream
    runs = [RunId(run_id(settings, behaviour, seed, order_seed, repeat), seed, order_seed, repeat)
            for seed in settings.seeds
            for order_seed, repeat in itertools.product(stream.order_seeds or [seed], range(stream.repeats))]
    variant_cfg = settings.variant.instantiable()
    start_from = variant_cfg.pop("start_from", None)
    needs = agent_needs(settings.variant)
    learner = learner_spec(settings) if needs.weights else None
    return RunPlan(runs, behaviour, variant_cfg, start_from, needs.embedder, learner)


def run_id(settings: HarnessConfig, behaviour: dict[str, Any], seed: int, order_seed: int,
           repeat: int) -> str:
    """`<variant>-<env>-s<seed>-o<order seed>[-r<repeat>]-<hash of the behaviour settings and seeds>`.
    A first repeat keeps the id a run without repeats has (and so its resume and snapshots)."""
    again = {"repeat": repeat} if repeat else {}
    identity = {**behaviour, "seed": seed, "order_seed": order_seed, **again}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]
    suffix = f"-r{repeat}" if repeat else ""
    return f"{settings.variant.name}-{settings.env.name}-s{seed}-o{order_seed}{suffix}-{digest}"


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


def agent_needs(variant: Component) -> AgentNeeds:
    """What the variant's agent needs of the harness, as its class declares it. A target that does not
    import needs the embedder and no weights: building the agent reports it, in one line."""
    return AgentNeeds(embedder=variant.declares("uses_embedder", True),
                      weights=variant.declares("learns_weights", False))

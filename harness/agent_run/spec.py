"""One agent run as the driver plans it and a pool worker runs it (`AgentRunSpec`), the ids of the
episodes it writes, and how a job's model calls are sent once its model check has said
(`CheckedParams`: one for all the job's runs). A spec is planned once and never copied: what later
stages learn (the check's parameters, a resume's finished episodes) goes to the workers beside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from envs.base import Task
from harness.config import BudgetSettings, CacheSettings, ModelSettings
from harness.models.param_map import ParamMap
from harness.training.learner import LearnerSpec


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
    """The model with its settings (harness.config.endpoint_key), as the gateway knows it. How its
    calls are sent (parameters, tools) is the job's model check's: `CheckedParams`."""
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
    feedback: Literal["outcome", "answer"] = "outcome"
    """stream.feedback: with `answer`, an agent's Feedback reveals the task's reference answer."""
    learner: LearnerSpec | None = None
    """For an agent that learns in its weights: how they are trained and served; None otherwise."""


@dataclass(frozen=True)
class CheckedParams:
    """The chat model's completion parameters as they will be sent, after the job's model check
    (harness/driver/preflight.py); the same for every agent run of the job."""

    params: dict[str, Any]
    """Sent with every call (the manifest and the `runs` table record them)."""
    refused: tuple[str, ...] = ()
    """Parameters the model refuses: never sent, also when an agent sets one per call (a sampled
    retry's temperature on a reasoning model, which takes only its own)."""
    notes: tuple[str, ...] = ()
    """What was not sent and why, to say once."""
    mark_cache: bool = False
    """Mark the system message as the prompt's cacheable start (model.prompt_caching=auto, on a
    provider that caches only what is marked)."""
    function_calling: bool | None = None
    """Whether the model takes tools natively: the config's, else litellm's model map's (None: the
    worker asks the map)."""
    param_map: ParamMap | None = None
    """For a model on the lean path (an `openai/` model behind a server): what litellm sends of its
    parameters as given (harness/models/param_map.py), so that the worker need not import it."""

    @classmethod
    def as_asked(cls, model: ModelSettings) -> CheckedParams:
        """The parameters as the config asks for them, unchecked: where one agent run is run without
        a job (a test, a bench)."""
        return cls(model.requested_params, function_calling=model.function_calling)


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

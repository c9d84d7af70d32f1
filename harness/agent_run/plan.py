"""From validated settings to the list of agent runs one job executes (harness/agent_run/spec.py).

The plan is made in steps, one module each, in the order the settings flow through them:
1. `tasks`: the env's task pool (the env built, its tasks made safe, the tuning split held out) and
   the settings that depend on it filled (env families, the stream's length) and checked against it;
2. `identity`: the job's runs, each id hashing the filled settings, and what the variant's agent
   needs (the embedder; a learner for the model's weights);
3. `streams`: each run's stream: the tasks its seed draws, in its order seed's order, as shown to it;
4. `snapshots`: the snapshot a run starts from, where `variant.start_from` names one.
"""

from __future__ import annotations

from pathlib import Path

from harness.agent_run.identity import plan_runs
from harness.agent_run.snapshots import find_snapshot
from harness.agent_run.spec import AgentRunSpec
from harness.agent_run.streams import plan_stream
from harness.agent_run.tasks import plan_tasks
from harness.config import HarnessConfig, endpoint_key


def build_plan(settings: HarnessConfig, run_dir: Path) -> list[AgentRunSpec]:
    """The job's agent runs, planned in the steps the module's docstring lists."""
    settings, tasks = plan_tasks(settings)
    planned = plan_runs(settings)
    behaviour, variant_cfg, start_from = planned.behaviour, planned.variant_cfg, planned.start_from
    embeds, learner = planned.embeds, planned.learner
    stream = settings.stream
    env_cfg = settings.env.instantiable()
    specs = []
    for run_id, seed, order_seed, repeat in planned.runs:
        shown, tuning = plan_stream(tasks, stream, seed, order_seed)
        source = find_snapshot(start_from, seed, order_seed) if start_from else None
        specs.append(AgentRunSpec(
            run_id=run_id,
            repeat=repeat,
            variant=settings.variant.name, variant_cfg=variant_cfg, seed=seed,
            env=settings.env.name, env_cfg=env_cfg, scenario=stream.scenario, order_seed=order_seed,
            tasks=shown,
            probe_every=stream.probe_every, probe_size=stream.probe_size,
            tuning_tasks=tuning,
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

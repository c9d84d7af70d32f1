"""The execute stage of a job: its agent runs on Ray, with a progress bar.

One writer actor (harness/writer.py) and a few agent worker actors (harness/actors.py), each
hosting several agent runs; the driver only waits, watches what the job depends on, and shows the
progress (and sends it to the sweep's live view when the job is part of one).
"""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import ray
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from tqdm import tqdm

from harness.actors import AgentWorker, WorkerReport
from harness.clock import utc_now
from harness.config import HarnessConfig
from harness.errors import RunAborted, disk_full, is_disk_full, one_line, root_cause
from harness.model_client import GatewayUnavailable, ModelUnavailable
from harness.plan import AgentRunSpec, expected_episodes
from harness.progress import JobFigures, progress_actor_name
from harness.records import Episode, RunRow
from harness.runner import RunOutcome
from harness.session import JobSession, check_alive
from harness.summary import read_table
from harness.writer import TableWriter

POLL_S = 0.5
WORKER_RESTARTS = 3
"""How often Ray restarts a dead agent worker (OOM, segfault, kill -9) before the run gives up."""


@dataclass(frozen=True)
class Executed:
    """What the agent runs came back with."""

    outcomes: list[RunOutcome] = field(default_factory=list)
    env_setup_s: dict[str, list[float]] = field(default_factory=dict)
    """Seconds each worker spent building each environment."""


@dataclass(frozen=True)
class JobActors:
    """The actors of one job: where its rows go and who runs its agent runs."""

    job: int | None
    """The job's number in its sweep; None for a single run."""
    writer: ray.actor.ActorHandle
    workers: list[ray.actor.ActorHandle]
    assignments: list[list[AgentRunSpec]]
    """The agent runs of each worker, in the order of `workers`."""


def execute(settings: HarnessConfig, specs: list[AgentRunSpec], run_dir: Path,
            session: JobSession) -> Executed:
    """Run the agent runs not already finished (a resume's) into `run_dir`."""
    specs = [s for s in specs if len(s.finished) < expected_episodes(s)]
    if not specs:
        return Executed()
    job, overrides = _job_identity()
    actors = _start_actors(settings, specs, run_dir, session, job)
    actors.writer.append.remote(RunRow.table, _run_rows(specs, run_dir, job, overrides))
    # Each worker's gateway imports litellm (seconds); wait for them here, not under the progress bar.
    ray.get([actor.__ray_ready__.remote() for actor in (actors.writer, *actors.workers)])
    reports = _run_workers(settings, specs, run_dir, session, actors)
    env_setup_s: dict[str, list[float]] = {}
    for report in reports:
        for env, seconds in report.env_setup_s.items():
            env_setup_s.setdefault(env, []).append(seconds)
    return Executed([o for report in reports for o in report.outcomes], env_setup_s)


def _start_actors(settings: HarnessConfig, specs: list[AgentRunSpec], run_dir: Path, session: JobSession,
                  job: int | None) -> JobActors:
    """The writer and the agent workers, killed when the session ends. Their dashboard names lead
    to the output: the job, the agent runs an actor hosts, the run directory."""
    label = f"job {job}" if job is not None else "job"
    tag = uuid.uuid4().hex[:6]  # a resumed job's new actors must not clash with a dying run's
    writer_name = f"{label} writer {tag}: {run_dir}"
    writer = ray.remote(num_cpus=0)(TableWriter).options(name=writer_name).remote(
        str(run_dir), settings.output.flush_interval_s)
    n_workers = min(settings.ray.num_workers, len(specs))
    assignments = [specs[i::n_workers] for i in range(n_workers)]
    # A worker whose process dies is restarted by Ray and its `run` retried; it carries on from what
    # the writer holds (AgentWorker.run), so the run ends with the rows of an uninterrupted one.
    # SPREAD: on a cluster, workers go to different nodes (their cost is CPU, not num_cpus). Ray
    # sends an actor that asks for no resource at all to a random node, so each asks for one byte.
    models = [settings.model, settings.embedder]
    worker = ray.remote(num_cpus=0, memory=1, max_restarts=WORKER_RESTARTS,
                        max_task_retries=WORKER_RESTARTS)(AgentWorker)
    workers = [worker.options(name=f"{label} agents #{i} {tag}: {', '.join(s.run_id for s in batch)}",
                              scheduling_strategy="SPREAD")
               .remote(writer_name, session.limits_name, models, session.answer_key, settings.cache)
               for i, batch in enumerate(assignments)]
    for actor in (writer, *workers):
        session.stack.callback(ray.kill, actor)
    return JobActors(job, writer, workers, assignments)


def _run_workers(settings: HarnessConfig, specs: list[AgentRunSpec], run_dir: Path, session: JobSession,
                 actors: JobActors) -> list[WorkerReport]:
    """Each worker's agent runs, watched until all are done; the writer is closed (what reached it
    flushed) however that ends."""
    refs = [w.run.remote(a) for w, a in zip(actors.workers, actors.assignments, strict=True)]
    total = sum(expected_episodes(s) - len(s.finished) for s in specs)
    progress = _ProgressReport(settings, specs, run_dir, actors.job, total)
    try:
        _watch(settings, refs, session, actors.writer, progress, total)
        reports = [_vital("an agent worker", ref, session) for ref in refs]
        progress.send(actors.writer, ray.get(actors.writer.poll.remote()), status="finished")
    except BaseException:
        progress.send(actors.writer, None, status="failed")
        raise
    finally:
        # Also on Ctrl-C or a failure: what reached the writer is flushed before its actor is killed.
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(actors.writer.close.remote(), timeout=300)  # compacting a long run's parts takes a while
    return reports


def _watch(settings: HarnessConfig, refs: list[ray.ObjectRef], session: JobSession,
           writer: ray.actor.ActorHandle, progress: _ProgressReport, total: int) -> None:
    """Wait for `refs`, stopping the job in one line if what it depends on dies; the progress bar
    counts the episodes the writer has received."""
    limits = ray.get_actor(session.limits_name)
    pending = list(refs)
    # Workers first build their environments (TextWorld compiles its games once, then caches
    # them): the bar says so until the first episode arrives.
    with tqdm(total=total, unit="episode", disable=not settings.progress, file=sys.stderr,
              desc=f"setting up {settings.env.name}") as bar:
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
            check_alive(session.servers, session.resume_hint)
            _vital("the model limits actor", limits.__ray_ready__.remote(), session)
            counts = _vital("the writer actor", writer.poll.remote(), session)
            if counts[Episode.table] and bar.n == 0:
                bar.set_description_str("")
            bar.update(counts[Episode.table] - bar.n)
            progress.send(writer, counts)


class _ProgressReport:
    """Sends this job's live figures to its sweep's progress actor (harness/progress.py), if any."""

    def __init__(self, settings: HarnessConfig, specs: list[AgentRunSpec], run_dir: Path, job: int | None,
                 planned: int) -> None:
        self.actor = None
        if settings.ray.limits is not None and job is not None:
            with contextlib.suppress(ValueError):  # no sweep view: nothing to report to
                self.actor = ray.get_actor(progress_actor_name(settings.ray.limits))
        budget = settings.budget
        self.figures = JobFigures(
            job=job or 0, run_dir=str(run_dir), episodes_planned=planned,
            budget_tokens=budget.max_tokens * len(specs) if budget.max_tokens else None,
            budget_usd=budget.max_cost_usd * len(specs) if budget.max_cost_usd else None)

    def send(self, writer: ray.actor.ActorHandle, counts: dict[str, int] | None,
             status: str = "running") -> None:
        if self.actor is None:
            return
        update: dict[str, Any] = {"status": status}
        if counts is not None:
            update.update(ray.get(writer.figures.remote()), episodes_done=counts[Episode.table])
        self.figures = self.figures.model_copy(update=update)
        self.actor.update.remote(self.figures)


def _job_identity() -> tuple[int | None, list[str]]:
    """This job's number in its sweep (None for a single run) and its command-line overrides."""
    if not HydraConfig.initialized():
        return None, []
    hydra_cfg = HydraConfig.get()
    overrides = [o for o in hydra_cfg.overrides.task if not o.startswith(("ray.limits=", "progress="))]
    return (int(hydra_cfg.job.num) if hydra_cfg.mode == RunMode.MULTIRUN else None), overrides


def _run_rows(specs: list[AgentRunSpec], run_dir: Path, job: int | None,
              overrides: list[str]) -> list[dict[str, Any]]:
    """A `runs` row for each agent run not already described there (a resume adds none)."""
    known = set(read_table(run_dir, RunRow.table).get_column("run_id", default=pl.Series([])).to_list())
    return [RunRow(run_id=s.run_id, variant=s.variant, env=s.env, seed=s.seed, order_seed=s.order_seed,
                   scenario=s.scenario, model=s.model, job=job, overrides=" ".join(overrides),
                   settings=json.dumps(s.settings, sort_keys=True), started_at=utc_now()).model_dump()
            for s in specs if s.run_id not in known]


def _vital(what: str, ref: ray.ObjectRef, session: JobSession) -> Any:
    """`ray.get` of something the run cannot do without; if its actor died, stop the run with one
    line saying what died (or that the disk is full, and where) and how to resume."""
    resume_hint = session.resume_hint
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as error:
        cause = root_cause(error)
        if is_disk_full(error):
            raise disk_full(session.run_dir, cause).with_hint(resume_hint) from None
        if isinstance(cause, (GatewayUnavailable, ModelUnavailable)):
            raise RunAborted(f"{cause}; {resume_hint}") from None
        if isinstance(error, ray.exceptions.RayActorError):
            raise RunAborted(f"{what} died ({one_line(error, 200)}); {resume_hint}") from None
        raise RunAborted(f"{what} failed ({one_line(error, 300)}); {resume_hint}") from None
